"""One chunk per page (algorithm-spec §2); a document without pages is one chunk, which the guards then re-split."""

from __future__ import annotations

from dataclasses import dataclass

from connector.chunkers.base import make_chunk
from connector.models import Chunk, Document


@dataclass(frozen=True)
class PageChunker:
    encoding: str = "o200k_base"
    name: str = "page"

    @property
    def params(self) -> dict:
        return {"encoding": self.encoding}

    def split(self, document: Document) -> list[Chunk]:
        text = document.markdown
        starts = list(document.page_starts) or [0]
        bounds = [*starts, len(text)]
        chunks = (make_chunk(text, a, b, self.encoding) for a, b in zip(bounds, bounds[1:], strict=False))
        return [c for c in chunks if c is not None]
