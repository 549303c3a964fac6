"""What every chunking strategy provides, and the span helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from connector import tokens
from connector.models import Chunk, Document
from connector.visible import blank


@dataclass(frozen=True, slots=True)
class Split:
    """What a strategy made of one document: its chunks in document order, with exact offsets into
    `document.markdown`, and notes recorded with the candidate (e.g. the regex an LLM wrote)."""

    chunks: list[Chunk]
    notes: dict = field(default_factory=dict)


class Chunker(Protocol):
    """A strategy: `name` is what the database stores in `strategy`; `params` are recorded with each candidate."""

    name: str

    @property
    def params(self) -> dict: ...

    def split(self, document: Document) -> Split: ...


def trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) so that it neither starts nor ends with whitespace or an invisible character (a zero-width
    space, a BOM: `connector.visible`), which a reader would not see and an embedder would only take as noise."""
    while start < end and blank(text[start]):
        start += 1
    while end > start and blank(text[end - 1]):
        end -= 1
    return start, end


def make_chunk(text: str, start: int, end: int, encoding: str) -> Chunk | None:
    """A chunk over the trimmed span, or None when the span holds only whitespace."""
    start, end = trim(text, start, end)
    if start == end:
        return None
    return Chunk(start=start, end=end, text=text[start:end], token_count=tokens.count_span(text, start, end, encoding))
