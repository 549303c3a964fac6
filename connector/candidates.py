"""Candidate generation: every configured strategy over one document, each cleaned by the guards.

A strategy that raises becomes a candidate with `error` set, recorded but unable to win; the others still compete.
"""

from __future__ import annotations

import logging
import time

from connector import guards
from connector.chunkers import Chunker
from connector.errors import NotApplicable
from connector.models import Candidate, Document
from connector.settings import ChunkingSettings
from connector.timing import NULL_TIMER, Timer

log = logging.getLogger(__name__)


def generate(
    document: Document, chunkers: list[Chunker], settings: ChunkingSettings, timer: Timer = NULL_TIMER
) -> list[Candidate]:
    return [_one(document, chunker, settings, timer) for chunker in chunkers]


def _one(document: Document, chunker: Chunker, settings: ChunkingSettings, timer: Timer) -> Candidate:
    t0 = time.perf_counter()
    try:
        with timer("candidates"):
            raw = chunker.split(document)
        with timer("guards"):
            # `guards=False` exists for baselines measured as the field runs them (e.g. LangChain's defaults).
            chunks = tuple(guards.apply(document.markdown, raw, settings) if settings.guards else raw)
    except NotApplicable as exc:
        return Candidate(chunker.name, (), chunker.params, _ms(t0), error=f"skipped: {exc}")
    except Exception as exc:  # one broken strategy must not sink the document
        log.exception("strategy %s failed", chunker.name)
        return Candidate(chunker.name, (), chunker.params, _ms(t0), error=f"{type(exc).__name__}: {exc}")
    return Candidate(chunker.name, chunks, chunker.params, _ms(t0))


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
