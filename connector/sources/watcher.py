"""The live folder watcher: events, settling, deletes and renames, rescans, and a watcher that does not die.

watchdog's observer thread only records which paths had events. A settle thread waits until a path's size and
modification time stop changing for `settle_seconds` before it hashes and queues the file, so a slow copy is read
once, whole. A `name.pdf.part` renamed to `name.pdf` arrives as a move event and is handled like a new file.

Deletes and renames are mirrored: a deleted file (or folder) takes its documents and chunks with it, unless
`keep_deleted`; a renamed file (or folder) keeps its documents, chunks and embeddings under the new key, nothing is
re-embedded.

Events can be lost (the kernel's inotify queue overflows on a burst; nobody watches while the sidecar is down), so
the folder is also rescanned (see `connector.sources.folder.rescan`): at start, after every reconnection to the
database, when watchdog reports lost events (`EventsLostEvent`: the queue overflowed), and every `rescan_seconds`.

inotify needs one watch per folder, and the kernel limits them per user (`fs.inotify.max_user_watches`, shared by
every process of that user) and the inotify instances too (`max_user_instances`). A tree past the limit made the
observer fail to start (the sidecar died at start) or, reached later, left new folders unwatched until the periodic
rescan, so the watcher then polls the tree instead (watchdog's `PollingObserver`, every `POLL_SECONDS`) and says so.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

import psycopg
from watchdog.events import (
    EVENT_TYPE_ATTRIB,
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    EventsLostEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from connector.db.database import MissingPrivilege, connect, describe_missing, guard_session, missing_privileges
from connector.db.rows import FileSignature
from connector.db.store import Store
from connector.errors import TransientError
from connector.logs import printable
from connector.settings import Settings
from connector.sources.folder import FileRef, file_signature, folder_key, handle, inspect, rescan

log = logging.getLogger(__name__)

STALL_SECONDS = 300.0
"""`check()` reports the watcher stalled when its settle loop has not come round for this long."""

_TICK = 0.2  # seconds between passes of the settle loop
UNLISTED_CHECK_SECONDS = 2.0  # how often the folders a rescan could not list are tried again

POLL_SECONDS = 5.0
"""Between two polls of the tree when inotify is out of watches: a poll stats every file (about 0.5 s of CPU for
22,000 files on a busy 2-core machine), so it is not done every second."""

_OUT_OF_WATCHES = {errno.ENOSPC, errno.EMFILE}  # what inotify_add_watch and inotify_init say at the user's limits


# Events that mean "the content may have changed". Opening and closing without writing are left out: our own reads
# (hashing, converting) would otherwise re-trigger the file forever. A chmod (attrib) can make a file readable or
# unreadable.
_CONTENT_EVENTS = {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED, EVENT_TYPE_ATTRIB}


class _Events(FileSystemEventHandler):
    def __init__(self, watcher: FolderWatcher):
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self._dispatch(event)
        except Exception:  # one odd path must not kill the observer thread; a rescan finds what this missed
            log.exception("folder event on %s failed; rescanning", printable(os.fsdecode(event.src_path)))
            self.watcher.request_rescan("a folder event failed")

    def _dispatch(self, event: FileSystemEvent) -> None:
        if isinstance(event, EventsLostEvent):  # watchdog has already rebuilt its watches; the events are gone
            self.watcher.request_rescan("events were lost (the inotify queue overflowed)")
            return
        src = Path(os.fsdecode(event.src_path))
        if event.event_type == EVENT_TYPE_DELETED:
            self.watcher.deleted(src)
        elif event.event_type == EVENT_TYPE_MOVED:
            self.watcher.moved(src, Path(os.fsdecode(event.dest_path)), event.is_directory)
        elif not event.is_directory and event.event_type in _CONTENT_EVENTS:
            self.watcher.touch(src)


class FolderWatcher:
    """Live events plus rescans; queues settled files through its own database connection.

    Nothing one file does stops it: errors are caught per event and per file, a dead observer is restarted (with a
    rescan for what it missed), and the settle loop reconnects and rescans after any failure. `check()` says when it
    is not working."""

    def __init__(self, settings: Settings, dsn: str):
        self.root = settings.watch_dir.resolve()
        self.dsn = dsn
        self.settle_seconds = settings.settle_seconds
        self.keep_deleted = settings.keep_deleted
        self.max_bytes = settings.max_document_bytes
        self.rescan_seconds = settings.rescan_seconds
        self.lease_seconds = settings.lease_seconds
        self._ops: list[tuple[str, ...]] = []  # deletes and renames, applied by the settle thread in order
        self._pending: dict[Path, tuple[float, FileSignature | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rescan_reason: str | None = "start"
        self._next_rescan = 0.0
        self._beat = time.monotonic()
        self._problem: str | None = None  # why it is not working right now (cleared once it works again)
        self._lacks: str | None = None  # the grants it lacks (MissingPrivilege), until they are back
        # What the observer watches: the folder at `root` when it started (its device and inode), and the folders
        # the last rescan could not list (no watch on them either). Either changing restarts it (`_supervise`).
        self._root_id: tuple[int, int] | None = None
        self._unlisted: list[Path] = []
        self._next_unlisted_check = 0.0
        self._died: str | None = None
        self._polling = False  # inotify ran out of watches: the tree is polled
        self._out_of_watches = _OutOfWatches(self.root)
        self._observer: BaseObserver = self._new_observer()
        self._thread = self._new_thread()

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._root_id = _identity(self.root)
        logging.getLogger("watchdog.observers.inotify").addFilter(self._out_of_watches)
        self._start_observer()  # before the first rescan (in the settle thread), so nothing written meanwhile is missed
        self._thread.start()

    def stop(self) -> None:
        logging.getLogger("watchdog.observers.inotify").removeFilter(self._out_of_watches)
        with self._lock:
            self._stop.set()
            observer = self._observer
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> str | None:
        """None while the watcher works; otherwise one line saying why not. A settle thread that died is started
        again (the reason is still reported once)."""
        if self._stop.is_set():
            return None
        if not self._thread.is_alive():
            reason = f"folder watcher thread died: {self._died or 'unknown reason'}; restarted"
            self._thread = self._new_thread()
            self._thread.start()
            return reason
        if self._problem:
            return self._problem
        if (stalled := time.monotonic() - self._beat) > STALL_SECONDS:
            return f"folder watcher stalled: no progress for {stalled:.0f} s"
        return None

    def request_rescan(self, reason: str) -> None:
        with self._lock:
            self._rescan_reason = self._rescan_reason or reason

    def touch(self, path: Path) -> None:
        with self._lock:
            self._pending[path] = (time.monotonic(), None)

    def deleted(self, path: Path) -> None:
        key = folder_key(self.root, path)
        with self._lock:
            self._pending.pop(path, None)
            if key is not None and not self.keep_deleted:
                self._ops.append(("delete", key))

    def moved(self, src: Path, dest: Path, is_directory: bool) -> None:
        old, new = folder_key(self.root, src), folder_key(self.root, dest)
        # A rename to a name we would not queue (hidden, temporary, elsewhere) is a delete.
        queueable = new is not None and (is_directory or isinstance(inspect(self.root, dest), FileRef))
        with self._lock:
            self._pending.pop(src, None)
            if old is not None and queueable:
                self._ops.append(("rename", old, new))
            elif old is not None and not self.keep_deleted:
                self._ops.append(("delete", old))
        if not is_directory:
            self.touch(dest)  # queued if new or changed; a plain rename finds its bytes already stored

    def _new_observer(self) -> BaseObserver:
        if not self._polling:
            observer = Observer()
            try:  # watchdog makes the inotify instance here: the instance limit is met here, the watch limit later
                observer.schedule(_Events(self), str(self.root), recursive=True)
                return observer
            except OSError as exc:
                if exc.errno not in _OUT_OF_WATCHES:
                    raise
                self._poll_instead(exc)
        observer = PollingObserver(timeout=POLL_SECONDS)
        observer.schedule(_Events(self), str(self.root), recursive=True)
        return observer

    def _start_observer(self) -> None:
        try:
            self._observer.start()
        except OSError as exc:
            if exc.errno not in _OUT_OF_WATCHES or self._polling:
                raise
            self._poll_instead(exc)
            self._observer = self._new_observer()
            self._observer.start()

    def _poll_instead(self, exc: OSError) -> None:
        self._polling = True
        log.error(
            "cannot watch every folder of %s with inotify (%s): polling it every %.0f s instead; raise "
            "fs.inotify.max_user_watches (and max_user_instances) and restart to be told of changes at once",
            self.root, exc.strerror or exc, POLL_SECONDS,
        )  # fmt: skip

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._settle_main, name="folder-settle", daemon=True)

    def _settle_main(self) -> None:
        try:
            self._settle_loop()
        except BaseException as exc:
            self._died = f"{type(exc).__name__}: {exc}"
            raise

    def _settle_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                with connect(self.dsn, autocommit=True) as conn:
                    guard_session(conn, self.lease_seconds)
                    if self._lacks is not None and (missing := missing_privileges(conn)) is not None:
                        raise MissingPrivilege(missing)
                    store = Store(conn)
                    backoff = 1.0
                    self._problem = self._lacks = None
                    while True:
                        self._pass(store)
                        if self._stop.wait(_TICK):
                            return
            except MissingPrivilege as exc:
                # A grant revoked while running: the files stay pending and are queued once it is back (tried
                # with the backoff below, not at the next periodic rescan); /health says what to grant meanwhile.
                # (The sidecar logs the problem once, and again when it is gone.)
                self._lacks = describe_missing(self.dsn, exc)
                self._problem = f"folder watcher cannot queue files: {self._lacks}"
            except (psycopg.OperationalError, TransientError) as exc:
                self._problem = None  # the database being down is /health's "database" line, not ours
                log.warning("watcher lost the database (%s); retrying in %.0f s", exc, backoff)
            except Exception as exc:  # a bug: say so, start over (reconnect and rescan) instead of dying
                log.exception("folder watcher failed; restarting it")
                self._problem = f"folder watcher failed: {type(exc).__name__}: {printable(str(exc))}; restarting"
            self.request_rescan("reconnected")  # whatever happened meanwhile, a rescan catches up with it
            self._wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._beat = time.monotonic()
            self._stop.wait(min(_TICK, seconds))

    def _pass(self, store: Store) -> None:
        self._beat = time.monotonic()
        self._supervise()
        with self._lock:
            reason, self._rescan_reason = self._rescan_reason, None
        if reason is None and self._beat >= self._next_rescan:
            reason = "periodic"
        if reason is not None:
            self._rescan(store, reason)
        self._apply_ops(store)
        for path, signature in self._settled():
            if self._stop.is_set():  # a long batch must not hold up a shutdown
                return
            try:
                handle(store, self.root, path, self.max_bytes)
            except MissingPrivilege:
                raise  # still pending: queued once the grant is back
            except psycopg.OperationalError:
                if store.conn.broken:
                    raise  # still pending: queued once the connection is back
                # Not the connection (a limit the row exceeds, a statement timeout...): this file only.
                log.exception("could not queue %s", printable(str(path)))
            except Exception:  # one odd file must not stop the watcher
                log.exception("could not queue %s", printable(str(path)))
            self._forget(path, signature)

    def _supervise(self) -> None:
        """Restart watchdog's observer if it or its emitter died (its folder was removed, a read failed), if the
        folder was moved away (inotify follows the moved folder: a new one made at the path went unwatched), or if
        a folder it could not list may be listed now (a chmod adds no watch)."""
        observer = self._observer
        if not (observer.is_alive() and observer.emitters and all(e.is_alive() for e in observer.emitters)):
            why = "folder watcher's observer stopped"
        elif _identity(self.root) != self._root_id:
            why = "the watched folder was moved or replaced"
        elif self._unlisted_now_listable():
            why = "a folder that could not be listed can be now"
        elif (exc := self._out_of_watches.hit) is not None and not self._polling:
            self._poll_instead(exc)  # the folders made since are unwatched (the rescan after the restart reads them)
            why = "inotify ran out of watches"
        else:
            return
        self._problem = f"{why}; restarting the folder watcher"
        log.warning("%s (%s)", self._problem, self.root)
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock:  # stop() takes the lock to set the flag: no observer is started after it
            if self._stop.is_set():
                return
            self._root_id = _identity(self.root)
            self._unlisted = []
            self._observer = self._new_observer()
            self._start_observer()
        self._problem = None
        self.request_rescan("observer restarted")

    def _unlisted_now_listable(self) -> bool:
        """Whether a folder the last rescan could not list can be read now; tried every UNLISTED_CHECK_SECONDS (a
        folder that opens but fails when walked must not restart the watcher on every pass)."""
        if not self._unlisted or time.monotonic() < self._next_unlisted_check:
            return False
        self._next_unlisted_check = time.monotonic() + UNLISTED_CHECK_SECONDS
        return any(map(_listable, self._unlisted))

    def _rescan(self, store: Store, reason: str) -> None:
        started = time.monotonic()
        unlisted: list[Path] = []
        vanished = rescan(store, self.root, self.keep_deleted, self._rescan_touch, unlisted)
        self._unlisted = unlisted
        with self._lock:
            self._ops.extend(("delete", key) for key in vanished)
        self._next_rescan = time.monotonic() + self.rescan_seconds
        level = logging.DEBUG if reason == "periodic" else logging.INFO
        log.log(level, "rescanned %s (%s) in %.1f s", self.root, reason, time.monotonic() - started)

    def _rescan_touch(self, path: Path) -> None:
        self._beat = time.monotonic()
        with self._lock:
            if path not in self._pending:  # a live event's settle clock is not reset
                self._pending[path] = (time.monotonic(), None)

    def _apply_ops(self, store: Store) -> None:
        with self._lock:
            ops, self._ops = self._ops, []
        for i, op in enumerate(ops):
            try:
                if op[0] == "delete":
                    for doc in store.delete_folder_documents(op[1]):
                        log.info("removed %s (document %d): file deleted", doc.source_key, doc.id)
                else:
                    for doc in store.delete_replaced(op[1], op[2]):  # a file moved over another one
                        log.info("removed %s (document %d): replaced by a moved file", doc.source_key, doc.id)
                    for doc in store.rename_folder_documents(self.root, op[1], op[2]):
                        log.info("renamed to %s (document %d)", doc.source_key, doc.id)
            except (psycopg.OperationalError, MissingPrivilege) as exc:
                lost = store.conn.broken or isinstance(exc, MissingPrivilege)
                if not lost:  # this operation only; the next rescan repairs it
                    log.exception("could not apply %s", printable(repr(op)))
                    continue
                with self._lock:
                    self._ops[:0] = ops[i:]  # keep them for when the connection is back
                raise
            except Exception:  # one odd operation must not stop the others (the next rescan repairs it)
                log.exception("could not apply %s", printable(repr(op)))

    def _settled(self) -> list[tuple[Path, FileSignature]]:
        """Paths whose signature (size, mtime, ctime) has been stable for `settle_seconds`. They stay pending until
        `_forget`, so a batch cut short by a lost connection is picked up again when it is back."""
        now = time.monotonic()
        ready = []
        with self._lock:
            for path, (since, seen) in list(self._pending.items()):
                try:
                    st = path.lstat() if path.is_symlink() else path.stat()
                except OSError:
                    st = None
                signature = file_signature(st) if st is not None else (-1, -1, -1)  # gone, or a loop: handle() decides
                if signature != seen:
                    self._pending[path] = (now, signature)
                elif now - since >= self.settle_seconds:
                    ready.append((path, signature))
        return ready

    def _forget(self, path: Path, signature: FileSignature) -> None:
        """Done with `path`, unless it changed (or had another event) while it was being queued."""
        with self._lock:
            if self._pending.get(path, (0.0, None))[1] == signature:
                del self._pending[path]


class _OutOfWatches(logging.Filter):
    """Notes that watchdog's inotify observer, already running, could not watch a new folder under `root` for lack
    of watches: it logs that (a warning with the OSError) and carries on with that subtree unwatched."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = os.fsencode(root)
        self.hit: OSError | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        for exc in args:
            if isinstance(exc, OSError) and exc.errno in _OUT_OF_WATCHES:
                path = os.fsencode(next((a for a in args if isinstance(a, bytes | str)), b""))
                if path == self.root or path.startswith(self.root + os.sep.encode()):
                    self.hit = exc
        return True


def _listable(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            next(entries, None)  # opening is not reading (EIO, some network filesystems' ACLs)
            return True
    except OSError:
        return False


def _identity(path: Path) -> tuple[int, int] | None:
    """The folder at `path` (device, inode), or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
