"""Reads for the web UI (`connector.web.ui`): a page of documents, one document with its chunks and candidates'
cuts, one chunk with its place in the document, and the queue's rows. Read-only but for `retry`, which is
`connector retry` for one document id. Each function runs in its own transaction and returns typed rows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

from connector.db import queries
from connector.db.rows import DocumentKey, StoredCandidate

STATUSES = ("pending", "processing", "done", "failed")


@dataclass(frozen=True, slots=True)
class DocumentLine:
    """DOCUMENTS_PAGE: one line of the documents page."""

    id: int
    source: str
    source_key: str
    title: str | None
    status: str
    strategy: str | None
    score: float | None
    chunks: int
    attempts: int
    retry_after: datetime | None
    last_error: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DocumentPage:
    lines: list[DocumentLine]
    total: int  # matching the filters, over every page
    strategies: list[str]  # every strategy that won a document, for the filter


@dataclass(frozen=True, slots=True)
class DocumentView:
    """DOCUMENT_VIEW."""

    id: int
    source: str
    source_key: str
    title: str | None
    status: str
    strategy: str | None
    score: float | None
    markdown: str | None
    blocks: list | None
    page_count: int | None
    mime_type: str | None
    content_bytes: int | None
    attempts: int
    last_error: str | None
    processed_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ChunkLine:
    """CHUNKS_OF_DOCUMENT: a stored chunk without its text or vectors (the text is the document's, by offsets)."""

    id: int
    ordinal: int
    start_char: int
    end_char: int
    token_count: int
    section_path: list[str]
    page_start: int | None
    page_end: int | None
    chunk_type: str


@dataclass(frozen=True, slots=True)
class CandidateCuts:
    """CANDIDATE_CUTS_OF: where one candidate cuts, and what its cuts break (migration 0011)."""

    strategy: str
    chosen: bool
    spans: list[int] | None  # [start_1, end_1, ...]; None for a candidate scored before 0011, or one that failed
    breaks: list[dict]


@dataclass(frozen=True, slots=True)
class ChunkView:
    """CHUNK_VIEW: one chunk, its document, and where it sits in it."""

    id: int
    document_id: int
    ordinal: int
    text: str
    token_count: int
    start_char: int
    end_char: int
    page_start: int | None
    page_end: int | None
    section_path: list[str]
    chunk_type: str
    strategy: str
    prev_chunk_id: int | None
    next_chunk_id: int | None
    source_key: str
    title: str | None
    document_chars: int | None
    document_chunks: int


@dataclass(frozen=True, slots=True)
class QueueLine:
    """QUEUE_ROWS: a document waiting (backing off) or held (processing)."""

    id: int
    source_key: str
    status: str
    claimed_by: str | None
    attempts: int
    retries: int
    since: datetime
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    retry_after: datetime | None
    last_error: str | None


# Filters are optional: NULL matches everything. The count of chunks reads the (document_id, ordinal) unique index
# per line shown.
DOCUMENTS_PAGE = """
SELECT d.id, d.source, d.source_key, d.title, d.status, d.strategy, d.score,
       (SELECT count(*) FROM connector.chunks c WHERE c.document_id = d.id) AS chunks,
       d.attempts, d.retry_after, d.last_error, d.updated_at
FROM connector.documents d
WHERE (%(status)s::text IS NULL OR d.status = %(status)s)
  AND (%(strategy)s::text IS NULL OR d.strategy = %(strategy)s)
  AND (%(key)s::text IS NULL OR strpos(lower(d.source_key), lower(%(key)s)) > 0)
ORDER BY d.updated_at DESC, d.id DESC
LIMIT %(limit)s OFFSET %(offset)s
"""

DOCUMENTS_COUNT = """
SELECT count(*) FROM connector.documents d
WHERE (%(status)s::text IS NULL OR d.status = %(status)s)
  AND (%(strategy)s::text IS NULL OR d.strategy = %(strategy)s)
  AND (%(key)s::text IS NULL OR strpos(lower(d.source_key), lower(%(key)s)) > 0)
"""

STRATEGIES = "SELECT DISTINCT strategy FROM connector.documents WHERE strategy IS NOT NULL ORDER BY 1"

DOCUMENT_VIEW = """
SELECT id, source, source_key, title, status, strategy, score, markdown, blocks, page_count, mime_type,
       content_bytes, attempts, last_error, processed_at, updated_at
FROM connector.documents WHERE id = %s
"""

CHUNKS_OF_DOCUMENT = """
SELECT id, ordinal, start_char, end_char, token_count, section_path, page_start, page_end, chunk_type
FROM connector.chunks WHERE document_id = %s ORDER BY ordinal
"""

CANDIDATE_CUTS_OF = """
SELECT strategy, chosen, spans, breaks FROM connector.candidates WHERE document_id = %s
"""

CHUNK_VIEW = """
SELECT c.id, c.document_id, c.ordinal, c.text, c.token_count, c.start_char, c.end_char, c.page_start, c.page_end,
       c.section_path, c.chunk_type, c.strategy, c.prev_chunk_id, c.next_chunk_id, d.source_key, d.title,
       length(d.markdown) AS document_chars,
       (SELECT count(*) FROM connector.chunks o WHERE o.document_id = c.document_id) AS document_chunks
FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id
WHERE c.id = %s
"""

# What `connector status` calls backing off (pending, retry_after in the future) and processing.
QUEUE_ROWS = """
SELECT id, source_key, status, claimed_by, attempts, retries, updated_at AS since, heartbeat_at, lease_expires_at,
       retry_after, last_error
FROM connector.documents
WHERE status = 'processing' OR (status = 'pending' AND retry_after > now())
ORDER BY status DESC, updated_at
LIMIT %s
"""

RETRY_ONE = """
UPDATE connector.documents
SET status = 'pending', retries = 0, retry_after = NULL, failed_hash = NULL, updated_at = now()
WHERE status = 'failed' AND id = %s
RETURNING id, source_key
"""


@contextlib.contextmanager
def snapshot(conn: psycopg.Connection) -> Iterator[None]:
    """One read-only transaction that sees one commit: a page's several reads never mix a document's old chunks
    with its new candidates while a worker writes it. Transactions opened inside it are savepoints of it."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:  # inside one already: its snapshot
        with conn.transaction():
            yield
        return
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def documents(
    conn: psycopg.Connection, *, status: str | None, strategy: str | None, key: str | None, limit: int, offset: int
) -> DocumentPage:
    params = {"status": status, "strategy": strategy, "key": key, "limit": limit, "offset": offset}
    with snapshot(conn):
        with conn.cursor(row_factory=class_row(DocumentLine)) as cur:
            lines = cur.execute(DOCUMENTS_PAGE, params).fetchall()
        total = conn.execute(DOCUMENTS_COUNT, params).fetchone()[0]
        strategies = [r[0] for r in conn.execute(STRATEGIES)]
    return DocumentPage(lines, total, strategies)


def document(conn: psycopg.Connection, document_id: int) -> tuple[DocumentView | None, list[ChunkLine], list]:
    """The document, its stored chunks in order, and its candidates: `(StoredCandidate, CandidateCuts)` pairs,
    best first (as `connector explain` lists them)."""
    with snapshot(conn):
        with conn.cursor(row_factory=class_row(DocumentView)) as cur:
            doc = cur.execute(DOCUMENT_VIEW, (document_id,)).fetchone()
        if doc is None:
            return None, [], []
        with conn.cursor(row_factory=class_row(ChunkLine)) as cur:
            chunks = cur.execute(CHUNKS_OF_DOCUMENT, (document_id,)).fetchall()
        with conn.cursor(row_factory=class_row(StoredCandidate)) as cur:
            scored = cur.execute(queries.CANDIDATES_OF, (document_id,)).fetchall()
        with conn.cursor(row_factory=class_row(CandidateCuts)) as cur:
            cuts = {c.strategy: c for c in cur.execute(CANDIDATE_CUTS_OF, (document_id,))}
    return doc, chunks, [(s, cuts.get(s.strategy)) for s in scored]


def chunk(conn: psycopg.Connection, chunk_id: int) -> tuple[ChunkView | None, list[ChunkLine]]:
    """The chunk, and every chunk of its document in order (where it sits)."""
    with snapshot(conn):
        with conn.cursor(row_factory=class_row(ChunkView)) as cur:
            found = cur.execute(CHUNK_VIEW, (chunk_id,)).fetchone()
        if found is None:
            return None, []
        with conn.cursor(row_factory=class_row(ChunkLine)) as cur:
            return found, cur.execute(CHUNKS_OF_DOCUMENT, (found.document_id,)).fetchall()


def queue_rows(conn: psycopg.Connection, limit: int) -> list[QueueLine]:
    with snapshot(conn), conn.cursor(row_factory=class_row(QueueLine)) as cur:
        return cur.execute(QUEUE_ROWS, (limit,)).fetchall()


def retry(conn: psycopg.Connection, document_id: int) -> DocumentKey | None:
    """`connector retry ID`: a failed document back in the queue with a fresh budget of tries; None when it is not
    failed (done meanwhile, or already requeued)."""
    with conn.transaction(), conn.cursor(row_factory=class_row(DocumentKey)) as cur:
        return cur.execute(RETRY_ONE, (document_id,)).fetchone()
