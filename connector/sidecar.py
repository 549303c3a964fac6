"""The long-running sidecar: a folder watcher and a worker sharing one queue (the `connector.documents` table).

The worker sleeps on LISTEN and wakes on the NOTIFY that every newly pending row sends (from a file the watcher
queued or from a user's INSERT); a poll every `poll_interval` seconds covers notifications missed while the
connection was down. A lost connection is re-opened with exponential backoff; rows in flight stay under their lease.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from connector.db.database import connect
from connector.errors import TransientError
from connector.pipeline import Pipeline
from connector.settings import NOTIFY_CHANNEL, Settings
from connector.sources.folder import FolderWatcher
from connector.worker import Worker

log = logging.getLogger(__name__)

_WAKE_CHECK = 0.5  # seconds between checks of the stop flag while waiting for notifications
_MAX_BACKOFF = 30.0


def run(settings: Settings, dsn: str, pipeline: Pipeline, stop: threading.Event, *, watch: bool = True) -> None:
    watcher = FolderWatcher(settings.watch_dir, dsn, settings.settle_seconds) if watch else None
    roots = [settings.watch_dir] if watch else []
    if watcher:
        watcher.start()
        log.info("watching %s", watcher.root)
    backoff = 1.0
    try:
        while not stop.is_set():
            try:
                _serve(settings, dsn, pipeline, stop, roots)
            except (psycopg.OperationalError, TransientError) as exc:
                log.warning("database unavailable (%s); retrying in %.0f s", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
    finally:
        if watcher:
            watcher.stop()
    log.info("sidecar stopped")


def _serve(settings: Settings, dsn: str, pipeline: Pipeline, stop: threading.Event, roots) -> None:
    with connect(dsn, autocommit=True) as work_conn, connect(dsn, autocommit=True) as listen_conn:
        listen_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        worker = Worker(work_conn, pipeline, settings.lease_seconds, roots)
        last_poll = 0.0
        woken = True  # drain once at start: rows may have been queued while nobody listened
        while not stop.is_set():
            if woken or time.monotonic() - last_poll >= settings.poll_interval:
                last_poll = time.monotonic()
                worker.drain(stop)
            woken = any(True for _ in listen_conn.notifies(timeout=_WAKE_CHECK, stop_after=1))
