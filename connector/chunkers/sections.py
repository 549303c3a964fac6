"""Markdown sections: a chunk per heading and the text under it (up to the next heading of any level); a section
over `max_tokens` is split with the recursive splitter. Not applicable to a document without headings."""

from __future__ import annotations

from dataclasses import dataclass

from connector.chunkers.base import make_chunk
from connector.chunkers.recursive import split_span
from connector.errors import NotApplicable
from connector.models import Chunk, Document


@dataclass(frozen=True)
class SectionsChunker:
    max_tokens: int
    encoding: str
    name: str = "sections"

    @property
    def params(self) -> dict:
        return {"max_tokens": self.max_tokens}

    def split(self, document: Document) -> list[Chunk]:
        text = document.markdown
        starts = [b.start for b in document.blocks if b.kind == "heading"]
        if not starts:
            raise NotApplicable("document has no headings")
        bounds = sorted({0, *starts}) + [len(text)]
        chunks: list[Chunk] = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            chunk = make_chunk(text, a, b, self.encoding)
            if chunk is None:
                continue
            if chunk.token_count > self.max_tokens:
                chunks.extend(split_span(text, a, b, self.max_tokens, self.encoding, overlap_tokens=0))
            else:
                chunks.append(chunk)
        return chunks
