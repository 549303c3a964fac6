"""One chunk per page (algorithm-spec §2). Not applicable to documents without pages: there, one "page" would be the
whole text re-split by the oversize guard, a copy of `recursive_1100` that would only win ties under a wrong name."""

from __future__ import annotations

from dataclasses import dataclass

from connector.chunkers.base import Split, make_chunk
from connector.errors import NotApplicable
from connector.models import Document


@dataclass(frozen=True)
class PageChunker:
    encoding: str
    name: str = "page"

    @property
    def params(self) -> dict:
        return {"encoding": self.encoding}

    def split(self, document: Document) -> Split:
        if not document.page_starts:
            raise NotApplicable("document has no pages")
        text = document.markdown
        starts = list(document.page_starts)
        bounds = [*starts, len(text)]
        chunks = (make_chunk(text, a, b, self.encoding) for a, b in zip(bounds, bounds[1:], strict=False))
        return Split([c for c in chunks if c is not None])
