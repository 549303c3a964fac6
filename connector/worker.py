"""The worker: claim a queued document, run the pipeline, store the outcome; one document at a time.

Whatever goes wrong with one document ends in its row and the worker moves on:
- a `DocumentError` (unreadable, corrupt, unsupported...) fails it at once, with the reason in `last_error`;
- a `TransientError` from a stage (an endpoint timing out), and any exception nobody classified (a bug, a race),
  puts it back in the queue after an exponential backoff (`retry_after`), and fails it once `max_attempts` tries
  have failed;
- a worker that died while holding it (its lease ran out) also counts as a failed try, so a document that crashes
  the process cannot loop forever.
While it works, the worker extends its lease every third of the lease (heartbeat). Only a `FatalError`
(configuration) or a lost database connection (`TransientError`) leaves this module: the first stops the process,
the second makes the sidecar reconnect, and the rows it held go back to the queue. A worker interrupted mid-document
(SIGTERM past the grace period, Ctrl-C) hands the row straight back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import psycopg

from connector.db.store import ClaimedRow, Store
from connector.errors import DocumentError, FatalError, TransientError
from connector.pipeline import Pipeline

log = logging.getLogger(__name__)

Result = Literal["done", "unchanged", "failed", "superseded", "retry"]
MAX_BACKOFF_S = 300.0


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
        self.current: ClaimedRow | None = None  # what it holds now (read by the shutdown path)
        self.last_timings: dict[str, float] = {}  # stage → ms of the last document done (for the metrics endpoint)

    def process(self, row: ClaimedRow) -> Result:
        context = {"document_id": row.id, "source_key": row.source_key}
        content_hash: str | None = None
        if row.retries >= self.max_attempts:
            with contextlib.suppress(DocumentError):  # the hash: only new bytes requeue a file that kills workers
                content_hash = row.load(self.roots, self.max_bytes).content_hash
            self._fail(row, f"gave up after {row.retries} tries: the worker processing it stopped (crash, kill or "
                       "lost connection) each time", content_hash)  # fmt: skip
            return "failed"
        try:
            source = row.load(self.roots, self.max_bytes)
            content_hash = source.content_hash
            if source.content_hash == row.content_hash:
                # Same bytes as the stored chunks: nothing to convert or embed again.
                self.store.mark_unchanged(row)
                log.info("unchanged %s", row.source_key, extra=context)
                return "unchanged"
            tries = f" (try {row.retries + 1} of {self.max_attempts})" if row.retries else ""
            log.info("processing %s%s", row.source_key, tries, extra=context)
            with self._heartbeat(row):
                outcome = self.pipeline.run(source)
            t0 = time.perf_counter()
            with self.pipeline.totals("write"):
                written = self.store.write(row, source, outcome)
            write_ms = (time.perf_counter() - t0) * 1000
            if not written:
                log.warning("%s was deleted or claimed again while processing; result dropped", row.source_key)
                return "superseded"
            self.last_timings = {**outcome.timings, "write": write_ms}
        except DocumentError as exc:
            self._fail(row, str(exc), content_hash)
            return "failed"
        except psycopg.OperationalError as exc:
            if self.store.conn.broken:
                raise TransientError(f"database connection lost while processing {row.source_key}: {exc}") from exc
            return self._retry(row, f"database error: {exc}", content_hash)  # a timeout, a full disk...
        except TransientError as exc:
            return self._retry(row, str(exc), content_hash)
        except FatalError:
            self.store.release(row)
            raise
        except Exception as exc:
            # A bug or a race, not a verdict on the document: it costs a try with backoff, like a transient error,
            # and the row fails only once the tries are spent. Only errors the code classifies as permanent
            # (DocumentError) fail a document at once.
            log.exception("unexpected error on %s", row.source_key, extra=context)
            return self._retry(row, f"internal error: {type(exc).__name__}: {exc}", content_hash)
        except BaseException:  # KeyboardInterrupt, SystemExit: give the document back before leaving
            with contextlib.suppress(psycopg.Error):
                self.store.release(row)
            raise
        cache = outcome.embedding
        log.info(
            "done %s: %s, %d chunks%s, score %.3f (%s)",
            row.source_key,
            outcome.winner.candidate.strategy,
            len(outcome.chunks),
            f" ({cache['embedded']} embedded, {cache['cached']} from the cache)" if cache else "",
            outcome.winner.score,
            ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in outcome.timings.items()),
            extra=context,
        )
        return "done"

    def _fail(self, row: ClaimedRow, error: str, content_hash: str | None) -> None:
        log.warning("failed %s: %s", row.source_key, error, extra={"document_id": row.id, "source_key": row.source_key})
        self.store.mark_failed(row, error, content_hash)

    def _retry(self, row: ClaimedRow, error: str, content_hash: str | None) -> Result:
        delay = min(self.retry_base_s * 2**row.retries, MAX_BACKOFF_S)
        status = self.store.retry_later(row, error, delay, self.max_attempts, content_hash)
        context = {"document_id": row.id, "source_key": row.source_key}
        if status == "failed":
            log.warning("failed %s after %d tries: %s", row.source_key, row.retries + 1, error, extra=context)
            return "failed"
        log.warning("retrying %s in %.0f s: %s", row.source_key, delay, error, extra=context)
        return "retry"

    @contextlib.contextmanager
    def _heartbeat(self, row: ClaimedRow) -> Iterator[None]:
        """Extend the lease every third of it while the pipeline runs (on the worker's own connection, idle then)."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.lease_seconds / 3):
                try:
                    if not self.store.heartbeat(row, self.lease_seconds):
                        # Requeued meanwhile (new bytes or content) or claimed again after a stall: this result
                        # will not be written (the claim token decides), the newer pass will.
                        log.warning("%s is no longer ours (requeued or claimed again); its result will be dropped",
                                    row.source_key)  # fmt: skip
                        return
                except psycopg.Error as exc:  # keep trying: the next beat may get through before the lease ends
                    log.warning("heartbeat failed for %s: %s", row.source_key, exc)
                    if self.store.conn.broken:
                        return

        thread = threading.Thread(target=beat, name=f"heartbeat-{row.id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def drain(self, stop: threading.Event, on_result: Callable[[ClaimedRow, Result], None] | None = None) -> int:
        """Process queued documents until the queue is empty or `stop` is set; returns how many were processed."""
        n = 0
        while not stop.is_set():
            row = self.store.claim_next(self.lease_seconds, self.name, self.roots)
            if row is None:
                break
            self.current = row
            try:
                result = self.process(row)
            finally:
                self.current = None
            n += 1
            if on_result:
                on_result(row, result)
        return n
