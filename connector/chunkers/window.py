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
        ids = tokens.document_ids(text, self.encoding)  # encoded once per document (`tokens.prime`)
        step = max(1, self.size - self.overlap)
        starts = range(0, len(ids), step)
        # Character offsets of the window edges. ASCII text: a token's bytes are its characters, so each edge is where
        # the token before it ends (`tokens.prime` added their lengths up already), or the previous edge plus the
        # length of the tokens between (one Rust call per window). Otherwise every token's offset from tiktoken (a
        # Python loop over all tokens), which also handles tokens that split a character.
        ascii_text = text.isascii()
        ends = tokens.primed_token_ends(text, self.encoding) if ascii_text else None
        if ends is not None:

            def offset(k: int) -> int:
                return int(ends[k - 1]) if k else 0
        elif ascii_text:
            edge = {0: 0}
            for i in starts:
                if i + step < len(ids):
                    edge[i + step] = edge[i] + len(enc.decode_bytes(ids[i : i + step].tolist()))
                if i + self.size < len(ids):
                    edge[i + self.size] = edge[i] + len(enc.decode_bytes(ids[i : i + self.size].tolist()))

            def offset(k: int) -> int:
                return edge[k]
        else:
            # Cannot happen for valid text; guards the offset contract if it ever does.
            if enc.decode(ids.tolist()) != text:
                raise ValueError("tokenizer round trip changed the text")
            edges = char_offsets(enc, ids, sorted({k for i in starts for k in (i, i + self.size) if k < len(ids)}))

            def offset(k: int) -> int:
                return edges[k]

        chunks = []
        for i in starts:
            end = offset(i + self.size) if i + self.size < len(ids) else len(text)
            if (chunk := make_chunk(text, offset(i), end, self.encoding)) is not None:
                chunks.append(chunk)
            if i + self.size >= len(ids):
                break
        return Split(chunks)


_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that continue a character


def char_offsets(enc, ids, edges: list[int]) -> dict[int, int]:
    """`enc.decode_with_offsets(ids)[1][k]` for each k of `edges` (ascending): the characters before token k (less
    one where token k starts inside a character). Worked out between the edges only: the offsets of every token,
    as Python ints, and its bytes, as a bytes object each, took 850 MB for a 20 MB text."""
    out: dict[int, int] = {}
    chars, at = 0, 0
    for k in edges:
        chars += len(enc.decode_bytes(ids[at:k].tolist()).translate(None, _CONTINUATION))
        at = k
        inside = enc.decode_single_token_bytes(int(ids[k]))[0] in _CONTINUATION
        out[k] = max(0, chars - inside)
    return out
