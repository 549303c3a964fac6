"""Reading files a user (or anyone who can insert a row) points us at: regular files only, never more than a limit.

Opening a FIFO blocks until a writer appears, a device can be endless, and a sparse file can claim terabytes: so a
path is opened without blocking, checked with `fstat` on the open descriptor (no race with a rename in between), and
read up to the limit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class NotRegularFile(OSError):
    """The path names a FIFO, a socket, a device or a folder: there is nothing to read as a document."""


class TooLarge(OSError):
    """The file is larger than the configured limit (checked before any byte is read)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"file too large: {size / 1e6:.1f} MB (limit {limit / 1e6:.0f} MB)")
        self.size = size
        self.limit = limit


@contextlib.contextmanager
def open_regular(path: Path, max_bytes: int | None) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """Open `path` for reading if it is a regular file no larger than `max_bytes` (None: no limit)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"not a regular file: {_kind(st.st_mode)}")
        if max_bytes is not None and st.st_size > max_bytes:
            raise TooLarge(st.st_size, max_bytes)
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f, st


def read_regular(path: Path, max_bytes: int | None) -> bytes:
    """The whole file, refusing anything but a regular file, and a file that grows past the limit while read."""
    with open_regular(path, max_bytes) as (f, _st):
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(len(data), max_bytes)
    return data


def sha256_regular(path: Path, max_bytes: int | None) -> str:
    """sha256 of a regular file, read in 1 MB blocks, refusing files over the limit before reading."""
    h = hashlib.sha256()
    n = 0
    with open_regular(path, max_bytes) as (f, _st):
        for block in iter(lambda: f.read(1 << 20), b""):
            n += len(block)
            if max_bytes is not None and n > max_bytes:
                raise TooLarge(n, max_bytes)
            h.update(block)
    return h.hexdigest()


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"
