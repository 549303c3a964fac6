"""Values passed between pipeline stages. All frozen; offsets are character offsets into `Document.markdown`.

SourceDocument → Document → Candidate → Scored → (winner) → EmbeddedChunk → stored
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """Raw bytes of one document as claimed from the queue, before conversion."""

    id: int
    source: str  # "folder" | "sql"
    source_key: str
    title: str | None
    data: bytes
    mime_type: str
    content_hash: str  # sha256 hex of `data`


@dataclass(frozen=True, slots=True)
class Block:
    """A span that a cut should not break (Block Integrity counts the ones that are)."""

    start: int
    end: int
    kind: str = "paragraph"


@dataclass(frozen=True, slots=True)
class Document:
    """Converted text that every later offset refers to.

    `page_starts[i]` is the offset where page `i + 1` begins; empty when the format has no pages.
    """

    markdown: str
    blocks: tuple[Block, ...]
    page_starts: tuple[int, ...] = ()
    headings: tuple[tuple[int, int, str], ...] = ()  # (offset, level, title) of each Markdown heading

    def page_at(self, offset: int) -> int | None:
        if not self.page_starts:
            return None
        return max(1, bisect.bisect_right(self.page_starts, offset))

    def section_path_at(self, offset: int) -> tuple[str, ...]:
        """Titles of the headings enclosing `offset`, outermost first."""
        stack: list[tuple[int, str]] = []
        for start, level, title in self.headings:
            if start > offset:
                break
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
        return tuple(title for _, title in stack)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a candidate: `document.markdown[start:end] == text`."""

    start: int
    end: int
    text: str
    token_count: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """The chunks one strategy produced for one document (after guards when `guarded`)."""

    strategy: str
    chunks: tuple[Chunk, ...]
    params: dict = field(default_factory=dict, hash=False, compare=False)
    elapsed_ms: float = 0.0
    error: str | None = None  # set when the strategy raised: it is recorded but cannot win


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate with its metric values (None where undefined) and weighted score."""

    candidate: Candidate
    metrics: dict[str, float | None]
    score: float | None
    elapsed_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class EmbeddedChunk:
    """A winning chunk ready to store."""

    ordinal: int
    chunk: Chunk
    embedding: tuple[float, ...] | object  # numpy row; kept opaque so this module needs no numpy
    page_start: int | None
    page_end: int | None
    section_path: tuple[str, ...]
    embed_windows: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """Everything written for one document in one transaction."""

    document: Document
    scored: tuple[Scored, ...]
    winner: Scored
    chunks: tuple[EmbeddedChunk, ...]
    timings: dict[str, float] = field(default_factory=dict, hash=False, compare=False)  # stage → milliseconds
