"""Fixed token windows with overlap (512 tokens, 50 overlap by default): the classic baseline. Windows start and
end on token boundaries, so consecutive chunks overlap by about `overlap` tokens (declared in `params`)."""

from __future__ import annotations

from dataclasses import dataclass

from connector import tokens
from connector.chunkers.base import Split, make_chunk
from connector.models import Document


@dataclass(frozen=True)
class TokenWindowChunker:
    size: int
    overlap: int
    encoding: str
    name: str = "token_window"

    @property
    def params(self) -> dict:
        return {"size": self.size, "overlap": self.overlap, "overlapping": True}

    def split(self, document: Document) -> Split:
        text = document.markdown
        enc = tokens.encoding(self.encoding)
        ids = enc.encode_ordinary(text)
        decoded, offsets = enc.decode_with_offsets(ids)
        if decoded != text:  # cannot happen for valid text; guards the offset contract if it ever does
            raise ValueError("tokenizer round trip changed the text")
        step = max(1, self.size - self.overlap)
        chunks = []
        for i in range(0, len(ids), step):
            end = offsets[i + self.size] if i + self.size < len(ids) else len(text)
            if (chunk := make_chunk(text, offsets[i], end, self.encoding)) is not None:
                chunks.append(chunk)
            if i + self.size >= len(ids):
                break
        return Split(chunks)
