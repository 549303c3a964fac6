"""The worker: claim a queued document, run the pipeline, store the outcome; one document at a time.

Whatever goes wrong with one document ends in its row (`failed`, `last_error`) and the worker moves on. Only a
`FatalError` (configuration) or a lost database connection leaves this module: the first stops the process, the
second leaves the row under its lease, to be claimed again once the lease runs out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Literal

import psycopg

from connector.db.store import ClaimedRow, Store
from connector.errors import DocumentError, FatalError, TransientError
from connector.pipeline import Pipeline

log = logging.getLogger(__name__)

Result = Literal["done", "unchanged", "failed"]


class Worker:
    def __init__(self, conn: psycopg.Connection, pipeline: Pipeline, lease_seconds: int):
        self.store = Store(conn)
        self.pipeline = pipeline
        self.lease_seconds = lease_seconds

    def process(self, row: ClaimedRow) -> Result:
        context = {"document_id": row.id, "source_key": row.source_key}
        try:
            source = row.load()
            if source.content_hash == row.content_hash:
                # Same bytes as the stored chunks: nothing to convert or embed again.
                self.store.mark_unchanged(row.id)
                log.info("unchanged %s", row.source_key, extra=context)
                return "unchanged"
            outcome = self.pipeline.run(source)
            self.store.write(source, outcome)
        except DocumentError as exc:
            self._fail(row, str(exc))
            return "failed"
        except (FatalError, TransientError):
            raise
        except psycopg.OperationalError as exc:
            raise TransientError(f"database connection lost while processing {row.source_key}: {exc}") from exc
        except Exception as exc:  # a bug or an unexpected input: record it on the row, keep the sidecar alive
            log.exception("unexpected error on %s", row.source_key, extra=context)
            self._fail(row, f"internal error: {type(exc).__name__}: {exc}")
            return "failed"
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

    def _fail(self, row: ClaimedRow, error: str) -> None:
        log.warning("failed %s: %s", row.source_key, error, extra={"document_id": row.id})
        self.store.mark_failed(row.id, error)

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

    def process_id(self, document_id: int) -> Result | None:
        """Process one given document now; None when it is not pending (another worker holds it)."""
        row = self.store.claim(document_id, self.lease_seconds)
        return self.process(row) if row is not None else None
