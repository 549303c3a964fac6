"""Markdown sections: a chunk per heading and the text under it (up to the next heading of any level); a section
over `max_tokens` is split with the recursive splitter. Not applicable to a document without headings.

With `merge`, consecutive sections are packed into one chunk while it stays within `max_tokens` (a run of short
sections — a FAQ's entries, a reference page's options — becomes one chunk instead of a row of tiny ones, which the
tiny guard would glue together without regard for headings); a chunk still only ever ends where a section does.
"""

from __future__ import annotations

from dataclasses import dataclass

from connector.chunkers.base import Split, make_chunk
from connector.chunkers.recursive import split_span
from connector.errors import NotApplicable
from connector.models import Chunk, Document


@dataclass(frozen=True)
class SectionsChunker:
    max_tokens: int
    encoding: str
    name: str = "sections"
    merge: bool = False

    @property
    def params(self) -> dict:
        return {"max_tokens": self.max_tokens, "merge": self.merge}

    def split(self, document: Document) -> Split:
        text = document.markdown
        starts = [b.start for b in document.blocks if b.kind == "heading"]
        if not starts:
            raise NotApplicable("document has no headings")
        bounds = sorted({0, *starts}) + [len(text)]
        sections = [c for a, b in zip(bounds, bounds[1:], strict=False) if (c := make_chunk(text, a, b, self.encoding))]
        chunks: list[Chunk] = []
        for section in sections:
            if section.token_count > self.max_tokens:
                chunks.extend(split_span(text, section.start, section.end, self.max_tokens, self.encoding,
                                         overlap_tokens=0))  # fmt: skip
                continue
            if self.merge and chunks and chunks[-1].token_count + section.token_count <= self.max_tokens:
                merged = make_chunk(text, chunks[-1].start, section.end, self.encoding)
                if merged is not None and merged.token_count <= self.max_tokens:
                    chunks[-1] = merged
                    continue
            chunks.append(section)
        return Split(chunks)
