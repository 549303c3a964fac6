"""One document through every stage: convert → candidates (+ guards) → metrics → select → embed.

`choose` runs a document up to its winner; `embed` embeds the winners of several documents at once (a worker's
batch: one request instead of one per document). No database access here (but the embedding cache's): the caller
stores the `Outcome`s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import PurePosixPath

from connector import candidates, chunkers, metrics
from connector.convert import convert
from connector.embed import attach, winner_texts
from connector.embedders import Embedder, spec_of
from connector.embedders.base import Embeddings
from connector.embedders.cache import text_hash
from connector.models import Document, Outcome, Scored, SourceDocument
from connector.select import choose
from connector.settings import Settings
from connector.timing import Timer


@dataclass(frozen=True)
class Chosen:
    """A document through every stage but embedding: what the worker holds until its batch is embedded."""

    document: Document
    scored: tuple[Scored, ...]
    winner: Scored
    title: str | None
    timings: dict[str, float]


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        resources: metrics.Resources | None = None,
        chunk_embedder: Embedder | None = None,
    ):
        self.settings = settings
        self.embedder = embedder
        # What embeds the winning chunks: the model itself, or the model behind the embedding cache
        # (`embedders.cache.PersistentCache`, one per pipeline: it holds a connection of its own).
        self.chunk_embedder = chunk_embedder or embedder
        self.chunkers = chunkers.build(settings.chunking)
        # Shared by the pipelines of one process's workers, so each must be safe to call from several threads: the
        # coreference heuristic keeps no state between calls, the static model keeps one copy per thread, and the
        # storage embedder (MiniLM) and Maverick take one call at a time (each wraps a Rust tokenizer that is not
        # thread-safe).
        self.metric_resources = resources or metrics.Resources.load(settings, embedder)
        self.totals = Timer()  # every stage of every document this pipeline ran (read by `connector bench`)
        self.runs = 0  # documents it ran

    def run(self, source: SourceDocument) -> Outcome:
        return self.embed([self.choose(source)])[0]

    def choose(self, source: SourceDocument) -> Chosen:
        """Every stage up to the winner: convert, candidates and guards, metrics, selection."""
        timer = Timer()
        with timer("convert"):
            document = convert(source.data, source.mime_type, self.settings.chunking)
        pool = candidates.generate(document, self.chunkers, self.settings.chunking, timer)
        scored = metrics.score_all(document, pool, self.settings, self.metric_resources, timer)
        with timer("select"):
            winner = choose(scored)
        self.totals.add(timer.ms)
        return Chosen(document, scored, winner, document_title(source, document), dict(timer.ms))

    def embed(self, chosen: list[Chosen]) -> list[Outcome]:
        """Embed the winners' chunks of several documents in one call (one request, or as few as the endpoint's
        limits allow, and one look into the embedding cache), then split the vectors back per document."""
        template = self.settings.embed_template
        texts = [winner_texts(c.document, c.winner.candidate, template, c.title) for c in chosen]
        flat = [t for doc_texts, _ in texts for t in doc_texts]
        t0 = time.perf_counter()
        result = self.chunk_embedder.embed(flat)
        share = (time.perf_counter() - t0) * 1000 / max(len(flat), 1)
        hits = getattr(self.chunk_embedder, "hits", None)  # the cache: which texts it had
        spec = spec_of(self.embedder)
        outcomes, start = [], 0
        for c, (doc_texts, prefixes) in zip(chosen, texts, strict=True):
            end = start + len(doc_texts)
            own = Embeddings(result.vectors[start:end], result.window_spans[start:end])
            chunks = attach(c.document, c.winner.candidate, own, prefixes)
            timings = {**c.timings, "embed": share * len(doc_texts)}
            cache = None
            if hits is not None:
                cached = sum(text_hash(t) in hits for t in doc_texts)
                cache = {"embedded": len(doc_texts) - cached, "cached": cached}
            outcomes.append(Outcome(c.document, c.scored, c.winner, chunks, timings, c.title, cache, spec))
            self.totals.add({"embed": timings["embed"]})
            self.runs += 1
            start = end
        return outcomes

    def close(self) -> None:
        """Close the embedding cache's connection (the model itself is shared, and closed by its owner)."""
        store = getattr(self.chunk_embedder, "store", None)
        if store is not None:
            store.close()


def document_title(source: SourceDocument, document: Document) -> str | None:
    """A file's title is what it calls itself (metadata, `<title>`, first heading), its name only when it says
    nothing; a row's title is the one its application gave, the document's own when the row has none."""
    if source.source == "folder":
        return document.title or PurePosixPath(source.source_key).name
    return source.title or document.title
