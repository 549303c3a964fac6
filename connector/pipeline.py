"""One document through every stage: convert → candidates (+ guards) → metrics → select → embed.

`Chooser.choose` runs a document up to its winner, in the worker's thread or in a CPU pool process
(`connector.pool`); `Pipeline.embed` embeds the winners of several documents at once (a worker's batch: one request
instead of one per document). No database access here (but the embedding cache's): the caller stores the
`Outcome`s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import PurePosixPath

from connector import candidates, chunkers, logs, metrics
from connector.convert import convert
from connector.db import candidate_rows
from connector.embed import attach, winner_texts
from connector.embedders import Embedder, spec_of
from connector.embedders.base import Embeddings
from connector.embedders.cache import text_hash
from connector.models import Candidate, Chunk, ChunkSpan, Document, Outcome, Scored, SourceDocument
from connector.pool import GROUP, CpuPool
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
    candidate_rows: tuple[bytes, ...] = ()  # `db.candidate_rows.lines` of `scored`, once shipped

    def shipped(self) -> Chosen:
        """This document as the worker needs it: the winner whole; the candidates' rows as they are stored
        (`db.candidate_rows`), so every other candidate only as its strategy, values and chunks' spans (`ChunkSpan`),
        all that is held of it after. What a pool process sends the sidecar: a long document's losing chunks' texts
        were most of what the sidecar held of it (a 2,400-character row's pickle: 11.6 KB, then 6.0, now 8.4 with the
        rows: the sidecar's gain is the write, not the pickle)."""
        if self.candidate_rows:  # shipped already
            return self
        spans: dict[tuple, tuple[ChunkSpan, ...]] = {}  # candidates that cut alike share one tuple (pickled once)
        scored = []
        for s in self.scored:
            c = s.candidate
            if s is not self.winner:
                if c.chunks and isinstance(c.chunks[0], Chunk):
                    key = tuple((x.start, x.end) for x in c.chunks)
                    if key not in spans:
                        spans[key] = tuple(ChunkSpan(x.start, x.end, x.token_count) for x in c.chunks)
                    c = Candidate(c.strategy, spans[key], c.params, c.elapsed_ms, c.error, c.raw_token_counts)
                s = Scored(c, s.metrics, s.score, s.elapsed_ms, rc_backend=s.rc_backend)  # the rest is in its row
            scored.append(s)
        rows = candidate_rows.lines(self.scored, self.winner)
        return Chosen(self.document, tuple(scored), self.winner, self.title, self.timings, rows)


@dataclass(frozen=True)
class Chooser:
    """What takes a document up to its winner: the chunkers and the metric resources, loaded once per process."""

    settings: Settings
    chunkers: list[chunkers.Chunker]
    resources: metrics.Resources
    parallel: bool | None  # strategies of a long document in processes of their own (None: by its length)

    @classmethod
    def load(
        cls,
        settings: Settings,
        embedder: Embedder | None = None,
        resources: metrics.Resources | None = None,
        parallel: bool | None = None,
    ) -> Chooser:
        resources = resources or metrics.Resources.load(settings, embedder)
        return cls(settings, chunkers.build(settings.chunking), resources, parallel)

    def choose(self, source: SourceDocument) -> Chosen:
        """Every stage up to the winner: convert, candidates and guards, metrics, selection."""
        timer = Timer()
        with timer("convert"), logs.about(source.id, source.source_key):
            document = convert(source.data, source.mime_type, self.settings.chunking, self.settings.max_document_bytes)
        pool = candidates.generate(document, self.chunkers, self.settings.chunking, timer, self.parallel)
        scored = metrics.score_all(document, pool, self.settings, self.resources, timer)
        with timer("select"):
            winner = choose(scored)
        return Chosen(document, scored, winner, document_title(source, document), dict(timer.ms))


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        resources: metrics.Resources | None = None,
        chunk_embedder: Embedder | None = None,
        pool: CpuPool | None = None,
    ):
        self.settings = settings
        self.embedder = embedder
        # What embeds the winning chunks: the model itself, or the model behind the embedding cache
        # (`embedders.cache.PersistentCache`, one per pipeline: it holds a connection of its own).
        self.chunk_embedder = chunk_embedder or embedder
        # Shared by the pipelines of one process's workers, so each must be safe to call from several threads: the
        # coreference heuristic keeps no state between calls, the static model keeps one copy per thread, and the
        # storage embedder (MiniLM) and Maverick take one call at a time (each wraps a Rust tokenizer that is not
        # thread-safe).
        self.chooser = Chooser.load(settings, embedder, resources)
        self.metric_resources = self.chooser.resources
        # Where documents are chosen: pool processes (shared by the pipelines of one process), or None: the caller's
        # thread.
        self.pool = pool
        self.totals = Timer()  # every stage of every document this pipeline ran (read by `connector bench`)
        self.runs = 0  # documents it ran

    def group_of(self, batch: int) -> int:
        """How many short documents of a batch of `batch` a worker hands over at once (`start_many`): GROUP, fewer
        where a small batch would otherwise keep a pool process idle (a group runs in one process, one document
        after another); one here without a pool."""
        if self.pool is None:
            return 1
        return max(1, min(GROUP, batch // self.pool.processes))

    @property
    def in_flight(self) -> int:
        """How many documents a worker should keep submitted at once: two groups per pool process, so that each
        has the next at hand when it finishes one."""
        return 2 * self.pool.processes * GROUP if self.pool is not None else 1

    def run(self, source: SourceDocument) -> Outcome:
        return self.embed([self.choose(source)])[0]

    def choose(self, source: SourceDocument) -> Chosen:
        """Every stage up to the winner, here."""
        chosen = self.chooser.choose(source).shipped()
        self.totals.add(chosen.timings)
        return chosen

    def start(
        self, source: SourceDocument, alone: bool = False, while_waiting: Callable[[], None] = lambda: None
    ) -> Future:
        """`choose` in a pool process (the future is pending; `alone` and `while_waiting`: see `CpuPool.submit`), or
        here, at once (the future is done)."""
        if self.pool is None:
            future: Future = Future()
            try:
                future.set_result(self.chooser.choose(source).shipped())
            except Exception as exc:
                future.set_exception(exc)
            return future
        return self.pool.submit(source, alone, while_waiting)

    def start_many(self, sources: list[SourceDocument], while_waiting: Callable[[], None]) -> list[Future]:
        """`start` of several short documents, as one task of one pool process (`CpuPool.submit_many`); here, one
        after another, without a pool."""
        if self.pool is None:
            return [self.start(source) for source in sources]
        return self.pool.submit_many(sources, while_waiting)

    def chosen(self, future: Future) -> Chosen:
        """The result of a `start`ed document, its stages counted in `totals` (here: in the caller's thread, the
        one that also counts the batch's embed and write)."""
        chosen = future.result()
        self.totals.add(chosen.timings)
        return chosen

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
            outcomes.append(
                Outcome(c.document, c.scored, c.winner, chunks, timings, c.title, cache, spec, c.candidate_rows)
            )
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
