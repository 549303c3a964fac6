"""The worker: claim a queued document, run the pipeline, store the outcome; one document at a time.

Whatever goes wrong with one document ends in its row (`failed`, `last_error`) and the worker moves on. Only a
`FatalError` (configuration) or a lost database connection (`TransientError`) leaves this module: the first stops
the process, the second leaves the row under its lease, to be claimed again once the lease runs out. A worker
interrupted mid-document (Ctrl-C twice, an exception from outside) hands the row straight back to the queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import psycopg

from connector.db.store import ClaimedRow, Store
from connector.errors import DocumentError, FatalError, TransientError
from connector.pipeline import Pipeline

log = logging.getLogger(__name__)

Result = Literal["done", "unchanged", "failed", "superseded"]


class Worker:
    def __init__(self, conn: psycopg.Connection, pipeline: Pipeline, lease_seconds: int, roots: Sequence[Path]):
        self.store = Store(conn)
        self.pipeline = pipeline
        self.lease_seconds = lease_seconds
        self.roots = tuple(roots)  # folders whose files this worker may read

    def process(self, row: ClaimedRow) -> Result:
        context = {"document_id": row.id, "source_key": row.source_key}
        content_hash: str | None = None
        try:
            source = row.load(self.roots)
            content_hash = source.content_hash
            if source.content_hash == row.content_hash:
                # Same bytes as the stored chunks: nothing to convert or embed again.
                self.store.mark_unchanged(row)
                log.info("unchanged %s", row.source_key, extra=context)
                return "unchanged"
            outcome = self.pipeline.run(source)
            with self.pipeline.totals("write"):
                written = self.store.write(row, source, outcome)
            if not written:
                log.warning("%s was deleted or claimed again while processing; result dropped", row.source_key)
                return "superseded"
        except DocumentError as exc:
            self._fail(row, str(exc), content_hash)
            return "failed"
        except (FatalError, TransientError):
            raise
        except psycopg.OperationalError as exc:
            raise TransientError(f"database connection lost while processing {row.source_key}: {exc}") from exc
        except Exception as exc:  # a bug or an unexpected input: record it on the row, keep the sidecar alive
            log.exception("unexpected error on %s", row.source_key, extra=context)
            self._fail(row, f"internal error: {type(exc).__name__}: {exc}", content_hash)
            return "failed"
        except BaseException:  # KeyboardInterrupt, SystemExit: give the document back before leaving
            self.store.release(row)
            raise
        log.info(
            "done %s: %s, %d chunks, score %.3f (%s)",
            row.source_key,
            outcome.winner.candidate.strategy,
            len(outcome.chunks),
            outcome.winner.score,
            ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in outcome.timings.items()),
            extra=context,
        )
        return "done"

    def _fail(self, row: ClaimedRow, error: str, content_hash: str | None) -> None:
        log.warning("failed %s: %s", row.source_key, error, extra={"document_id": row.id})
        self.store.mark_failed(row, error, content_hash)

    def drain(self, stop: threading.Event, on_result: Callable[[ClaimedRow, Result], None] | None = None) -> int:
        """Process queued documents until the queue is empty or `stop` is set; returns how many were processed."""
        n = 0
        while not stop.is_set():
            row = self.store.claim_next(self.lease_seconds)
            if row is None:
                break
            result = self.process(row)
            n += 1
            if on_result:
                on_result(row, result)
        return n
