"""The long-running sidecar: a folder watcher and N workers sharing one queue (the `connector.documents` table).

Each worker thread has its own connections. It sleeps on LISTEN and wakes on the NOTIFY that every newly pending
row sends (a file the watcher queued, a user's INSERT, a watched table's trigger); a poll every `poll_interval`
seconds covers notifications missed while the connection was down and retries whose backoff has passed. A lost
connection is re-opened with exponential backoff; on reconnecting, a worker gives back the rows it held.

Stopping (SIGTERM, Ctrl-C): no new claims; in-flight documents get `shutdown_grace_seconds` to finish, then go back
to the queue (their claim token is bumped, so a late result is dropped). `once=True` drains the queue and returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from connector.db.database import connect
from connector.db.store import Store
from connector.errors import FatalError, TransientError
from connector.pipeline import Pipeline
from connector.settings import NOTIFY_CHANNEL, Settings
from connector.sources.folder import FolderWatcher, scan
from connector.worker import Worker, worker_name

log = logging.getLogger(__name__)

_WAKE_CHECK = 0.5  # seconds between checks of the stop flag while waiting for notifications
_MAX_BACKOFF = 30.0


def run(
    settings: Settings,
    dsn: str,
    make_pipeline: Callable[[], Pipeline],
    stop: threading.Event,
    *,
    watch: bool = True,
    once: bool = False,
) -> None:
    roots = [settings.watch_dir] if watch else []
    watcher = server = None
    workers: list[_WorkerThread] = []
    try:
        if watch and once:
            n = scan(settings.watch_dir, dsn, settings.keep_deleted)
            log.info("queued %d file(s) from %s", n, settings.watch_dir.resolve())
        elif watch:
            watcher = FolderWatcher(settings.watch_dir, dsn, settings.settle_seconds, settings.keep_deleted)
            watcher.start()
            log.info("watching %s", watcher.root)
        workers = [_WorkerThread(settings, dsn, make_pipeline(), stop, roots, i, once) for i in range(settings.workers)]
        server = _health_server(settings, dsn, workers)
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers) and not stop.is_set() and not any(w.fatal for w in workers):
            stop.wait(0.2)
        stop.set()
        _shutdown(workers, dsn, settings.shutdown_grace_seconds)
        if fatal := next((w.fatal for w in workers if w.fatal), None):  # read after the grace: late ones count
            raise fatal
    except BaseException:  # a second Ctrl-C/SIGTERM, or an error: what is in hand goes back to the queue now
        stop.set()
        _release(workers, dsn)
        raise
    finally:
        if watcher:
            watcher.stop()
        if server:
            server.stop()
    log.info("sidecar stopped")


def _health_server(settings: Settings, dsn: str, workers: list[_WorkerThread]):
    if settings.http_port is None:
        return None
    from connector.observe import HealthServer

    server = HealthServer(
        settings.http_host, settings.http_port, dsn, lambda: sum(w.is_alive() for w in workers), len(workers)
    )
    server.start()
    return server


def _shutdown(workers: list[_WorkerThread], dsn: str, grace: float) -> None:
    deadline = time.monotonic() + grace
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    _release(workers, dsn)


def _release(workers: list[_WorkerThread], dsn: str) -> None:
    """Hand back the documents still in the workers' hands (their claim token is bumped: late results are
    dropped)."""
    held = [w.worker.current for w in workers if w.is_alive() and w.worker and w.worker.current]
    if not held:
        return
    try:
        with connect(dsn, autocommit=True) as conn:
            store = Store(conn)
            for row in held:
                if row is not None and store.release(row):
                    log.warning("%s returned to the queue unfinished", row.source_key)
    except (psycopg.Error, TransientError) as exc:  # the database is gone too: the leases will expire
        log.warning("could not hand back %d document(s): %s", len(held), exc)


class _WorkerThread(threading.Thread):
    def __init__(
        self,
        settings: Settings,
        dsn: str,
        pipeline: Pipeline,
        stop: threading.Event,
        roots: list[Path],
        index: int,
        once: bool,
    ):
        # Daemon: past the grace period the process exits without waiting for a document still in the pipeline.
        super().__init__(name=f"worker-{index}", daemon=True)
        self.settings = settings
        self.dsn = dsn
        self.pipeline = pipeline
        self.stop = stop
        self.roots = roots
        self.once = once
        self.name_in_queue = worker_name(str(index))
        self.worker: Worker | None = None
        self.fatal: FatalError | None = None

    def run(self) -> None:
        backoff = 1.0
        while not self.stop.is_set():
            try:
                self._serve()
                if self.once:
                    return
                backoff = 1.0
            except FatalError as exc:
                self.fatal = exc
                return
            except (psycopg.OperationalError, TransientError) as exc:
                log.warning("database unavailable (%s); retrying in %.0f s", exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
            except Exception as exc:  # a read-only database, a missing privilege...: stop the process, loudly
                log.exception("worker %s stopped", self.name)
                self.fatal = FatalError(f"worker {self.name} stopped: {type(exc).__name__}: {exc}")
                return

    def _serve(self) -> None:
        s = self.settings
        with connect(self.dsn, autocommit=True) as work_conn, connect(self.dsn, autocommit=True) as listen_conn:
            listen_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self.worker = Worker(work_conn, self.pipeline, s.lease_seconds, self.roots, name=self.name_in_queue,
                                 max_attempts=s.max_attempts, retry_base_s=s.retry_base_seconds,
                                 max_bytes=s.max_document_bytes)  # fmt: skip
            if released := self.worker.store.release_mine(self.name_in_queue):
                log.info("gave back %d document(s) held before the connection was lost", released)
            if self.once:
                self.worker.drain(self.stop, self._record)
                return
            last_poll = 0.0
            woken = True  # drain once at start: rows may have been queued while nobody listened
            while not self.stop.is_set():
                if woken or time.monotonic() - last_poll >= s.poll_interval:
                    last_poll = time.monotonic()
                    self.worker.drain(self.stop, self._record)
                woken = any(True for _ in listen_conn.notifies(timeout=_WAKE_CHECK, stop_after=1))

    def _record(self, _row, result: str) -> None:
        from connector.observe import record

        record(result, self.worker.last_timings if self.worker and result == "done" else None)
