"""The worker: claim a batch of queued documents, run the pipeline on each, store the outcomes together.

Whatever goes wrong with one document ends in its row and the worker moves on:
- a `DocumentError` (unreadable, corrupt, unsupported...) fails it at once, with the reason in `last_error`;
- a `TransientError` from a stage (an endpoint timing out), and any exception nobody classified (a bug, a race),
  puts it back in the queue after an exponential backoff (`retry_after`), and fails it once `max_attempts` tries
  have failed;
- a worker that died while holding it (its lease ran out) also counts as a failed try, so a document that crashes
  the process cannot loop forever.
While it works, the worker extends the leases of the rows it holds every third of the lease (heartbeat). Only a
`FatalError` (configuration) or a lost database connection (`TransientError`) leaves this module: the first stops
the process, the second makes the sidecar reconnect, and the rows it held go back to the queue. A worker interrupted
mid-batch (SIGTERM past the grace period, Ctrl-C) hands its rows straight back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent import futures
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg

from connector import allocator, secrets
from connector.db.database import MissingPrivilege
from connector.db.rows import EndedSession
from connector.db.store import LOCKED, ClaimedRow, Store
from connector.errors import (
    ConnectionLostBeforeWrite,
    DocumentError,
    FatalError,
    FileGone,
    TransientError,
    UnusableVector,
)
from connector.models import Outcome, SourceDocument
from connector.pipeline import Chosen, Pipeline
from connector.pool import DocumentTimedOut

log = logging.getLogger(__name__)

Result = Literal["done", "unchanged", "failed", "superseded", "retry"]
MAX_BACKOFF_S = 300.0
FLUSH_SECONDS = 1.0
# How long a worker waiting on the pool may miss a stop: the rows it has not handed over go back at once, even while
# every pool process is busy with long documents (of other threads) and nothing of its own finishes.
STOP_CHECK_SECONDS = 0.5
RENAMES_FOLLOWED = 3  # a file renamed while its row is held is read where it went, up to this many times in a row
CLAIMS_GROW_TO = 4  # a deep queue's claims grow to this many times `batch_size` (see `Worker.drain`)
INDEX_CHECK_SECONDS = 60.0  # how often a worker asks for the chunks' HNSW index until it exists (migration 0015)
# Finished documents are written once this long has passed since the first of them started (short rows: a whole
# batch at a time), and before a document that is not short starts (a file, a row over `ClaimedRow.short`).


@dataclass(frozen=True, slots=True)
class Started:
    """A document handed to the pipeline (`Pipeline.start`): its `Chosen`, or its error, once the future is done."""

    row: ClaimedRow
    source: SourceDocument
    future: Future


@dataclass(frozen=True, slots=True)
class Ready:
    """A document through the pipeline up to its winner, waiting to be embedded and written with its batch."""

    row: ClaimedRow
    source: SourceDocument
    chosen: Chosen


_RUN = uuid.uuid4().hex[:8]  # containers sharing a host name all run as pid 1: tell their workers apart


def worker_name(suffix: str = "") -> str:
    """What `claimed_by` shows: host, process (and a random run id) and worker."""
    return f"{socket.gethostname()}:{os.getpid()}:{_RUN}" + (f":{suffix}" if suffix else "")


class Worker:
    def __init__(self, conn: psycopg.Connection, pipeline: Pipeline, roots: Sequence[Path], name: str | None = None):
        # Queue settings (lease, tries, backoff, size limit) come from the pipeline's one Settings object.
        s = pipeline.settings
        self.store = Store(conn)
        self.pipeline = pipeline
        self.lease_seconds = s.lease_seconds
        self.roots = tuple(roots)  # folders whose files this worker may read
        self.name = name or worker_name()
        self.max_attempts = s.max_attempts
        self.retry_base_s = s.retry_base_seconds
        self.max_bytes = s.max_document_bytes
        self.batch_size = s.batch_size
        self.batch_bytes = int(s.batch_mb * 1_000_000)
        self.claim_limit = s.batch_size  # rows the next claim asks for: grows while the queue is deep (`drain`)
        self.index_min_chunks = s.search.vector_index_min_chunks
        self._indexed = False  # the chunks' HNSW index exists (see `index_if_due`)
        self._next_index_check = 0.0
        self._next_stuck_check = 0.0  # see `end_stuck_writers_if_due`
        self._stuck: list[EndedSession] = []  # the replicas' sessions found stuck by the last check, not ended
        self.held: list[ClaimedRow] = []  # the rows it holds now, claimed and not yet finished (read on shutdown)
        self.release_due = False  # a long document was written: its memory goes back after the batch (`drain`)
        self.lost_while_writing: list[int] = []  # ids being written when its connection died (see `_store`)
        self._next_beat = 0.0  # when the leases of `held` are next extended
        # Until then (monotonic), a row whose lease ran out costs no try when claimed: set by the sidecar when this
        # worker replaces one whose connection was lost (see queries.CLAIM_BATCH).
        self.forgive_abandoned_until = 0.0
        self._lost: set[tuple[int, int]] = set()  # (id, claim token) of held rows a heartbeat found taken away
        # Stage → ms of each document done, until the metrics endpoint's recorder takes it (`timings_of`).
        self.timings: dict[int, dict[str, float]] = {}

    def process(self, row: ClaimedRow) -> Result:
        """One document through the pipeline and into the database (its own transaction)."""
        self.held = [row]
        self._next_beat = time.monotonic() + self.lease_seconds / 3
        try:
            prepared = self.prepare(row)
            result = self._write([prepared])[0] if isinstance(prepared, Ready) else prepared
        finally:
            self.held = []
        self.index_if_due()
        return result

    def index_if_due(self) -> None:
        """Have the chunks' HNSW index built once the table has `vector_index_min_chunks` chunks (migration 0015),
        asking about once a minute until it exists. Called between documents or batches, holding nothing; the
        build makes this worker, and every writer, wait for it. A failure is logged and asked again later."""
        if self._indexed or time.monotonic() < self._next_index_check:
            return
        self._next_index_check = time.monotonic() + INDEX_CHECK_SECONDS
        try:
            with self._heartbeat():
                self._indexed = self.store.build_vector_index(self.index_min_chunks)
        except psycopg.Error as exc:
            if self.store.conn.broken:
                raise  # the caller reconnects
            log.warning("could not build the chunks' HNSW index (asking again in %.0f s): %s", INDEX_CHECK_SECONDS,
                        secrets.one_line(str(exc)))  # fmt: skip
            return
        if self._indexed:
            log.info("the chunks' HNSW index is in place: vector searches use it")

    def prepare(self, row: ClaimedRow) -> Result | Ready:
        """Run the pipeline on a claimed row: the outcome to write, or what became of the row (failed, retry,
        unchanged: already recorded)."""
        started = self.start(row)
        return self.finish(started) if isinstance(started, Started) else started

    def start(self, row: ClaimedRow) -> Result | Started:
        """Read a claimed row and hand it to the pipeline (a pool process, or this thread at once); or what became
        of it (failed, retry, unchanged: already recorded)."""
        loaded = self.load(row)
        return self.submit([(row, loaded)])[0] if isinstance(loaded, SourceDocument) else loaded

    def load(self, row: ClaimedRow) -> Result | SourceDocument:
        """Read a claimed row's document; or what became of it (failed, unchanged: already recorded)."""
        context = {"document_id": row.id, "source_key": row.source_key}
        content_hash: str | None = None
        if row.retries >= self.max_attempts:
            with contextlib.suppress(DocumentError):  # the hash: only new bytes requeue a file that kills workers
                content_hash = row.load(self.roots, self.max_bytes).content_hash
            error = (f"gave up after {row.retries} tries: the worker or CPU process running it stopped (crash, "
                     "kill, out of memory, lost connection or past its deadline) each time")  # fmt: skip
            if row.last_error:
                error += f"; the last time: {row.last_error}"
            return self._fail(row, error, content_hash)
        try:
            if row.deferred and row.content_size <= self.max_bytes:  # read now, its claim committed: it has a try
                row = self.store.with_content(row)
                if row.deferred:
                    log.info("%s was deleted or claimed again before it was read", row.source_key, extra=context)
                    return "superseded"
            source = self._read(row)
            content_hash = source.content_hash
            if source.content_hash == row.content_hash:
                # Same bytes as the stored chunks: nothing to convert or embed again.
                if not self.store.mark_unchanged(row):
                    return self._locked(row)
                log.info("unchanged %s", row.source_key, extra=context)
                return "unchanged"
            tries = f" (try {row.retries + 1} of {self.max_attempts})" if row.retries else ""
            log.info("processing %s%s", row.source_key, tries, extra=context)
            return source
        except Exception as exc:
            return self._failed(row, exc, content_hash)
        except BaseException:  # KeyboardInterrupt, SystemExit: give the document back before leaving
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            raise

    def _read(self, row: ClaimedRow) -> SourceDocument:
        """The row's document; from where its file is now if it was renamed (with its folder, say) after the claim:
        read at the old path, it failed as "no longer exists", and for good, the row holding the file's bytes."""
        for _ in range(RENAMES_FOLLOWED):
            try:
                return row.load(self.roots, self.max_bytes)
            except FileGone:
                if (moved := self.store.moved(row)) is None:
                    raise
                row = moved
        return row.load(self.roots, self.max_bytes)

    def submit(self, loaded: list[tuple[ClaimedRow, SourceDocument]]) -> list[Result | Started]:
        """Hand loaded documents to the pipeline: several short ones as one pool task, a suspect alone; without a
        pool, each runs here at once."""
        try:
            if self.pipeline.pool is None:
                with self._heartbeat():  # the pipeline runs here, at once
                    return [Started(row, source, self.pipeline.start(source)) for row, source in loaded]
            if len(loaded) == 1 or any(row.abandoned for row, _ in loaded):
                # A suspect waits for its turn to run alone in the pool (and the others for it), maybe long: this
                # thread renews the leases meanwhile, its connection being idle.
                return [
                    Started(row, source, self.pipeline.start(source, row.abandoned, self._beat_if_due))
                    for row, source in loaded
                ]
            futures = self.pipeline.start_many([source for _, source in loaded], self._beat_if_due)
            return [Started(row, source, future) for (row, source), future in zip(loaded, futures, strict=True)]
        except Exception as exc:
            return [self._failed(row, exc, source.content_hash) for row, source in loaded]
        except BaseException:
            for row, _ in loaded:
                with contextlib.suppress(psycopg.Error):
                    self.store.release(row)
            raise

    def finish(self, started: Started) -> Result | Ready:
        """Wait for a started document: ready to be written, or what became of it."""
        row, future = started.row, started.future
        try:
            while not future.done():  # this thread renews the leases while it waits (its connection is idle)
                futures.wait([future], timeout=max(0.0, self._next_beat - time.monotonic()))
                self._beat_if_due()
            return Ready(row, started.source, self.pipeline.chosen(future))
        except (BrokenProcessPool, CancelledError) as exc:
            if self.pipeline.pool is None:  # the candidate pool of a long document: not a CPU pool's death
                return self._failed(row, exc, started.source.content_hash)
            if self.pipeline.pool.closed:
                # The sidecar is leaving at once (a second SIGTERM, the grace spent): no crash and no suspect; the
                # row goes back as it was (the sidecar has handed back what its workers held already, most often).
                with contextlib.suppress(psycopg.Error):
                    self.store.release(row)
                return "retry"
            # Its pool process died (or the pool was stopped), maybe because of another document in flight: as if
            # this worker had died holding it, it is claimed again alone and the death counts as a try.
            error = (
                str(exc)
                if isinstance(exc, DocumentTimedOut)
                else "the CPU pool process running it (or another document) stopped: crash, kill or out of memory"
            )
            log.warning("%s: %s; it will be tried again alone", row.source_key, error,
                        extra={"document_id": row.id, "source_key": row.source_key})  # fmt: skip
            with contextlib.suppress(psycopg.Error):
                self.store.abandon(row, error)
            return "retry"
        except Exception as exc:
            return self._failed(row, exc, started.source.content_hash)
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            raise

    def _failed(self, row: ClaimedRow, exc: Exception, content_hash: str | None) -> Result:
        """What an error while processing or writing `row` makes of it (see the module's docstring)."""
        context = {"document_id": row.id, "source_key": row.source_key}
        if isinstance(exc, MissingPrivilege):
            # A grant revoked under the running sidecar, no document's doing: handed back as it was (if the role
            # may still do that; else on reconnecting), and the worker waits for the grant (sidecar).
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            raise exc
        if isinstance(exc, DocumentError):
            return self._fail(row, str(exc), content_hash)
        # Any error that ended the session (some are not OperationalErrors: an idle-in-transaction timeout's is an
        # InternalError) is the connection's, not the document's.
        if isinstance(exc, psycopg.Error) and self.store.conn.broken:
            raise TransientError(f"database connection lost while processing {row.source_key}: {exc}") from exc
        if isinstance(exc, psycopg.errors.DiskFull):
            # The database's disk, not the document: spending its tries failed every document that arrived while
            # the disk was full, for good (a failed file is not queued again for the same bytes).
            return self._retry(row, f"database disk full: {exc}", content_hash, counted=False)
        if isinstance(exc, psycopg.OperationalError):
            return self._retry(row, f"database error: {exc}", content_hash)  # a timeout, a lock...
        if isinstance(exc, TransientError):
            return self._retry(row, str(exc), content_hash)
        if isinstance(exc, FatalError):
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            raise exc
        # A bug or a race, not a verdict on the document: it costs a try with backoff, like a transient error,
        # and the row fails only once the tries are spent. Only errors the code classifies as permanent
        # (DocumentError) fail a document at once.
        log.exception("unexpected error on %s", row.source_key, extra=context, exc_info=exc)
        return self._retry(row, f"internal error: {type(exc).__name__}: {exc}", content_hash)

    def _write(self, ready: list[Ready]) -> list[Result]:
        """Embed and write finished documents: all in one call and one transaction. An endpoint that is down
        (`TransientError` after its retries) sends them all back to the queue; any other failure is retried one
        document at a time, so that only the document that cannot be embedded or written pays for it."""
        try:
            with self._heartbeat():  # an endpoint that retries can take a while: the leases must not run out
                outcomes = self.pipeline.embed([r.chosen for r in ready])
        except UnusableVector as exc:
            if len(ready) == 1:
                return [self._failed(ready[0].row, exc, ready[0].source.content_hash)]
            # One input's answer, not the endpoint's state: the others need not pay a try for it.
            log.warning("embedding %d documents at once failed (%s); one by one", len(ready), exc)
            return self._one_by_one(ready)
        except (FatalError, TransientError) as exc:
            return self._all_failed(ready, exc)
        except Exception as exc:
            if len(ready) == 1:
                return [self._failed(ready[0].row, exc, ready[0].source.content_hash)]
            log.warning("embedding %d documents at once failed (%s); one by one", len(ready), exc)
            return self._one_by_one(ready)
        return self._store(ready, outcomes)

    def _store(self, ready: list[Ready], outcomes: list[Outcome]) -> list[Result]:
        t0 = time.perf_counter()
        try:
            with self.pipeline.totals("write"):
                written = self.store.write_many([(r.row, r.source, o) for r, o in zip(ready, outcomes, strict=True)])
        except FatalError as exc:
            return self._all_failed(ready, exc)
        except ConnectionLostBeforeWrite:
            raise  # the rows go back as they were when this worker reconnects: none is a suspect
        except MissingPrivilege as exc:
            return self._all_failed(ready, exc)  # handed back as they were, then raised
        except Exception as exc:
            if isinstance(exc, psycopg.Error) and self.store.conn.broken:
                # One of them may be what ended the connection: the reconnecting thread abandons these (each is
                # then claimed alone) and gives back the rest of what this worker held as it was.
                self.lost_while_writing = [r.row.id for r in ready]
                raise TransientError(f"database connection lost while writing {len(ready)} document(s): {exc}") from exc
            if len(ready) == 1 and isinstance(exc, psycopg.errors.LockNotAvailable):
                # Another session keeps the row locked (queries.LOCK_WAIT passed): recording a retry would wait
                # for it too. Left to its lease instead: claimed again once that ends, a try counted.
                return [self._locked(ready[0].row)]
            if len(ready) == 1:
                return [self._failed(ready[0].row, exc, ready[0].source.content_hash)]
            log.warning("writing %d documents at once failed (%s); one by one", len(ready), exc)
            results = []
            for r, outcome in zip(ready, outcomes, strict=True):
                results += self._store([r], [outcome])
                self._done_with(r.row)  # recorded: no longer ours to keep leased
            return results
        write_ms = (time.perf_counter() - t0) * 1000 / len(ready)  # each document's share of the batch's write
        results: list[Result] = []
        for r, outcome, ok in zip(ready, outcomes, written, strict=True):
            if not ok:
                log.warning("%s was deleted or claimed again while processing; result dropped", r.row.source_key)
                results.append("superseded")
                continue
            self.timings[r.row.id] = {**outcome.timings, "write": write_ms}
            if len(self.timings) > 1024:  # nobody is reading them (connector ingest): keep the latest only
                self.timings.pop(next(iter(self.timings)))
            self._log_done(r.row, outcome)
            results.append("done")
        return results

    def _one_by_one(self, ready: list[Ready]) -> list[Result]:
        results = []
        for r in ready:
            results += self._write([r])
            self._done_with(r.row)  # recorded: no longer ours to keep leased
        return results

    def _all_failed(self, ready: list[Ready], exc: Exception) -> list[Result]:
        """A failure that is not any one document's (the endpoint is down, the configuration is wrong): the same
        verdict for each (`FatalError`: every row handed back, then raised)."""
        if isinstance(exc, FatalError):
            for r in ready:
                with contextlib.suppress(psycopg.Error):
                    self.store.release(r.row)
            raise exc
        return [self._failed(r.row, exc, r.source.content_hash) for r in ready]

    def timings_of(self, row: ClaimedRow) -> dict[str, float] | None:
        """The stage timings of a document this worker just wrote (once: they are forgotten after)."""
        return self.timings.pop(row.id, None)

    def _log_done(self, row: ClaimedRow, outcome: Outcome) -> None:
        cache = outcome.embedding
        log.info(
            "done %s: %s, %d chunks%s, score %.3f (%s)",
            row.source_key,
            outcome.winner.candidate.strategy,
            len(outcome.chunks),
            f" ({cache['embedded']} embedded, {cache['cached']} from the cache)" if cache else "",
            outcome.winner.score,
            ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in outcome.timings.items()),
            extra={"document_id": row.id, "source_key": row.source_key},
        )

    def _fail(self, row: ClaimedRow, error: str, content_hash: str | None) -> Result:
        if not self.store.mark_failed(row, error, content_hash):
            return self._locked(row)
        log.warning("failed %s: %s", row.source_key, error, extra={"document_id": row.id, "source_key": row.source_key})
        return "failed"

    def _retry(self, row: ClaimedRow, error: str, content_hash: str | None, counted: bool = True) -> Result:
        # An uncounted retry backs off by claims instead (`attempts`, one more each time it is claimed).
        # The exponent capped: `attempts` grows with every claim and requeue of a long-lived row, and 2.0 ** 1025
        # overflows (before, that stopped the worker on a full disk).
        delay = min(self.retry_base_s * 2 ** min(row.retries if counted else row.attempts - 1, 16), MAX_BACKOFF_S)
        status = self.store.retry_later(row, error, delay, self.max_attempts, content_hash, counted)
        context = {"document_id": row.id, "source_key": row.source_key}
        if status == LOCKED:
            return self._locked(row)
        if status == "failed":
            log.warning("failed %s after %d tries: %s", row.source_key, row.retries + 1, error, extra=context)
            return "failed"
        log.warning("retrying %s in %.0f s: %s", row.source_key, delay, error, extra=context)
        return "retry"

    def end_stuck_writers_if_due(self) -> None:
        """End the database sessions of replicas frozen or cut off in the middle of a write for a lease, holding
        queued rows locked (`Store.end_stuck_writers`): their leases are over, but every replica skips locked rows,
        and the server would wait for the stuck client as long as it is frozen. Asked every third of a lease, between
        batches, holding nothing; a session is ended when found so twice, with nothing received in between (one alive
        but slow to send its COPY is left to finish); a failure is logged and asked again later."""
        if time.monotonic() < self._next_stuck_check:
            return
        self._next_stuck_check = time.monotonic() + self.lease_seconds / 3
        try:
            ended = self.store.end_stuck_writers(self.lease_seconds, self._stuck)
        except psycopg.Error as exc:
            self._stuck = []
            if self.store.conn.broken:
                raise  # the caller reconnects
            log.warning("could not look for replicas stuck mid-write: %s", secrets.one_line(str(exc)))
            return
        self._stuck = [s for s in ended if s.ended is None]
        for session in (s for s in ended if s.ended):  # (not: gone on its own meanwhile)
            log.warning("ended database session %d (client %s): stuck %.0f s in the middle of a write, waiting for "
                        "its client while holding queued documents locked (a replica frozen or cut off); they are "
                        "claimable again", session.pid, session.client or "local", session.stuck_s)  # fmt: skip

    def _locked(self, row: ClaimedRow) -> Result:
        """What became of a row whose outcome could not be recorded: another session kept it locked past
        `queries.LOCK_WAIT`. It is left to its lease (no longer extended: the caller is done with it), then claimed
        again with a try counted; waiting for that session stalled this worker and its other rows' heartbeats."""
        log.warning("%s is locked by another session; tried again when its lease ends", row.source_key,
                    extra={"document_id": row.id, "source_key": row.source_key})  # fmt: skip
        return "retry"

    def _beat_if_due(self) -> None:
        if time.monotonic() >= self._next_beat:
            self._beat()

    def _beat(self) -> None:
        """Extend the leases of the rows in hand (every third of the lease; see `_heartbeat`)."""
        rows = list(self.held)
        self._next_beat = time.monotonic() + self.lease_seconds / 3
        if not rows:
            return
        try:
            ours = self.store.heartbeat_many(rows, self.lease_seconds)
        except psycopg.Error as exc:  # keep trying: the next beat may get through before the lease ends
            log.warning("heartbeat failed for %d document(s): %s", len(rows), exc)
            return
        for row in rows:
            if row.id not in ours and (row.id, row.attempts) not in self._lost:
                # Requeued meanwhile (new bytes or content) or claimed again after a stall: this result will not
                # be written (the claim token decides), the newer pass will.
                self._lost.add((row.id, row.attempts))
                log.warning("%s is no longer ours (requeued or claimed again); its result will be dropped",
                            row.source_key)  # fmt: skip

    @contextlib.contextmanager
    def _heartbeat(self) -> Iterator[None]:
        """While the pipeline or the embedder runs here, a thread beats on the worker's connection (idle then) when
        the next beat is due; between documents, and while it waits on the CPU pool, the worker beats itself
        (`_beat_if_due`), so the connection never serves two threads."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(max(0.0, self._next_beat - time.monotonic())):
                self._beat()
                if self.store.conn.broken:
                    return

        thread = threading.Thread(target=beat, name=f"heartbeat-{self.name}", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:
            # No thread to be had: the address space is short (a process near its memory limit, right after a row
            # too large for it) or the thread limit reached. The step goes on without beats (they resume after it)
            # rather than fail every document written meanwhile, for good, as "internal error".
            log.warning("no heartbeat thread for this step (%s): leases are renewed before and after it", exc)
            thread = None
            self._beat_if_due()
        try:
            yield
        finally:
            done.set()
            if thread is not None:
                thread.join()

    def drain(self, stop: threading.Event, on_result: Callable[[ClaimedRow, Result], None] | None = None) -> int:
        """Process queued documents until the queue is empty or `stop` is set; returns how many were processed.

        Rows are claimed in batches (`batch_size` rows, more while the queue is deep; `batch_mb` of content) and
        the finished ones written in one transaction at the end of the batch, or sooner once the oldest has waited
        FLUSH_SECONDS: a batch of short rows costs one claim, one commit and a dozen statements instead of that per
        row, and its rows go to the CPU pool a group at a time (`CpuPool.submit_many`). Each row keeps its own lease
        and claim token; a row that fails is recorded on its own. Stopped mid-batch, the worker writes
        what it finished and hands the rest back at once."""
        n = 0
        while not stop.is_set():
            self.index_if_due()
            self.end_stuck_writers_if_due()
            counts = time.monotonic() >= self.forgive_abandoned_until
            rows = self.store.claim_batch(self.lease_seconds, self.name, self.roots, self.claim_limit, self.batch_bytes,
                                          counts)  # fmt: skip
            # A claim that got all it asked for, in under half the batch's bytes, found a deep queue of short rows:
            # the next one asks for twice as many, up to CLAIMS_GROW_TO times `batch_size`. A batch's own costs (its
            # claim, a dozen statements, a commit that waits for the disk, the pool drained at its end) were a fifth
            # of a 600-character row's (batches of 32: 628-780 rows/s; of 128: 903-914). A claim that comes back
            # short (the queue drained, other replicas took their share, a suspect alone) starts again from
            # `batch_size`: a burst of a few rows is still spread over the workers and replicas.
            full = len(rows) == self.claim_limit and 2 * sum(r.size for r in rows) <= self.batch_bytes
            self.claim_limit = min(2 * self.claim_limit, CLAIMS_GROW_TO * self.batch_size) if full else self.batch_size
            if not rows:
                break
            self.held = list(rows)
            self._lost.clear()
            self._next_beat = time.monotonic() + self.lease_seconds / 3
            try:
                n += self._batch(rows, stop, on_result)
            except BaseException:  # a fatal error, a lost connection, Ctrl-C: what is in hand goes back now
                if not self.store.conn.broken:  # (else: given back on reconnecting, or when the leases end)
                    self._release_held()
                raise
            finally:
                self.held = []
                if self.release_due:  # a long document's memory back to the system, once nothing refers to it
                    self.release_due = False
                    allocator.release()
        return n

    def _batch(self, rows: list[ClaimedRow], stop: threading.Event, on_result) -> int:
        # Short rows first (as claimed), then the others smallest first: a document that is not short runs alone and
        # the worker waits for it, and the rows claimed behind it waited too, locked where no other worker could take
        # them (29 short rows held a minute behind a 3 MB changelog while the rest of the queue, 270 rows, was done).
        rows = sorted(rows, key=lambda r: (not r.short, 0 if r.short else r.size))
        ready: list[Ready] = []
        in_flight: deque[tuple[Started, float]] = deque()  # submitted to the pipeline, oldest first
        n = 0
        first_ready = 0.0

        def report(row: ClaimedRow, result: Result) -> None:
            self._done_with(row)
            if on_result:
                on_result(row, result)

        def flush() -> None:
            size = max(sum(len(r.source.data) for r in ready), sum(allocator.text_size(r.chosen) for r in ready))
            for r, result in zip(ready, self._write(ready), strict=True):
                report(r.row, result)
            ready.clear()
            if size >= allocator.RELEASE_AFTER_BYTES:
                self.release_due = True

        def settle(keep: int) -> None:
            """Take the documents in flight that have finished, in whatever order they finish (one slow document
            holds up none of those behind it), until at most `keep` are left, waiting only while none has. The
            finished ones are written once the first of them has waited FLUSH_SECONDS (also while a slow one still
            runs), and at once when stopping; stopping, only `settle(0)` waits (for what is in the pool)."""
            nonlocal first_ready
            while len(in_flight) > keep:
                if stop.is_set() and keep > 0:  # the rows not yet handed over go back first (end of `_batch`)
                    return
                done = [item for item in in_flight if item[0].future.done()]
                if done:
                    taken = {id(item) for item in done}
                    left = [item for item in in_flight if id(item) not in taken]
                    in_flight.clear()
                    in_flight.extend(left)
                for started, at in done:
                    finished = self.finish(started)
                    if isinstance(finished, Ready):
                        if not ready:
                            first_ready = at
                        ready.append(finished)
                    else:
                        report(started.row, finished)
                if ready and (stop.is_set() or time.monotonic() - first_ready >= FLUSH_SECONDS):
                    flush()
                if done:
                    continue
                until = min(self._next_beat, first_ready + FLUSH_SECONDS) if ready else self._next_beat
                if keep > 0:
                    until = min(until, time.monotonic() + STOP_CHECK_SECONDS)
                # This thread renews the leases while it waits (its connection is idle meanwhile).
                futures.wait([started.future for started, _ in in_flight], timeout=max(0.0, until - time.monotonic()),
                             return_when=futures.FIRST_COMPLETED)  # fmt: skip
                self._beat_if_due()

        def ship() -> None:
            """Hand the loaded documents to the pipeline: one pool task for the group."""
            nonlocal n
            if not pending:
                return
            n += len(pending)
            for (row, _, at), started in zip(pending, self.submit([(r, s) for r, s, _ in pending]), strict=True):
                if isinstance(started, Started):
                    in_flight.append((started, at))
                else:
                    report(row, started)
            pending.clear()

        # Left by an exception, what is still in the pool is nobody's (`drain` hands the rows back) and runs to its
        # end. NOTE: never `Future.cancel()` it: Python 3.11's ProcessPoolExecutor keeps a cancelled item in its table,
        # and if a pool process then dies, its manager thread fails on that item and never answers the other
        # documents in flight (fixed in later versions).
        group = self.pipeline.group_of(len(rows))
        pending: list[tuple[ClaimedRow, SourceDocument, float]] = []  # loaded, to go to the pipeline as a group
        for row in rows:
            if stop.is_set():
                break
            started_at = time.monotonic()
            self._beat_if_due()
            if (row.id, row.attempts) in self._lost:  # requeued or claimed again meanwhile: it would be dropped
                report(row, "superseded")
                continue
            if not row.short and (ready or in_flight or pending):  # a long document next: what is finished is written
                ship()
                settle(0)
                if ready:
                    flush()
                if stop.is_set():  # stopped meanwhile: the long one is not started (it goes back below)
                    break
            elif row.abandoned:  # a suspect goes alone: the group before it goes first
                ship()
            loaded = self.load(row)
            if not isinstance(loaded, SourceDocument):
                n += 1
                report(row, loaded)
                continue
            pending.append((row, loaded, started_at))
            if row.abandoned or not row.short or len(pending) >= group:
                ship()
            # Enough documents in the pool to keep its processes busy (room left for the group being formed); with
            # no pool, each is done already.
            settle(self.pipeline.in_flight - group if row.short else 0)
        if not stop.is_set():
            ship()
        else:  # stopped: what was never handed to the pipeline goes back to the queue now, not after the grace
            self._release_held(but={s.row.id for s, _ in in_flight} | {r.row.id for r in ready})
        settle(0)  # stopped or not: what is in the pool is finished (short documents, or the grace period's)
        if ready:
            flush()
        self._release_held()  # stopped mid-batch: the rest goes straight back to the queue
        return n

    def _release_held(self, but: Collection[int] = ()) -> None:
        """Hand back the rows in hand (`but` those, in the pipeline still), as they were: no try counted."""
        for row in [r for r in self.held if r.id not in but]:
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            self._done_with(row)

    def _done_with(self, row: ClaimedRow) -> None:
        self.held = [r for r in self.held if r.id != row.id]
