"""Folder source: queue every supported file in a folder, now and whenever one appears or changes.

watchdog's observer thread only records which paths had events. A settle thread waits until a path's size and
modification time stop changing for `settle_seconds` before it hashes and queues the file, so a slow copy is read
once, whole. A `name.pdf.part` renamed to `name.pdf` arrives as a move event and is handled like a new file.

Deletes and renames are mirrored: a deleted file (or folder) takes its documents and chunks with it, unless
`keep_deleted`; a renamed file (or folder) keeps its documents, chunks and embeddings under the new key, nothing is
re-embedded. At start, documents of files that vanished while the sidecar was down are removed the same way.
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
    EVENT_TYPE_DELETED,
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
        src = Path(os.fsdecode(event.src_path))
        if event.event_type == EVENT_TYPE_DELETED:
            self.watcher.deleted(src)
            return
        if event.event_type == EVENT_TYPE_MOVED:
            self.watcher.moved(src, Path(os.fsdecode(event.dest_path)), event.is_directory)
            return
        if event.is_directory or event.event_type not in _CONTENT_EVENTS:
            return
        self.watcher.touch(src)


class FolderWatcher:
    """Initial scan plus live events; queues settled files through its own database connection."""

    def __init__(self, root: Path, dsn: str, settle_seconds: float = 1.0, keep_deleted: bool = False):
        self.root = root.resolve()
        self.dsn = dsn
        self.settle_seconds = settle_seconds
        self.keep_deleted = keep_deleted
        self._ops: list[tuple[str, ...]] = []  # deletes and renames, applied by the settle thread in order
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

    def deleted(self, path: Path) -> None:
        key = self._key(path)
        with self._lock:
            self._pending.pop(path, None)
            if key is not None and not self.keep_deleted:
                self._ops.append(("delete", key))

    def moved(self, src: Path, dest: Path, is_directory: bool) -> None:
        old, new = self._key(src), self._key(dest)
        # A rename to a name we would not queue (hidden, temporary, unsupported, elsewhere) is a delete.
        queueable = new is not None and (is_directory or file_ref(self.root, dest) is not None)
        with self._lock:
            self._pending.pop(src, None)
            if old is not None and queueable:
                self._ops.append(("rename", old, new))
            elif old is not None and not self.keep_deleted:
                self._ops.append(("delete", old))
        if not is_directory:
            self.touch(dest)  # queued if new or changed; a plain rename finds its bytes already stored

    def _key(self, path: Path) -> str | None:
        try:
            rel = Path(os.path.abspath(path)).relative_to(self.root)
        except ValueError:
            return None
        return rel.as_posix() if rel.parts and not any(p.startswith(".") for p in rel.parts) else None

    def _apply_ops(self, store: Store) -> None:
        with self._lock:
            ops, self._ops = self._ops, []
        for i, op in enumerate(ops):
            try:
                if op[0] == "delete":
                    for doc_id, key in store.delete_folder_documents(op[1]):
                        log.info("removed %s (document %d): file deleted", key, doc_id)
                else:
                    for doc_id, key in store.delete_replaced(op[1], op[2]):  # a file moved over another one
                        log.info("removed %s (document %d): replaced by a moved file", key, doc_id)
                    for doc_id, key in store.rename_folder_documents(self.root, op[1], op[2]):
                        log.info("renamed to %s (document %d)", key, doc_id)
            except psycopg.OperationalError:
                with self._lock:
                    self._ops[:0] = ops[i:]  # keep them for when the connection is back
                raise

    def _reconcile(self, store: Store) -> None:
        """Documents whose files vanished while nobody watched."""
        if self.keep_deleted:
            return
        for key in vanished(store, self.root):
            with self._lock:
                self._ops.append(("delete", key))

    def _settle_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                with connect(self.dsn, autocommit=True) as conn:
                    store = Store(conn)
                    backoff = 1.0
                    self._reconcile(store)
                    while not self._stop.wait(0.2):
                        self._apply_ops(store)
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
            queue_file(store, ref)
        except psycopg.OperationalError:
            self.touch(path)  # keep it: queued once the connection is back
            raise


def queue_file(store: Store, ref: FileRef) -> int | None:
    """Queue a file when it is new or its bytes changed; the document id, or None when nothing was queued."""
    try:
        digest = sha256_file(ref.path)
    except OSError as exc:
        log.warning("cannot read %s: %s", ref.key, exc)
        return None
    doc_id = store.enqueue_file(ref.key, ref.path, ref.mime, digest)
    if doc_id is not None:
        log.info("queued %s (document %d)", ref.key, doc_id)
    return doc_id


def vanished(store: Store, root: Path) -> list[str]:
    """Keys of the documents of files under `root` that no longer exist."""
    return [key for key, file_path in store.folder_files_under(root) if not Path(file_path).exists()]


def scan(root: Path, dsn: str, keep_deleted: bool = False) -> int:
    """One pass instead of a watch (`connector run --once`): drop the documents of vanished files, queue every new
    or changed file. Returns how many files were queued."""
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    queued = 0
    with connect(dsn, autocommit=True) as conn:
        store = Store(conn)
        for key in [] if keep_deleted else vanished(store, root):
            store.delete_folder_documents(key)
        for ref in walk(root):
            queued += queue_file(store, ref) is not None
    return queued
