"""One document through every stage: convert → candidates (+ guards) → metrics → select → embed.

No database access here: the caller stores the `Outcome` in one transaction.
"""

from __future__ import annotations

from connector import candidates, chunkers, metrics
from connector.convert import convert
from connector.embed import embed_winner
from connector.embedders import Embedder
from connector.models import Outcome, SourceDocument
from connector.select import choose
from connector.settings import Settings
from connector.timing import Timer


class Pipeline:
    def __init__(self, settings: Settings, embedder: Embedder, resources: metrics.Resources | None = None):
        self.settings = settings
        self.embedder = embedder
        self.chunkers = chunkers.build(settings.chunking)
        # Shared by the pipelines of one process's workers, so each must be safe to call from several threads: the
        # coreference heuristic keeps no state between calls, the static model keeps one copy per thread, and the
        # storage embedder (MiniLM) and Maverick take one call at a time (each wraps a Rust tokenizer that is not
        # thread-safe).
        self.metric_resources = resources or metrics.Resources.load(settings, embedder)
        self.totals = Timer()  # every stage of every document this pipeline ran (read by `connector bench`)

    def run(self, source: SourceDocument) -> Outcome:
        timer = Timer()
        with timer("convert"):
            document = convert(source.data, source.mime_type, self.settings.chunking)
        pool = candidates.generate(document, self.chunkers, self.settings.chunking, timer)
        scored = metrics.score_all(document, pool, self.settings, self.metric_resources, timer)
        with timer("select"):
            winner = choose(scored)
        with timer("embed"):
            chunks = embed_winner(document, winner.candidate, self.embedder, self.settings.embed_template, source.title)
        self.totals.add(timer.ms)
        return Outcome(document=document, scored=scored, winner=winner, chunks=chunks, timings=dict(timer.ms))
