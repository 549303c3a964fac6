"""Operations: Prometheus metrics and a health endpoint, served on a local port (`CONNECTOR_HTTP_PORT`).

- `GET /metrics`: `connector_documents_total{outcome}` (done, unchanged, failed, retry, superseded),
  `connector_stage_seconds{stage}` (convert, candidates, guards, each metric, select, embed, write),
  `connector_queue_documents{state}` (ready, backing_off, processing, done, failed; read from the database at
  scrape time), `connector_database_up`, `connector_workers_alive`.
- `GET /health`: 200 `{"status": "ok", ...}` while every worker thread and the folder watcher are alive and the
  database answers, else 503 with `"status": "degraded"` and the `problems` in words.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from connector import secrets
from connector.db.database import connect
from connector.db.store import Store

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
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


class HealthServer:
    """/health and /metrics on a background thread; `workers_alive` tells how many worker threads still run."""

    def __init__(
        self,
        host: str,
        port: int,
        dsn: str,
        workers_alive: Callable[[], int],
        workers: int,
        problems: Callable[[], list[str]],
    ):
        self.dsn = dsn
        self.workers_alive = workers_alive
        self.workers = workers
        self.problems = problems  # internal threads that are dead or failing (watcher, workers), in words
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health-http", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()
        log.info("health and metrics on http://%s:%d/ (/health, /metrics)", *self._server.server_address[:2])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def snapshot(self) -> dict:
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path.split("?")[0] == "/health":
                    report = server.snapshot()
                    body = json.dumps(report).encode()
                    self._reply(200 if report["status"] == "ok" else 503, "application/json", body)
                elif self.path.split("?")[0] == "/metrics":
                    server.snapshot()
                    self._reply(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
                else:
                    self._reply(404, "text/plain", b"not found: try /health or /metrics\n")

            def _reply(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args) -> None:  # noqa: A002 - scrapes are not news
                pass

        return Handler
