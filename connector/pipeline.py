"""One document through every stage: convert → candidates (+ guards) → metrics → select → embed.

No database access here: the caller stores the `Outcome` in one transaction.
"""

from __future__ import annotations

import time
from dataclasses import replace

from connector import candidates, chunkers, metrics
from connector.convert import convert
from connector.embed import embed_winner
from connector.embedders import Embedder
from connector.models import Outcome, SourceDocument
from connector.select import choose
from connector.settings import Settings


class Pipeline:
    def __init__(self, settings: Settings, embedder: Embedder):
        self.settings = settings
        self.embedder = embedder
        self.chunkers = chunkers.build(settings.chunking)

    def run(self, source: SourceDocument) -> Outcome:
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[stage] = (now - clock) * 1000
            clock = now

        document = convert(source.data, source.mime_type)
        lap("convert")
        pool = candidates.generate(document, self.chunkers, self.settings.chunking)
        lap("candidates")
        scored = tuple(metrics.score(document, c, self.settings.chunking, self.settings.weights) for c in pool)
        lap("metrics")
        winner = choose(scored)
        chunks = embed_winner(document, winner.candidate, self.embedder)
        lap("embed")
        outcome = Outcome(document=document, scored=scored, winner=winner, chunks=chunks)
        return replace(outcome, timings=timings)
