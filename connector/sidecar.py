"""The long-running sidecar: a folder watcher and a worker sharing one queue (the `connector.documents` table).

The worker sleeps on LISTEN and wakes on the NOTIFY that every newly pending row sends (from a file the watcher
queued or from a user's INSERT); a poll every `poll_interval` seconds covers notifications lost while disconnected.
"""

from __future__ import annotations

import logging
import threading
import time

from connector.db.database import connect
from connector.pipeline import Pipeline
from connector.settings import NOTIFY_CHANNEL, Settings
from connector.sources.folder import FolderWatcher
from connector.worker import Worker

log = logging.getLogger(__name__)

_WAKE_CHECK = 0.5  # seconds between checks of the stop flag while waiting for notifications


def run(settings: Settings, dsn: str, pipeline: Pipeline, stop: threading.Event, *, watch: bool = True) -> None:
    watcher = FolderWatcher(settings.watch_dir, dsn, settings.settle_seconds) if watch else None
    with connect(dsn, autocommit=True) as work_conn, connect(dsn, autocommit=True) as listen_conn:
        listen_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        worker = Worker(work_conn, pipeline, settings.lease_seconds)
        if watcher:
            watcher.start()
            log.info("watching %s", watcher.root)
        try:
            last_poll = 0.0
            woken = True
            while not stop.is_set():
                if woken or time.monotonic() - last_poll >= settings.poll_interval:
                    last_poll = time.monotonic()
                    worker.drain(stop)
                woken = _wait_for_notify(listen_conn, _WAKE_CHECK)
        finally:
            if watcher:
                watcher.stop()
    log.info("sidecar stopped")


def _wait_for_notify(conn, timeout: float) -> bool:
    return any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
