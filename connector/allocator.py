"""glibc's allocator, told to keep freed memory for the next document instead of handing it back to the kernel.

By default glibc serves every allocation over 128 KB with a fresh `mmap` and unmaps it when freed (its threshold
rises only to the largest such block freed so far), and trims the heap top at twice that. The metrics
and strategies make many numpy temporaries of 100 KB to a few MB per document (a document's word vectors, 1024-wide
sentence vectors), so each one was a new mapping, and every page of it a page fault on first touch: measured on a
2,400-character document, fancy-indexing four 160 KB arrays took 295 µs, and 29 µs with the heap reused; choosing a
document (every strategy and metric) took 12-20% less CPU. What a process keeps is bounded by its peak use of
such temporaries plus TRIM_THRESHOLD; `connector bench --rows` reports the memory over the run.

Called once per process, at its entry (the command line, each CPU pool process). A process whose environment sets
glibc's own knobs (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, or `GLIBC_TUNABLES`) keeps them; on other C
libraries (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import gc
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for it on 64-bit systems: larger blocks are still mapped
TRIM_THRESHOLD = 16 << 20  # freed memory a heap keeps at its top: more than a short document's temporaries
_OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

_done = False


def tune() -> bool:
    """Raise glibc's mmap and trim thresholds in this process (once); whether they were set."""
    global _done
    if _done or any(name in os.environ for name in _OWN_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done


RELEASE_AFTER_BYTES = 1_000_000
"""Documents (bytes read, or characters of text once converted, all of a task's together) after which a process
hands its freed memory back (`release`)."""


def text_size(chosen) -> int:
    """The characters of a chosen document's text (0 for anything else): what its memory grows with. Its bytes read
    alone missed the long documents that come compressed (a 4 MB changelog gzipped is 34 KB; an EPUB, a DOCX): their
    process kept 90 MB of the 4 MB one's instead of 28."""
    document = getattr(chosen, "document", None)
    return len(getattr(document, "markdown", ""))


def release() -> None:
    """Hand the pages of freed memory back to the kernel (glibc's `malloc_trim`): after a long document. glibc gives
    back only the free memory at the top of its heap; what a long document's chunks and metrics freed below that
    stayed in the process. Measured on 50 MB of text: the pool process that chose its chunks kept 1,076 MB and the
    sidecar 566 MB once it was written, for as long as they lived (a second such document in the other pool process
    took as much again); on 16 MB in one process, 568 MB kept, 347 MB after this (260 MB loaded). Costs a walk of the
    heap: nothing next to a document of a megabyte."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


_frozen = False


def freeze_loaded() -> None:
    """Once per process, when what lives as long as it is loaded (models, settings, chunkers): collect what is
    garbage, then put every object left out of the cyclic collector's sight (`gc.freeze`), which otherwise walks them
    all again in each full collection. Measured on `connector bench --rows`: the sidecar's collections went from
    0.09 to 0.05 ms of CPU a document, a pool process's from 0.06 to 0.01. Objects created later are collected as
    before."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
