"""The rows the connector's reads return, one frozen dataclass per result shape, in the order of their queries in
queries.py. Each is read through `cursor(row_factory=class_row(...))`: a field is named after its column (aliased in
the SQL where the column's own name would read badly), so a column added to a query without its field fails loudly.

`ClaimedRow` (CLAIM_NEXT, INGEST_FILE) lives in store.py: it is more than a row, it reads its document's bytes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

FileSignature = tuple[int, int, int]
"""A folder file's (st_size, st_mtime_ns, st_ctime_ns) when it was hashed. The ctime is there because tools that keep
the mtime (`rsync -a`, `cp -p`, `tar x`) can replace bytes at the same size and mtime; no tool can set a ctime back."""


@dataclass(frozen=True, slots=True)
class FolderSignature:
    """FOLDER_SIGNATURES: what a rescan knows of a folder row without reading its file."""

    source_key: str
    file_path: str
    file_size: int | None
    file_mtime_ns: int | None
    file_ctime_ns: int | None  # NULL on rows hashed before migration 0017: their files are hashed once more
    read: bool  # its bytes were hashed (not for unreadable, too large, unsupported files, or older rows)

    @property
    def signature(self) -> FileSignature | None:
        """(size, mtime_ns, ctime_ns) when the file was last hashed; None when not all three were recorded."""
        if self.file_size is None or self.file_mtime_ns is None or self.file_ctime_ns is None:
            return None
        return (self.file_size, self.file_mtime_ns, self.file_ctime_ns)


@dataclass(frozen=True, slots=True)
class DocumentKey:
    """RETRY_FAILED, DELETE_FOLDER_DOCUMENTS, DELETE_REPLACED, RENAME_FOLDER_DOCUMENTS: a document requeued, removed
    or renamed (under its new key)."""

    id: int
    source_key: str


@dataclass(frozen=True, slots=True)
class Lease:
    """IN_FLIGHT: a document being processed, and who holds it until when."""

    id: int
    source_key: str
    claimed_by: str | None
    attempts: int
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class StatusCount:
    """STATUS_COUNTS."""

    status: str
    documents: int


@dataclass(frozen=True, slots=True)
class Failure:
    """LAST_ERRORS: a failed document, most recent first."""

    id: int
    source: str
    source_key: str
    attempts: int
    last_error: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class LastError:
    """ERRORS_OF."""

    id: int
    source_key: str
    last_error: str | None


@dataclass(frozen=True, slots=True)
class NearestChunk:
    """NEAREST_CHUNKS."""

    source_key: str
    text: str


@dataclass(frozen=True, slots=True)
class DoneDocument:
    """DOCUMENTS_BY_KEY: a stored document's source, to ingest again elsewhere."""

    id: int
    source: str
    source_key: str
    title: str | None
    content: str | None
    content_bytes: bytes | None
    mime_type: str | None
    file_path: str | None


@dataclass(frozen=True, slots=True)
class ChunkStats:
    """CHUNK_STATS: over some documents."""

    documents: int  # with chunks
    chunks: int
    mean_tokens: Decimal


@dataclass(frozen=True, slots=True)
class StrategyWins:
    """WINNERS."""

    strategy: str
    wins: int


@dataclass(frozen=True, slots=True)
class FoundDocument:
    """FIND_DOCUMENT."""

    id: int
    source: str
    source_key: str
    status: str
    strategy: str | None
    score: float | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class StoredCandidate:
    """CANDIDATES_OF: one candidate chunking of a document, best first."""

    strategy: str
    chunk_count: int
    rc: float | None
    icc: float | None
    dcc: float | None
    bi: float | None
    sc: float | None
    rt: float | None
    score: float | None
    elapsed_ms: float
    chosen: bool
    error: str | None  # why it did not run
    params: dict
    rc_backend: str | None
    metric_ms: dict
    shape: dict  # `connector.metrics.shape_of`


@dataclass(frozen=True, slots=True)
class StrategyMeans:
    """STRATEGY_REPORT: one strategy (or `adaptive`, the chosen candidates) over the documents it ran on."""

    strategy: str
    documents: int
    wins: int
    rc: float | None  # rc … score: means
    icc: float | None
    dcc: float | None
    bi: float | None
    sc: float | None
    rt: float | None
    score: float | None
    chunks: Decimal | None  # mean per document


@dataclass(frozen=True, slots=True)
class FolderFile:
    """FOLDER_FILES_UNDER."""

    source_key: str
    file_path: str


@dataclass(frozen=True, slots=True)
class ResolvedTable:
    """RESOLVE_TABLE: a user table `watch-table` was given."""

    oid: int
    qualified: str  # schema-qualified, quoted where needed, as Postgres prints it
    schema: str
    name: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A row of `connector.search()`, best first."""

    chunk_id: int
    document_id: int
    source_key: str
    title: str | None
    text: str
    section_path: list[str]
    page_start: int | None
    page_end: int | None
    chunk_type: str
    score: float
    strategy: str
    prev_chunk_id: int | None
    next_chunk_id: int | None


@dataclass(frozen=True, slots=True)
class Passage:
    """A row of `connector.search_context()`: a hit and its neighbours as one span of the document."""

    document_id: int
    first_chunk_id: int
    last_chunk_id: int
    text: str
    section_path: list[str]
    page_start: int | None
    page_end: int | None


@dataclass(frozen=True, slots=True)
class EndedSession:
    """A replica's session found stuck mid-write holding queued rows, and ended the second time it is found so with
    nothing received meanwhile (`queries.END_STUCK_WRITERS`)."""

    pid: int
    client: str | None  # its address; None over a Unix socket
    stuck_s: float
    since: datetime  # its statement's start
    received: int  # the bytes its COPY received; -1 outside a COPY
    ended: bool | None  # None: not ended (first found so, or it received more since); False: already gone


@dataclass(frozen=True, slots=True)
class GivenBack:
    """What a worker gave back on reconnecting (`Store.release_mine`)."""

    abandoned: int  # being written when the connection was lost, and not done: each claimed again alone
    released: int  # held, handed back as they were

    @property
    def total(self) -> int:
        return self.abandoned + self.released
