"""One document through every stage: convert → candidates (+ guards) → metrics → select → embed.

No database access here: the caller stores the `Outcome` in one transaction.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from connector import candidates, chunkers, metrics
from connector.convert import convert
from connector.embed import embed_winner
from connector.embedders import Embedder, spec_of
from connector.models import Document, Outcome, SourceDocument
from connector.select import choose
from connector.settings import Settings
from connector.timing import Timer


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
        timer = Timer()
        with timer("convert"):
            document = convert(source.data, source.mime_type, self.settings.chunking)
        pool = candidates.generate(document, self.chunkers, self.settings.chunking, timer)
        scored = metrics.score_all(document, pool, self.settings, self.metric_resources, timer)
        with timer("select"):
            winner = choose(scored)
        title = document_title(source, document)
        with timer("embed"):
            chunks = embed_winner(document, winner.candidate, self.chunk_embedder, self.settings.embed_template, title)
        self.totals.add(timer.ms)
        self.runs += 1
        cache = getattr(self.chunk_embedder, "last", None)
        return Outcome(document, scored, winner, chunks, dict(timer.ms), title, dict(cache) if cache else None,
                       spec_of(self.embedder))  # fmt: skip

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
