"""Operations: the Prometheus metrics of the process and the health report, served over HTTP by `connector.web`.

- metrics: `connector_documents_total{outcome}` (done, unchanged, failed, retry, superseded),
  `connector_stage_seconds{stage}` (convert, candidates, guards, each metric, select, embed, write),
  `connector_queue_documents{state}` (ready, ready_files, backing_off, processing, done, failed; read from the
  database at scrape time), `connector_database_up`, `connector_workers_alive`, and the embedder's (connector.counters):
  `connector_embed_requests_total`, `_inputs_total`, `_tokens_total`, `_failures_total{kind}`,
  `connector_embed_cache_total{result}` (hit, miss).
- health: `{"status": "ok", ...}` while every worker thread and the folder watcher are alive and the database
  answers, else `"status": "degraded"` with the `problems` in words.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram, generate_latest

from connector import secrets
from connector.counters import REGISTRY
from connector.db.database import connect
from connector.db.store import Store

DOCUMENTS = Counter("connector_documents", "Documents processed, by outcome", ["outcome"], registry=REGISTRY)
STAGE_SECONDS = Histogram(
    "connector_stage_seconds",
    "Time per pipeline stage per document",
    ["stage"],
    buckets=(0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
QUEUE = Gauge("connector_queue_documents", "Documents in the queue table, by state", ["state"], registry=REGISTRY)
DATABASE_UP = Gauge("connector_database_up", "1 when the last scrape reached the database", registry=REGISTRY)
WORKERS_ALIVE = Gauge("connector_workers_alive", "Worker threads running", registry=REGISTRY)


def record(outcome: str, timings: dict[str, float] | None = None) -> None:
    DOCUMENTS.labels(outcome).inc()
    for stage, ms in (timings or {}).items():
        STAGE_SECONDS.labels(stage).observe(ms / 1000)


def prometheus() -> bytes:
    """The registry in Prometheus' text format (refresh the gauges with `Health.snapshot()` first)."""
    return generate_latest(REGISTRY)


class Health:
    """The sidecar's health, read on demand (blocking: it opens a connection to count the queue)."""

    def __init__(
        self, dsn: str, workers_alive: Callable[[], int], workers: int, problems: Callable[[], list[str]]
    ) -> None:
        self.dsn = dsn
        self.workers_alive = workers_alive  # how many worker threads still run
        self.workers = workers
        self.problems = problems  # internal threads that are dead or failing (watcher, workers), in words

    def snapshot(self) -> dict:
        """The health report; also refreshes the gauges of `/metrics`."""
        alive = self.workers_alive()
        WORKERS_ALIVE.set(alive)
        try:
            with connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
                depth = Store(conn).queue_depth()
            DATABASE_UP.set(1)
            for state, n in depth.items():
                QUEUE.labels(state).set(n)
            database = "ok"
        except Exception as exc:  # any failure to reach it is "down" for a health check
            DATABASE_UP.set(0)
            # The reason, on one line and scrubbed (connection errors carry the DSN, already without its password)
            depth, database = {}, f"unreachable: {secrets.scrub(' '.join(str(exc).split()))[:300]}"
        problems = self.problems()
        ok = database == "ok" and alive == self.workers and not problems
        return {"status": "ok" if ok else "degraded", "database": database, "workers": self.workers,
                "workers_alive": alive, "problems": problems, "queue": depth}  # fmt: skip
