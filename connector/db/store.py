"""Typed operations on the connector schema. One `Store` per connection; a connection is used by one thread."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from connector.db import candidate_rows, embeddings, queries
from connector.db.rows import (
    DocumentKey,
    EndedSession,
    Failure,
    FileSignature,
    FolderFile,
    FolderSignature,
    FoundDocument,
    GivenBack,
    LastError,
    Lease,
    Passage,
    SearchHit,
    StatusCount,
    StoredCandidate,
    StrategyMeans,
)
from connector.errors import ConnectionLostBeforeWrite, DocumentError, FileGone, TransientError
from connector.models import Block, Outcome, SourceDocument
from connector.sources.files import NotRegularFile, TooLarge, read_regular

SHORT_BYTES = 20_000
# The candidates' COPY is written in pieces of about this size: each write is a round of psycopg's wait (one per
# document was 10 % of a 600-character row's writing), and the whole of a long document's at once is its size again.
COPY_WRITE_BYTES = 1 << 20
# What `retry_later` says when another session kept the row locked: nothing recorded (see `Store._update_own`).
LOCKED = "locked"


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A queue row this worker now holds under a lease."""

    id: int
    source: str
    source_key: str
    title: str | None
    content: str | None
    content_bytes: bytes | None
    mime_type: str | None
    file_path: str | None
    content_hash: str | None  # hash of the bytes the stored chunks came from, if any
    attempts: int  # the claim token: our writes land only while the row still carries it
    content_size: int | None = None  # bytes of its content column; over queries.INLINE_BYTES, not yet read
    retries: int = 0  # tries that failed or were abandoned since the content last changed (this one not counted)
    abandoned: bool = False  # claimed from a holder that died (alone): a suspect, run alone in the CPU pool
    file_size: int | None = None  # a file's size when it was queued (folder rows)
    last_error: str | None = None  # an abandoned row's: why its holder gave it up, if it said (past its deadline)

    @property
    def size(self) -> int:
        """Bytes of its content as the claim knows them: a file's as it was queued (it may have changed since)."""
        if self.source == "folder":
            return self.file_size or 0
        return self.content_size if self.content_size is not None else len(self.content_bytes or self.content or "")

    @property
    def short(self) -> bool:
        """A row whose content is in hand and small (a few pages of text): processed in milliseconds."""
        return self.source != "folder" and self.size <= SHORT_BYTES and not (self.mime_type or "").endswith("pdf")

    @property
    def deferred(self) -> bool:
        """Its content is too large to have come with the claim (`Store.with_content` reads it)."""
        return (self.source != "folder" and self.content is None and self.content_bytes is None
                and self.content_size is not None)  # fmt: skip

    def load(self, roots: Sequence[Path], max_bytes: int) -> SourceDocument:
        """Read the document's bytes: the file for folder rows, the row's own columns for SQL rows.

        A folder row's file is read only when it lies under one of `roots` (the folders this process was told to
        read): anyone who can insert a row must not be able to make the sidecar read arbitrary local files."""
        if self.source == "folder":
            if not self.file_path:
                raise DocumentError("folder document has no file path")
            try:
                real = Path(self.file_path).resolve()
            except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
                raise DocumentError(f"cannot resolve {self.file_path}: {exc}") from None
            if not any(real.is_relative_to(root.resolve()) for root in roots):
                raise DocumentError(f"{self.file_path} is outside the folders this connector reads")
            try:
                # Regular files only, opened without blocking and size-checked first: a FIFO renamed over a queued
                # file (or a row pointing at one) would otherwise hang this worker before its heartbeat starts.
                data = read_regular(real, max_bytes)
            except FileNotFoundError:
                raise FileGone(f"file no longer exists: {self.file_path}") from None
            except (NotRegularFile, TooLarge) as exc:
                raise DocumentError(str(exc)) from None
            except OSError as exc:
                raise DocumentError(f"cannot read {self.file_path}: {exc.strerror or exc}") from exc
            mime = self.mime_type or "text/plain"
        elif self.content_size is not None and self.content_size > max_bytes:  # known without reading it
            raise _too_large(self.content_size, max_bytes)
        elif self.deferred:
            raise DocumentError("row content not read yet")  # a caller's bug: `Store.with_content` reads it
        elif self.content_bytes is not None:
            data = bytes(self.content_bytes)
            mime = self.mime_type or ("application/pdf" if data.startswith(b"%PDF") else "text/plain")
        elif self.content is not None:
            data = self.content.encode("utf-8")
            mime = self.mime_type or "text/plain"
        else:
            raise DocumentError("row has neither content nor content_bytes")
        if len(data) > max_bytes:
            raise _too_large(len(data), max_bytes)
        return SourceDocument(
            id=self.id,
            source=self.source,
            source_key=self.source_key,
            title=self.title,
            data=data,
            mime_type=mime,
            content_hash=hashlib.sha256(data).hexdigest(),
        )


def _too_large(size: int, max_bytes: int) -> DocumentError:
    return DocumentError(f"document too large: {size / 1e6:.1f} MB (limit {max_bytes / 1e6:.0f} MB)")


@dataclass(frozen=True, slots=True)
class StatusReport:
    counts: dict[str, int]
    failures: list[Failure]


def _blocks_json(blocks: Sequence[Block]) -> Jsonb:
    """The stored form of a document's blocks: enough to re-chunk and re-score without converting again. Sent by
    psycopg's jsonb dumper, in UTF-8 whatever the connection's encoding, as its loader reads it back (sent as text,
    a database in LATIN1 stored a heading's `é` as such, and the web UI's document page could not read it)."""
    return Jsonb([
        {"start": b.start, "end": b.end, "kind": b.kind, "page": b.page, "section_path": b.section_path}
        for b in blocks
    ])  # fmt: skip


class Store:
    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def enqueue_file(
        self, key: str, path: Path, mime: str, content_hash: str, signature: FileSignature | None = None
    ) -> int | None:
        """Queue a file; None when its row already stands for these exact bytes (stored, failed, waiting or being
        processed). `signature` (size, mtime_ns, ctime_ns) is what the file looked like when it was hashed."""
        size, mtime, ctime = signature or (None, None, None)
        params = {"key": key, "title": path.name, "mime": mime, "path": str(path), "hash": content_hash,
                  "size": size, "mtime": mtime, "ctime": ctime}  # fmt: skip
        with self.conn.transaction():
            row = self.conn.execute(queries.ENQUEUE_FILE, params).fetchone()
            if row is None:
                self.conn.execute(queries.REPOINT_FILE, params)
            if row is None and signature is not None:
                self.conn.execute(queries.REFRESH_FILE_SIGNATURE, params)
        return row[0] if row else None

    def record_file_failure(
        self, key: str, path: str, mime: str | None, error: str, signature: FileSignature | None
    ) -> int | None:
        """A folder file that will not be processed as it is, as a failed row with the reason; the document id when
        the row changed (new, or another reason), None when it already said so."""
        size, mtime, ctime = signature or (None, None, None)
        params = {"key": key, "title": path.rsplit("/", 1)[-1], "mime": mime, "path": path, "error": error[:4000],
                  "size": size, "mtime": mtime, "ctime": ctime}  # fmt: skip
        with self.conn.transaction():
            row = self.conn.execute(queries.RECORD_FILE_FAILURE, params).fetchone()
        return row[0] if row else None

    def folder_signatures(self, root: Path) -> dict[str, FolderSignature]:
        """source_key → what its row says of the file, for the folder rows under `root`."""
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(FolderSignature)) as cur:
            rows = cur.execute(queries.FOLDER_SIGNATURES, {"root": str(root)}).fetchall()
        return {row.source_key: row for row in rows}

    def claim_next(self, lease_seconds: int, worker: str = "", roots: Sequence[Path] = ()) -> ClaimedRow | None:
        """The oldest claimable row; folder rows only for a worker that reads their folder (one of `roots`): a
        worker serving only the table leaves them to one that watches the folder."""
        params = {"lease": lease_seconds, "worker": worker, "roots": _prefixes(roots)}
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(ClaimedRow)) as cur:
            return cur.execute(queries.CLAIM_NEXT, params).fetchone()

    def heartbeat(self, row: ClaimedRow, lease_seconds: int) -> bool:
        """Extend the row's lease; False when it is no longer ours."""
        with self.conn.transaction():
            cur = self.conn.execute(queries.HEARTBEAT, {"id": row.id, "token": row.attempts, "lease": lease_seconds})
        return cur.rowcount == 1

    def retry_later(
        self,
        row: ClaimedRow,
        error: str,
        delay_s: float,
        max_attempts: int,
        content_hash: str | None = None,
        counted: bool = True,
    ) -> str | None:
        """Back to the queue after `delay_s`, or `failed` once `max_attempts` tries have failed; the new status.
        `counted=False`: the failure was not the document's, no try is spent."""
        params = {"id": row.id, "token": row.attempts, "error": error[:4000], "delay": delay_s, "max": max_attempts,
                  "hash": content_hash, "counted": counted}  # fmt: skip
        done = self._update_own(queries.RETRY_LATER, params)
        if done is None:
            return LOCKED
        found = done.fetchone()
        return found[0] if found else None

    def retry_failed(self, ref: str | None) -> list[DocumentKey]:
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(DocumentKey)) as cur:
            return cur.execute(queries.RETRY_FAILED, {"ref": ref}).fetchall()

    def release_mine(self, worker: str, suspects: Sequence[int] = (), error: str = "") -> GivenBack:
        """Give back the rows `worker` held under a connection that was lost: the `suspects` (ids whose write was
        under way) abandoned, to be claimed alone with a try counted, the others as they were, no try counted. A
        suspect whose write committed before the loss (its reply lost) is done, and neither."""
        with self.conn.transaction():
            abandoned = self.conn.execute(queries.ABANDON_MINE, {"ids": list(suspects), "worker": worker,
                                                                 "error": error[:4000]}).rowcount  # fmt: skip
            return GivenBack(abandoned, self.conn.execute(queries.RELEASE_MINE, {"worker": worker}).rowcount)

    def delete_folder_documents(self, key: str) -> list[DocumentKey]:
        """The document of a deleted file (or every document under a deleted folder), chunks included."""
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(DocumentKey)) as cur:
            return cur.execute(queries.DELETE_FOLDER_DOCUMENTS, {"key": key}).fetchall()

    def delete_replaced(self, old: str, new: str) -> list[DocumentKey]:
        """The document at `new` when a file that has a document moves over it (not when `old` has none: then the
        move was already applied, e.g. by the rename of its folder)."""
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(DocumentKey)) as cur:
            return cur.execute(queries.DELETE_REPLACED, {"old": old, "new": new}).fetchall()

    def rename_folder_documents(self, root: Path, old: str, new: str) -> list[DocumentKey]:
        """Move documents to a new key (a renamed file, or every file of a renamed folder), chunks untouched."""
        params = {"old": old, "new": new, "root": str(root), "title": Path(new).name, "old_title": Path(old).name}
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(DocumentKey)) as cur:
            return cur.execute(queries.RENAME_FOLDER_DOCUMENTS, params).fetchall()

    def folder_files_under(self, root: Path) -> list[FolderFile]:
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(FolderFile)) as cur:
            return cur.execute(queries.FOLDER_FILES_UNDER, {"root": str(root)}).fetchall()

    def queue_depth(self) -> dict[str, int]:
        with self.conn.transaction():
            ready, files, waiting, processing, done, failed = self.conn.execute(queries.QUEUE_DEPTH).fetchone()
        return {"ready": ready, "ready_files": files, "backing_off": waiting, "processing": processing, "done": done,
                "failed": failed}  # fmt: skip

    def in_flight(self) -> list[Lease]:
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(Lease)) as cur:
            return cur.execute(queries.IN_FLIGHT).fetchall()

    def ingest_file(
        self, key: str, path: Path, mime: str, content_hash: str, lease_seconds: int, worker: str | None = None
    ) -> ClaimedRow | None:
        """Queue a file and claim it for this process at once; None when it is stored with these exact bytes."""
        params = {"key": key, "title": path.name, "mime": mime, "path": str(path), "hash": content_hash,
                  "worker": worker}  # fmt: skip
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(ClaimedRow)) as cur:
            return cur.execute(queries.INGEST_FILE, {**params, "lease": lease_seconds}).fetchone()

    def claim_batch(
        self, lease_seconds: int, worker: str, roots: Sequence[Path], limit: int, max_bytes: int,
        count_abandoned: bool = True,
    ) -> list[ClaimedRow]:  # fmt: skip
        """Up to `limit` claimable rows, oldest first, holding at most `max_bytes` of content (the first always),
        each under its own lease and claim token; a dead holder's row alone, its try counted if `count_abandoned`."""
        params = {"lease": lease_seconds, "worker": worker, "roots": _prefixes(roots), "limit": limit,
                  "max_bytes": max_bytes, "count_abandoned": count_abandoned}  # fmt: skip
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(ClaimedRow)) as cur:
            rows = cur.execute(queries.CLAIM_BATCH, params).fetchall()
        return sorted(rows, key=lambda r: r.id)

    def heartbeat_many(self, rows: Sequence[ClaimedRow], lease_seconds: int) -> set[int]:
        """Extend the leases of `rows`; the ids that are still ours."""
        params = {"ids": [r.id for r in rows], "tokens": [r.attempts for r in rows], "lease": lease_seconds}
        with self.conn.transaction():
            return {found for (found,) in self.conn.execute(queries.HEARTBEAT_MANY, params)}

    def end_stuck_writers(self, stuck_seconds: int, seen: Sequence[EndedSession] = ()) -> list[EndedSession]:
        """The sessions of replicas stuck mid-write for `stuck_seconds` holding queued rows, those of them ended that
        are still as in `seen`, what the previous call found (see `queries.END_STUCK_WRITERS`)."""
        params = {"stuck": stuck_seconds, "pids": [s.pid for s in seen], "since": [s.since for s in seen],
                  "received": [s.received for s in seen]}  # fmt: skip
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(EndedSession)) as cur:
            modern = self.conn.info.server_version >= 140000
            return cur.execute(queries.END_STUCK_WRITERS if modern else queries.END_STUCK_WRITERS_BEFORE_14,
                               params).fetchall()  # fmt: skip

    def build_vector_index(self, min_chunks: int) -> bool:
        """Build the chunks' HNSW index if the table has `min_chunks` chunks and nobody else is building it (see
        migration 0015); True once it exists. Writes to the chunks wait while it builds."""
        with self.conn.transaction():
            return bool(self.conn.execute(queries.BUILD_VECTOR_INDEX, (min_chunks,)).fetchone()[0])

    def write(self, row: ClaimedRow, source: SourceDocument, outcome: Outcome) -> bool:
        """Replace the document's chunks and candidates and mark it done, all in one transaction: a reader sees the
        old chunks or the new ones, never a mix and never none. False (nothing written) when the row was deleted
        or claimed by another worker since we claimed it."""
        return self.write_many([(row, source, outcome)])[0]

    def write_many(self, items: Sequence[tuple[ClaimedRow, SourceDocument, Outcome]]) -> list[bool]:
        """`write` for a batch of documents in one transaction and a dozen statements, whatever the batch's size:
        one commit, one COPY of all chunks. Per document, False where the row is no longer ours (that one is left
        alone, the others are written). A statement that fails fails the whole batch: nothing is written (the
        caller then writes the documents one by one, so that only the culprit fails). A connection found lost at
        the transaction's start (an outage while the worker was busy elsewhere) is `ConnectionLostBeforeWrite`."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.conn.transaction())
            except psycopg.OperationalError as exc:  # its BEGIN failed: nothing of the write was sent
                if self.conn.broken:
                    raise ConnectionLostBeforeWrite(f"the database connection was lost before a write: {exc}") from exc
                raise
            models = {outcome.model for _, _, outcome in items if outcome.model is not None}
            if models:  # no switch of models while this runs; and none happened since the start
                current = embeddings.hold_shared(self.conn)
                for model in models:
                    if current is not None and not embeddings.same_space(current.spec, model):
                        raise embeddings.mismatch(current, model)
            self.conn.execute(queries.LOCK_TABLE_FIRST)
            (configured,) = self.conn.execute(queries.LOCK_TIMEOUT_NOW).fetchone()
            self.conn.execute(queries.SET_LOCK_TIMEOUT, (queries.LOCK_WAIT,))
            locked = dict(self.conn.execute(queries.LOCK_DOCUMENTS, ([row.id for row, _, _ in items],)).fetchall())
            self.conn.execute(queries.SET_LOCK_TIMEOUT, (configured,))
            ours = [locked.get(row.id) == row.attempts for row, _, _ in items]
            mine = [item for item, ok in zip(items, ours, strict=True) if ok]
            if mine:
                self._replace(mine)
        return ours

    def _replace(self, items: Sequence[tuple[ClaimedRow, SourceDocument, Outcome]]) -> None:
        doc_ids = [row.id for row, _, _ in items]
        self.conn.execute(queries.DELETE_CHUNKS_OF, (doc_ids,))
        self.conn.execute(queries.DELETE_CANDIDATES_OF, (doc_ids,))
        total = sum(len(outcome.chunks) for _, _, outcome in items)
        ids = [r[0] for r in self.conn.execute(queries.ALLOCATE_CHUNK_IDS, (total,))] if total else []
        windows: list[tuple] = []
        with self.conn.cursor().copy(queries.COPY_CHUNKS) as copy:
            copy.set_types(queries.COPY_CHUNKS_TYPES)
            base = 0
            for row, _, outcome in items:
                n = len(outcome.chunks)
                own = ids[base : base + n]
                base += n
                strategy = outcome.winner.candidate.strategy
                for i, ec in enumerate(outcome.chunks):
                    c = ec.chunk
                    copy.write_row(
                        (
                            own[i], row.id, ec.ordinal, c.text, c.token_count, c.start, c.end,
                            ec.page_start, ec.page_end, list(ec.section_path), ec.chunk_type,
                            own[i - 1] if i > 0 else None, own[i + 1] if i + 1 < n else None,
                            ec.embedding, ec.embed_windows, strategy,
                        )
                    )  # fmt: skip
                    if len(ec.windows) > 1:  # one window is the chunk's own vector (migration 0013)
                        windows += [(own[i], no, w.start, w.end, w.embedding) for no, w in enumerate(ec.windows)]
        if windows:
            with self.conn.cursor().copy(queries.COPY_WINDOWS) as copy:
                copy.set_types(queries.COPY_WINDOWS_TYPES)
                for window in windows:
                    copy.write_row(window)
        self.conn.execute(queries.INSERT_CHUNK_TERMS_OF, (doc_ids,))
        # One COPY for every candidate of the batch: ten rows a document, which as INSERTs cost the server a
        # statement each and the writer as much again in parameter handling. Its lines come made (in COPY's text
        # format, where the document was chosen: `candidate_rows`), each after its document's id.
        encoding = self.conn.info.encoding
        with self.conn.cursor().copy(queries.COPY_CANDIDATES) as copy:
            buffer: list[bytes] = []
            held = 0
            for row, _, outcome in items:
                prefix = b"%d" % row.id
                lines = outcome.candidate_rows or candidate_rows.lines(outcome.scored, outcome.winner)
                buffer += [prefix + line for line in lines]
                held += sum(map(len, lines))
                if held >= COPY_WRITE_BYTES or row is items[-1][0]:  # a write is a round of psycopg's wait: few
                    data = b"".join(buffer)
                    if encoding != "utf-8":  # (a database in another encoding)
                        data = candidate_rows.in_encoding(data, encoding)
                    copy.write(data)
                    buffer, held = [], 0
        self.conn.execute(
            queries.MARK_DONE,
            {
                "id": [row.id for row, _, _ in items],
                "token": [row.attempts for row, _, _ in items],
                "markdown": [outcome.document.markdown for _, _, outcome in items],
                "blocks": [_blocks_json(outcome.document.blocks) for _, _, outcome in items],
                "hash": [source.content_hash for _, source, _ in items],
                "strategy": [outcome.winner.candidate.strategy for _, _, outcome in items],
                "score": [outcome.winner.score for _, _, outcome in items],
                "page_count": [len(outcome.document.page_starts) or None for _, _, outcome in items],
                "title": [outcome.title for _, _, outcome in items],
                "own_title": [
                    source.source == "folder" and outcome.document.title is not None for _, source, outcome in items
                ],  # fmt: skip
                "claimed_title": [row.title for row, _, _ in items],
                "claimed_key": [row.source_key for row, _, _ in items],
            },
        )

    def moved(self, row: ClaimedRow) -> ClaimedRow | None:
        """The row as it stands now when, still ours, it names another file than when claimed (its file or folder
        was renamed meanwhile: the watcher moved its key and path); else None."""
        found = self.conn.execute(queries.ROW_FILE, {"id": row.id, "token": row.attempts}).fetchone()
        if found is None or found[1] is None or found[1] == row.file_path:
            return None
        return replace(row, source_key=found[0], file_path=found[1])

    def with_content(self, row: ClaimedRow) -> ClaimedRow:
        """The row with its content, read now (see queries.INLINE_BYTES); as it was when no longer ours."""
        try:
            found = self.conn.execute(queries.ROW_CONTENT, {"id": row.id, "token": row.attempts}).fetchone()
        except (MemoryError, psycopg.DatabaseError) as exc:  # libpq's "out of memory for query result" included
            if self.conn.broken or not isinstance(exc, MemoryError) and "memory" not in str(exc):
                raise
            raise TransientError(f"not enough memory to read its {row.content_size / 1e6:.0f} MB") from exc
        return row if found is None else replace(row, content=found[0], content_bytes=found[1], content_size=None)

    def mark_unchanged(self, row: ClaimedRow) -> bool:
        """False when another session keeps the row locked (see `_update_own`): nothing recorded."""
        return self._update_own(queries.MARK_UNCHANGED, {"id": row.id, "token": row.attempts}) is not None

    def mark_failed(self, row: ClaimedRow, error: str, content_hash: str | None) -> bool:
        """False when another session keeps the row locked (see `_update_own`): nothing recorded."""
        params = {"id": row.id, "token": row.attempts, "error": error[:4000], "hash": content_hash}
        return self._update_own(queries.MARK_FAILED, params) is not None

    def release(self, row: ClaimedRow) -> bool:
        """Back to the queue; False when the row was no longer ours (finished, or claimed again), or another
        session keeps it locked (its lease hands it back)."""
        done = self._update_own(queries.RELEASE, {"id": row.id, "token": row.attempts})
        return done is not None and done.rowcount == 1

    def _update_own(self, query: str, params: dict) -> psycopg.Cursor | None:
        """Run one statement that updates a row this worker claimed, in a transaction of its own; None when
        another session (an application's open transaction, a forgotten psql) kept that row locked for
        LOCK_WAIT: nothing was changed, and the row is left to its lease, which the caller stops extending
        (the next claim after it ends counts a try). Waiting for that session instead held up this worker's
        other rows, their heartbeats included, as long as it kept its lock. The table's own lock is taken first
        without a limit, as the write does (a migration queued behind a long query is waited for)."""
        try:
            with self.conn.transaction():
                self.conn.execute(queries.LOCK_TABLE_TO_UPDATE)
                self.conn.execute(queries.SET_LOCK_TIMEOUT, (queries.LOCK_WAIT,))
                return self.conn.execute(query, params)
        except psycopg.errors.LockNotAvailable:
            return None

    def abandon(self, row: ClaimedRow, error: str) -> bool:
        """As if the worker holding it had died (its lease runs out now): the next claim takes it alone and counts a
        try. For a document whose CPU pool process died with others in flight: any of them could be the cause."""
        done = self._update_own(queries.ABANDON, {"id": row.id, "token": row.attempts, "error": error})
        return done is not None and done.rowcount == 1

    def errors(self, document_ids: list[int]) -> list[LastError]:
        """The last error of each of the given documents."""
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(LastError)) as cur:
            return cur.execute(queries.ERRORS_OF, (document_ids,)).fetchall()

    def explain(self, ref: str) -> tuple[FoundDocument | None, list[StoredCandidate], int]:
        """The document an id or source key names, its candidates, and how many documents matched."""
        with self.conn.transaction():
            with self.conn.cursor(row_factory=class_row(FoundDocument)) as cur:
                matches = cur.execute(queries.FIND_DOCUMENT, {"ref": ref}).fetchall()
            if not matches:
                return None, [], 0
            with self.conn.cursor(row_factory=class_row(StoredCandidate)) as cur:
                candidates = cur.execute(queries.CANDIDATES_OF, (matches[0].id,)).fetchall()
        return matches[0], candidates, len(matches)

    def search(self, embedding, text: str | None, k: int, filter: dict) -> list[SearchHit]:  # noqa: A002
        params = {"embedding": embedding, "text": text, "k": k, "filter": Jsonb(filter)}
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(SearchHit)) as cur:
            return cur.execute(queries.SEARCH, params).fetchall()

    def search_context(self, chunk_id: int, neighbours: int) -> Passage | None:
        params = {"chunk_id": chunk_id, "neighbours": neighbours}
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(Passage)) as cur:
            return cur.execute(queries.SEARCH_CONTEXT, params).fetchone()

    def strategy_report(self) -> list[StrategyMeans]:
        with self.conn.transaction(), self.conn.cursor(row_factory=class_row(StrategyMeans)) as cur:
            return cur.execute(queries.STRATEGY_REPORT).fetchall()

    def status(self, last: int = 10) -> StatusReport:
        with self.conn.transaction():
            with self.conn.cursor(row_factory=class_row(StatusCount)) as cur:
                counts = {row.status: row.documents for row in cur.execute(queries.STATUS_COUNTS)}
            with self.conn.cursor(row_factory=class_row(Failure)) as cur:
                failures = cur.execute(queries.LAST_ERRORS, (last,)).fetchall()
        return StatusReport(counts, failures)


def _prefixes(roots: Sequence[Path]) -> list[str]:
    """What the path of a file under one of `roots` starts with: each root as given and resolved (rows keep the
    path they were found at), ending in a separator (`/in` is not a prefix of `/inbox/a.txt`)."""
    found = {str(p).rstrip(os.sep) + os.sep for root in roots for p in (root, root.resolve())}
    return sorted(found)
