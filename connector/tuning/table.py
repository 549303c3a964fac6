"""The data `connector tune` learns from: every candidate of every QA document, its metric values, and how well its
chunks answer that document's questions.

Each document is converted once; every configured strategy runs with the guards, every metric is computed (the
configured weights do not matter here), and every candidate's chunks are embedded with the storage embedder as the
writer would embed them (heading template, window pooling; a text shared by candidates is embedded once). A
question of document D is judged against one candidate of D at a time, together with the chunks of every other
document as the configured weights choose them today (the other documents compete for the top k as they do in
the database), on the chunk vectors alone: recall@k and MRR, as `connector eval` measures the chunking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from connector import candidates, chunkers, metrics, qa
from connector.convert import convert
from connector.embed import embed_winner
from connector.embedders import Embedder
from connector.errors import DocumentError
from connector.models import Document, Scored, SourceDocument
from connector.pipeline import document_title
from connector.select import choose
from connector.settings import ScoringSettings, Settings
from connector.tuning.weights import Row

ALL_METRICS = ScoringSettings(**dict.fromkeys(metrics.METRICS, 1.0))


@dataclass(frozen=True)
class Source:
    """One QA document's bytes."""

    name: str  # the file name the QA records use
    source: str  # folder, sql, table: decides the title the writer gives it (`pipeline.document_title`)
    title: str | None
    data: bytes
    mime_type: str


@dataclass(frozen=True)
class _Prepared:
    name: str
    strategies: list[str]
    values: list[dict[str, float | None]]
    texts: list[list[str]]  # per candidate, its chunks' texts
    vectors: list[np.ndarray | None]  # per candidate, its chunks' vectors (None: no chunks)
    chosen: int  # index of today's choice


def build(
    settings: Settings,
    embedder: Embedder,
    sources: Iterable[Source],
    records: list[qa.QARecord],
    k: int,
    progress: Callable[[str], None] = lambda _msg: None,
) -> tuple[list[Row], list[tuple[str, str]]]:
    """The table's rows, and the documents left out with the reason (one that fails to convert or chunk)."""
    # Every metric of every candidate: the weights are what is being learnt.
    scoring = settings.model_copy(
        update={
            "weights": ALL_METRICS,
            "metrics": settings.metrics.model_copy(update={"rc_when_decisive": False, "embed_when_decisive": False}),
        }
    )
    resources = metrics.Resources.load(scoring, embedder)
    pool = chunkers.build(settings.chunking)
    prepared: list[_Prepared] = []
    skipped: list[tuple[str, str]] = []
    for source in sources:
        progress(source.name)
        try:
            document = convert(source.data, source.mime_type, settings.chunking, settings.max_document_bytes)
            pool_of = candidates.generate(document, pool, settings.chunking)
            scored = metrics.score_all(document, pool_of, scoring, resources)
            today = choose([replace(s, score=metrics.weighted_score(s.metrics, settings.weights)) for s in scored])
        except DocumentError as exc:  # the document would fail in the sidecar too: it cannot teach anything
            skipped.append((source.name, str(exc)))
            continue
        title = document_title(SourceDocument(0, source.source, source.name, source.title, b"", "", ""), document)
        prepared.append(_prepare(source.name, document, scored, today.candidate.strategy, embedder, settings, title))
    questions = embedder.embed([r.question for r in records]).vectors if records else np.zeros((0, embedder.dim))
    return _judge(prepared, records, questions, k), skipped


def _prepare(
    name: str,
    document: Document,
    scored: tuple[Scored, ...],
    chosen: str,
    embedder: Embedder,
    settings: Settings,
    title: str | None,
) -> _Prepared:
    strategies, values, texts, vectors = [], [], [], []
    for s in scored:
        strategies.append(s.candidate.strategy)
        values.append(dict(s.metrics))
        texts.append([c.text for c in s.candidate.chunks])
        if s.candidate.chunks:
            embedded = embed_winner(document, s.candidate, embedder, settings.embed_template, title)
            vectors.append(np.stack([np.asarray(e.embedding, dtype=np.float32) for e in embedded]))
        else:
            vectors.append(None)
    return _Prepared(name, strategies, values, texts, vectors, strategies.index(chosen))


def _judge(prepared: list[_Prepared], records: list[qa.QARecord], questions: np.ndarray, k: int) -> list[Row]:
    rows: list[Row] = []
    for p in prepared:
        mine = [(i, r) for i, r in enumerate(records) if r.doc == p.name]
        if not mine:
            continue
        # Every other document as today's choice has it.
        rest = [o for o in prepared if o is not p and o.vectors[o.chosen] is not None]
        rest_vectors = [o.vectors[o.chosen] for o in rest]
        rest_docs = [o.name for o in rest for _ in o.texts[o.chosen]]
        rest_texts = [t for o in rest for t in o.texts[o.chosen]]
        for c, strategy in enumerate(p.strategies):
            if p.vectors[c] is None:
                continue
            matrix = np.vstack([p.vectors[c], *rest_vectors])
            docs = [p.name] * len(p.texts[c]) + rest_docs
            texts = p.texts[c] + rest_texts
            judged = []
            for i, record in mine:
                top = np.argsort(-(matrix @ questions[i]), kind="stable")[:k]
                judged.append(qa.judge(record, [(docs[j], texts[j]) for j in top]))
            n = len(judged)
            recall = sum(j.rank is not None for j in judged) / n
            mrr = sum(1 / j.rank for j in judged if j.rank) / n
            rows.append(Row(p.name, strategy, p.values[c], recall, mrr))
    return rows
