"""Candidate generation: every configured strategy over one document, each cleaned by the guards.

A strategy that raises becomes a candidate with `error` set, recorded but unable to win; the others still compete.
Long documents are chunked by all strategies at once in worker processes (the chunkers are CPU-bound Python: threads
would queue on the GIL); short ones serially, where starting the work elsewhere would cost more than it saves.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from connector import guards, tokens
from connector.chunkers import Chunker
from connector.errors import NotApplicable
from connector.models import Candidate, Document
from connector.pool import exit_with_parent, kill, usable_cores
from connector.settings import ChunkingSettings
from connector.timing import NULL_TIMER, Timer

log = logging.getLogger(__name__)

PARALLEL_MIN_CHARS = 200_000

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def generate(
    document: Document,
    chunkers: list[Chunker],
    settings: ChunkingSettings,
    timer: Timer = NULL_TIMER,
    parallel: bool | None = None,
) -> list[Candidate]:
    """One candidate per chunker, in the chunkers' order. `parallel=None` decides by document length."""
    if parallel is None:
        parallel = len(document.markdown) >= PARALLEL_MIN_CHARS and len(chunkers) > 1 and usable_cores() > 1
    if parallel:
        pool = _shared_pool()
        try:
            results = list(pool.map(_one, [document] * len(chunkers), chunkers, [settings] * len(chunkers)))
        except BrokenProcessPool:
            _forget(pool)  # a process of it died: the next long document gets a fresh pool, this one an error
            raise
    else:
        results = [_one(document, chunker, settings) for chunker in chunkers]
    for _, split_ms, guard_ms in results:
        timer.add({"candidates": split_ms, "guards": guard_ms})
    return [candidate for candidate, _, _ in results]


def _one(document: Document, chunker: Chunker, settings: ChunkingSettings) -> tuple[Candidate, float, float]:
    t0 = time.perf_counter()
    t1 = t0
    tokens.primed_for(document.markdown, settings.encoding)  # as `convert` left it, unless in a process of its own
    params = dict(chunker.params)
    try:
        split = chunker.split(document)
        raw = split.chunks
        params.update(split.notes)
        t1 = time.perf_counter()
        # `guards=False` exists for baselines measured as the field runs them (e.g. LangChain's defaults).
        chunks = tuple(guards.apply(document.markdown, raw, settings) if settings.guards else raw)
    except NotApplicable as exc:
        return Candidate(chunker.name, (), params, _ms(t0), error=f"skipped: {exc}"), _ms(t0), 0.0
    except Exception as exc:  # one broken strategy must not sink the document
        log.exception("strategy %s failed", chunker.name)
        failed = Candidate(chunker.name, (), params, _ms(t0), error=f"{type(exc).__name__}: {exc}")
        return failed, _ms(t0), 0.0
    raw_sizes = tuple(c.token_count for c in raw)
    return Candidate(chunker.name, chunks, params, _ms(t0), raw_token_counts=raw_sizes), (t1 - t0) * 1000, _ms(t1)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _shared_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # `spawn`: the sidecar process holds torch's thread pools, which do not survive a fork.
            _pool = ProcessPoolExecutor(
                max_workers=2, mp_context=mp.get_context("spawn"), initializer=_child_start,
                initargs=(os.getpid(),),
            )  # fmt: skip
            atexit.register(shutdown_pool)
        return _pool


def _child_start(parent: int) -> None:
    from connector import allocator
    from connector.pool import one_core

    allocator.tune()
    one_core()
    exit_with_parent(parent)


def _forget(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


def shutdown_pool() -> None:
    """Stop the worker processes once their current work is done (at exit, or when a test wants no processes left
    behind)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None


def terminate_pool() -> None:
    """Stop the worker processes now, abandoning what they are chunking (a shutdown past its grace period): the
    document that was waiting on them gets an error and has already been handed back to the queue."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is None:
        return
    kill(pool)
