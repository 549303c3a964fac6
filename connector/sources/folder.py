"""Folder source: which files of a folder are documents, and queueing them (`connector run --once`, rescans).

A file is keyed by its POSIX path relative to the folder. One that cannot be processed as it is (unreadable, too
large, not a regular file, a name that is not UTF-8) becomes a `failed` row with the reason, logged once: no file is
silently dropped. A file of a type we cannot read is queued all the same and fails at conversion, saying what it
looks like. A rescan reads only files whose size, modification time or inode change time differ from what their row
was hashed with, and removes the documents of files that are gone. The live watcher is `connector.sources.watcher`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from connector.convert import mime_for_path
from connector.db.database import connect
from connector.db.rows import FileSignature
from connector.db.store import Store
from connector.settings import Settings
from connector.sources.files import NotRegularFile, TooLarge, open_regular, sha256_regular

log = logging.getLogger(__name__)

TEMPORARY_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".download", ".swp", "~")


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file inside the watched root: `key` is its POSIX path relative to the root (the document's source_key)."""

    path: Path
    key: str
    mime: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A file in the watched root that is not processed: `recorded` ones become a failed row (the user dropped a
    file and must see why nothing came of it); the others (a link out of the folder) only get a warning."""

    path: Path
    key: str
    reason: str
    recorded: bool


def folder_key(root: Path, path: Path) -> str | None:
    """The source_key of `path` under `root` (absolute), or None when it is outside or hidden. Bytes of a name that
    are not UTF-8 are written as `\\xNN` (the same escaping everywhere, so a delete finds what was recorded)."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(root)
    except ValueError:
        return None
    if not rel.parts or any(part.startswith(".") for part in rel.parts):
        return None
    return _text(rel.as_posix())


def _text(name: str) -> str:
    return os.fsencode(name).decode("utf-8", "backslashreplace")


MAX_KEY_BYTES = 1024
"""Longer relative paths are refused (as a failed row under a shortened key): a key must fit Postgres's unique index
(about 2,700 bytes), and no real document path comes near this."""


def _bounded(key: str) -> str:
    """`key` itself, or for an over-long one its first part and a digest of the whole: unique, and short enough."""
    if len(key.encode()) <= MAX_KEY_BYTES:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()
    return key.encode()[: MAX_KEY_BYTES - 80].decode("utf-8", "ignore") + f"…sha256:{digest}"


def inspect(root: Path, path: Path) -> FileRef | Refused | None:
    """What `path` is to the watcher: a file to queue, a refused one, or None (hidden, temporary, a folder, gone).
    Never raises for an odd path (symlink loops, undecodable names, vanished files)."""
    root = Path(os.path.abspath(root))  # abspath, not resolve: a symlinked root or file keeps its name here
    key = folder_key(root, path)
    if key is None or key.endswith(TEMPORARY_SUFFIXES):
        return None
    full = root / Path(os.path.abspath(path)).relative_to(root)
    if (short := _bounded(key)) != key:
        return Refused(full, short, f"path too long: {len(key.encode())} bytes (limit {MAX_KEY_BYTES})", True)
    try:
        if not os.path.lexists(full) or (os.path.isdir(full) and not os.path.islink(full)):
            return None
        real = Path(os.path.realpath(full))  # never raises on a loop, unlike Path.resolve() in Python 3.11
        if not real.is_relative_to(os.path.realpath(root)):
            return Refused(full, key, "symlink points outside the watched folder", recorded=False)
        # Every file is queued: what it is comes from its bytes at conversion (a suffix we do not know may be text);
        # one that is no document we read fails there, with what it looks like, as a queryable failed row.
        mime = mime_for_path(full.name)
        if key != str(full.relative_to(root).as_posix()):
            return Refused(full, key, "file name is not valid UTF-8: rename it to be processed", True)
        os.stat(full)  # a symlink loop or a dangling link fails here
    except OSError as exc:
        return Refused(full, key, f"cannot read: {exc.strerror or exc}", True)
    if real.is_dir():
        return None
    return FileRef(path=full, key=key, mime=mime)


def walk_paths(root: Path, unlisted: list[Path] | None = None) -> Iterator[Path]:
    """Every non-hidden file path under `root`, sorted; folders that cannot be listed are skipped with a warning
    (and added to `unlisted`)."""

    def unlistable(exc: OSError) -> None:
        log.warning("cannot list %s: %s", _text(str(exc.filename)), exc.strerror)
        if unlisted is not None and exc.filename is not None:
            unlisted.append(Path(os.fsdecode(exc.filename)))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def file_signature(st: os.stat_result) -> FileSignature:
    """What a file looked like when it was hashed. Size and mtime alone miss bytes replaced by a tool that keeps the
    mtime (`rsync -a`, `cp -p`, `tar x`) at the same size; the ctime moves on every write and cannot be set back."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def queue_file(store: Store, ref: FileRef, max_bytes: int) -> int | None:
    """Queue a file when it is new or its bytes changed; the document id, or None when nothing was queued. A file
    that cannot be read (or is over `max_bytes`, checked before any byte is read) becomes a failed row."""
    try:
        signature = file_signature(os.stat(ref.path))
        digest = sha256_regular(ref.path, max_bytes)
    except FileNotFoundError:
        return None  # gone since its event; the delete event follows
    except (TooLarge, NotRegularFile) as exc:
        record_refusal(store, Refused(ref.path, ref.key, str(exc), True), ref.mime)
        return None
    except OSError as exc:
        record_refusal(store, Refused(ref.path, ref.key, f"cannot read: {exc.strerror or exc}", True), ref.mime)
        return None
    doc_id = store.enqueue_file(ref.key, ref.path, ref.mime, digest, signature)
    if doc_id is not None:
        log.info("queued %s (document %d)", ref.key, doc_id)
    return doc_id


def record_refusal(store: Store, refused: Refused, mime: str | None = None) -> None:
    if not refused.recorded:
        log.warning("refusing %s: %s", refused.key, refused.reason)
        return
    try:
        signature = file_signature(os.lstat(refused.path))
    except OSError:
        signature = None
    path = _text(str(refused.path))
    if (doc_id := store.record_file_failure(refused.key, path, mime, refused.reason, signature)) is not None:
        log.warning("not processing %s (document %d, failed): %s", refused.key, doc_id, refused.reason)


def handle(store: Store, root: Path, path: Path, max_bytes: int) -> int | None:
    """Queue or refuse one path; the document id when a file was queued."""
    found = inspect(root, path)
    if isinstance(found, FileRef):
        return queue_file(store, found, max_bytes)
    if isinstance(found, Refused):
        record_refusal(store, found)
    return None


def rescan(
    store: Store, root: Path, keep_deleted: bool, changed: Callable[[Path], None], unlisted: list[Path] | None = None
) -> list[str]:
    """Walk the folder and call `changed` for every file that may need queueing: not in the database, or with a
    signature (size, mtime, ctime) other than the one its row was read with, or no longer readable. Returns the keys
    of documents whose files are gone (to be deleted unless `keep_deleted`); the folders it could not list are added
    to `unlisted`."""
    known = store.folder_signatures(root)
    seen: set[str] = set()
    unlisted = [] if unlisted is None else unlisted
    for path in walk_paths(root, unlisted):
        key = folder_key(root, path)
        if key is None:
            continue
        seen.add(key)
        stored = known.get(key)
        if stored is None or not stored.read or stored.signature is None or not _unchanged(path, stored.signature):
            changed(path)
    if keep_deleted:
        return []
    # A folder that could not be listed (permissions, an I/O error) hides its files: they are not gone.
    hidden = tuple(str(p) + os.sep for p in unlisted)
    return [key for key, row in known.items()
            if key not in seen and not row.file_path.startswith(hidden) and _gone(row.file_path)]  # fmt: skip


def _gone(file_path: str) -> bool:
    """A path that does not exist, or is a folder now (a file replaced by a folder of its name while no watcher
    looked: its chunks stayed searchable for good), is gone; one we may not look at (EACCES, EIO) is kept."""
    try:
        return stat.S_ISDIR(os.lstat(file_path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False


def _unchanged(path: Path, signature: FileSignature) -> bool:
    """Same size, mtime and ctime as when hashed, and still a readable regular file (opened, not read)."""
    try:
        with open_regular(path, None) as (_f, st):
            return file_signature(st) == signature
    except OSError:
        return False


def scan(settings: Settings, dsn: str) -> int:
    """One pass instead of a watch (`connector run --once`): drop the documents of vanished files, queue every new
    or changed file. Returns how many files were queued."""
    root = settings.watch_dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    queued = 0
    with connect(dsn, autocommit=True) as conn:
        store = Store(conn)
        changed: list[Path] = []
        for key in rescan(store, root, settings.keep_deleted, changed.append):
            store.delete_folder_documents(key)
        for path in changed:
            queued += handle(store, root, path, settings.max_document_bytes) is not None
    return queued
