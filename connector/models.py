"""Values passed between pipeline stages. All frozen; offsets are character offsets into `Document.markdown`.

SourceDocument → Document → Candidate → Scored → (winner) → EmbeddedChunk → stored
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass, field, fields

from connector.embedders.base import ModelSpec


def _pickled_by_value(cls):
    """Pickle as (class, field values), rebuilt through `__init__`. A slotted dataclass's own `__getstate__` and
    `__setstate__` call `dataclasses.fields()` for every object: shipping a chosen document (~45 such objects) between
    a pool process and the sidecar cost 0.19 ms each way, more than half of it there."""
    get = operator.attrgetter(*(f.name for f in fields(cls)))
    cls.__reduce__ = lambda self: (cls, get(self))
    return cls


@_pickled_by_value
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


BLOCK_KINDS = ("heading", "paragraph", "table", "list", "code", "caption", "footnote")


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class Block:
    """A structural span of the Markdown (a heading, a paragraph, a table, ...). A document's blocks tile its text:
    in order, without gaps or overlaps; whitespace between two blocks belongs to the first."""

    start: int
    end: int
    kind: str = "paragraph"
    section_path: tuple[str, ...] = ()  # titles of the enclosing headings, outermost first (a heading includes itself)
    page: int | None = None


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class Document:
    """Converted text that every later offset refers to.

    `blocks` tile the text; `units` are the protected spans Block Integrity scores and chunkers try not to cut: blocks
    joined where no cut should fall (after a heading, before a footnote, between a list and its lead-in, between two
    short paragraphs). `page_starts[i]` is the offset where page `i + 1` begins; empty when the format has no pages.
    """

    markdown: str
    blocks: tuple[Block, ...]
    page_starts: tuple[int, ...] = ()
    units: tuple[Block, ...] = ()
    title: str | None = None  # what the document calls itself (metadata, <title>, first heading); None: it does not

    def page_at(self, offset: int) -> int | None:
        if not self.page_starts:
            return None
        return max(1, bisect.bisect_right(self.page_starts, offset))

    def block_at(self, offset: int) -> Block | None:
        if not self.blocks:
            return None
        i = bisect.bisect_right([b.start for b in self.blocks], offset) - 1
        return self.blocks[max(0, i)]

    def section_path_at(self, offset: int) -> tuple[str, ...]:
        """Titles of the headings enclosing `offset`, outermost first."""
        block = self.block_at(offset)
        return block.section_path if block else ()


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a candidate: `document.markdown[start:end] == text`."""

    start: int
    end: int
    text: str
    token_count: int


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """A chunk of a candidate that lost, as the sidecar holds it: where it lies and its size, not its text (which is
    `document.markdown[start:end]`). The sidecar stores only the losers' spans; with their texts, a long document's
    candidates held about ten times its text there (most of the sidecar's 963 MB at 50 MB of text)."""

    start: int
    end: int
    token_count: int


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class Candidate:
    """The chunks one strategy produced for one document (after guards when `guarded`); a losing candidate's as
    spans once its document is chosen (`pipeline.Chosen.shipped`)."""

    strategy: str
    chunks: tuple[Chunk, ...] | tuple[ChunkSpan, ...]
    params: dict = field(default_factory=dict, hash=False, compare=False)
    elapsed_ms: float = 0.0
    error: str | None = None  # set when the strategy raised: it is recorded but cannot win
    raw_token_counts: tuple[int, ...] = ()  # the strategy's own chunk sizes, before the guards repaired them


@_pickled_by_value
@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate with its metric values (None where undefined) and weighted score."""

    candidate: Candidate
    metrics: dict[str, float | None]
    score: float | None
    elapsed_ms: float = 0.0  # scoring time of this candidate (its share of the document-wide work excluded)
    metric_ms: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    rc_backend: str | None = None  # the coreference backend behind `metrics["rc"]`
    shape: dict = field(default_factory=dict, hash=False, compare=False)  # sizes and cuts (`metrics.shape_of`)
    breaks: tuple[dict, ...] = field(default=(), hash=False, compare=False)  # what each cut breaks (`metrics.breaks`)


@dataclass(frozen=True, slots=True)
class EmbeddedWindow:
    """One model window of a stored chunk: its span in the document's Markdown and its own vector."""

    start: int
    end: int
    embedding: object  # numpy row; kept opaque so this module needs no numpy


@dataclass(frozen=True, slots=True)
class EmbeddedChunk:
    """A winning chunk ready to store."""

    ordinal: int
    chunk: Chunk
    embedding: tuple[float, ...] | object  # numpy row: the token-weighted mean of the windows' vectors
    page_start: int | None
    page_end: int | None
    section_path: tuple[str, ...]
    windows: tuple[EmbeddedWindow, ...]
    chunk_type: str = "text"  # text, table, list or code

    @property
    def embed_windows(self) -> int:
        return len(self.windows)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Everything written for one document in one transaction."""

    document: Document
    scored: tuple[Scored, ...]
    winner: Scored
    chunks: tuple[EmbeddedChunk, ...]
    timings: dict[str, float] = field(default_factory=dict, hash=False, compare=False)  # stage → milliseconds
    title: str | None = None  # the document's title as stored (see `pipeline.document_title`)
    embedding: dict[str, int] | None = field(default=None, hash=False, compare=False)  # {"embedded", "cached"} chunks
    model: ModelSpec | None = None  # the model that embedded the chunks; the writer checks it is the active one
    # `scored`'s rows of connector.candidates, made where the document was chosen (`pipeline.Chosen.shipped`); empty:
    # made by the writer
    candidate_rows: tuple[bytes, ...] = field(default=(), hash=False, compare=False)
