"""Folder source: queue every supported file in a folder, now and whenever one appears or changes.

watchdog's observer thread only records which paths had events. A settle thread waits until a path's size and
modification time stop changing for `settle_seconds` before it hashes and queues the file, so a slow copy is read
once, whole. A `name.pdf.part` renamed to `name.pdf` arrives as a move event and is handled like a new file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from connector.convert import mime_for_path
from connector.db.database import connect
from connector.db.store import Store
from connector.errors import TransientError

log = logging.getLogger(__name__)

TEMPORARY_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".download", ".swp", "~")


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file inside the watched root: `key` is its POSIX path relative to the root (the document's source_key)."""

    path: Path
    key: str
    mime: str


def file_ref(root: Path, path: Path) -> FileRef | None:
    """The queueable file at `path`, or None for hidden, temporary, unsupported or escaping paths."""
    # abspath, not resolve: a symlinked root or file must keep its name here; escaping links are checked below.
    root = Path(os.path.abspath(root))
    try:
        rel = Path(os.path.abspath(path)).relative_to(root)
    except ValueError:
        return None
    if any(part.startswith(".") for part in rel.parts) or rel.name.endswith(TEMPORARY_SUFFIXES):
        return None
    mime = mime_for_path(rel)
    if mime is None:
        return None
    full = root / rel
    real = full.resolve()
    if not real.is_relative_to(root.resolve()):
        log.warning("refusing %s: symlink points outside the watched folder", rel)
        return None
    if not real.is_file():
        return None
    return FileRef(path=full, key=rel.as_posix(), mime=mime)


def walk(root: Path) -> Iterator[FileRef]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            ref = file_ref(root, Path(dirpath) / name)
            if ref is not None:
                yield ref


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Events that mean "the content may have changed". Opening and closing without writing are left out: our own reads
# (hashing, converting) would otherwise re-trigger the file forever.
_CONTENT_EVENTS = {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED}


class _Events(FileSystemEventHandler):
    def __init__(self, watcher: FolderWatcher):
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in _CONTENT_EVENTS:
            return
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p:
                self.watcher.touch(Path(os.fsdecode(p)))


class FolderWatcher:
    """Initial scan plus live events; queues settled files through its own database connection."""

    def __init__(self, root: Path, dsn: str, settle_seconds: float = 1.0):
        self.root = root.resolve()
        self.dsn = dsn
        self.settle_seconds = settle_seconds
        self._pending: dict[Path, tuple[float, tuple[int, int] | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._observer = Observer()
        self._thread = threading.Thread(target=self._settle_loop, name="folder-settle", daemon=True)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._observer.schedule(_Events(self), str(self.root), recursive=True)
        self._observer.start()
        for ref in walk(self.root):  # after the observer starts, so nothing written meanwhile is missed
            self.touch(ref.path)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._observer.stop()
        self._observer.join(timeout=5)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def touch(self, path: Path) -> None:
        with self._lock:
            self._pending[path] = (time.monotonic(), None)

    def _settle_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                with connect(self.dsn, autocommit=True) as conn:
                    store = Store(conn)
                    backoff = 1.0
                    while not self._stop.wait(0.2):
                        for path in self._settled():
                            try:
                                self._queue(store, path)
                            except psycopg.OperationalError:
                                raise
                            except Exception:  # one odd file must not stop the watcher
                                log.exception("could not queue %s", path)
            except (psycopg.OperationalError, TransientError) as exc:
                log.warning("watcher lost the database (%s); retrying in %.0f s", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _settled(self) -> list[Path]:
        now = time.monotonic()
        ready = []
        with self._lock:
            for path, (since, seen) in list(self._pending.items()):
                try:
                    st = path.stat()
                except OSError:
                    del self._pending[path]  # gone (or renamed: the move event carries the new name)
                    continue
                signature = (st.st_size, st.st_mtime_ns)
                if signature != seen:
                    self._pending[path] = (now, signature)
                elif now - since >= self.settle_seconds:
                    del self._pending[path]
                    ready.append(path)
        return ready

    def _queue(self, store: Store, path: Path) -> None:
        ref = file_ref(self.root, path)
        if ref is None:
            return
        try:
            digest = sha256_file(ref.path)
        except OSError as exc:
            log.warning("cannot read %s: %s", ref.key, exc)
            return
        try:
            doc_id = store.enqueue_file(ref.key, ref.path, ref.mime, digest)
        except psycopg.OperationalError:
            self.touch(path)  # keep it: queued once the connection is back
            raise
        if doc_id is not None:
            log.info("queued %s (document %d)", ref.key, doc_id)
