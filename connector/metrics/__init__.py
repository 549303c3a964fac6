"""The five intrinsic metrics of a candidate (algorithm-spec §4), each in [0, 1] or None when undefined.

What every candidate of a document shares is computed once per document (`DocumentMetrics`): the sentence spans,
the coreference pairs, and one batch of vectors for every distinct text any candidate needs. Then each candidate's
metrics are cheap arithmetic over its boundaries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

from connector.chunkers.sentences import sentence_spans
from connector.coref import CorefBackend, Pair
from connector.coref import load as load_coref
from connector.embedders import Embedder
from connector.metrics.blocks import block_integrity
from connector.metrics.cohesion import Sentences, contextual_coherence, icc_texts, intrachunk_cohesion
from connector.metrics.references import references_completeness
from connector.metrics.size import size_compliance
from connector.metrics.vectors import MetricEncoder, StaticEncoder, StorageEncoder, VectorCache
from connector.models import Candidate, Document, Scored
from connector.settings import ScoringSettings, Settings
from connector.timing import NULL_TIMER, Timer

METRICS = ("rc", "icc", "dcc", "bi", "sc")


@dataclass(frozen=True)
class Resources:
    """What scoring loads once per process: the metric encoder (None when ICC/DCC are weighted 0) and the
    coreference backend (None when RC is)."""

    encoder: MetricEncoder | None
    coref: CorefBackend | None

    @classmethod
    def load(cls, settings: Settings, embedder: Embedder | None = None) -> Resources:
        m = settings.metrics
        encoder: MetricEncoder | None = None
        if settings.weights.icc > 0 or settings.weights.dcc > 0:
            if m.model == "same":
                if embedder is None:
                    raise ValueError("metrics model 'same' needs the storage embedder")
                encoder = StorageEncoder(embedder)
            else:
                encoder = StaticEncoder(settings.metric_models_dir)
        coref = load_coref(m.coref, m.maverick_path) if settings.weights.rc > 0 else None
        return cls(encoder, coref)


class DocumentMetrics:
    """Scores the candidates of one document, sharing sentences, pairs and vectors between them."""

    def __init__(self, document: Document, settings: Settings, resources: Resources, timer: Timer = NULL_TIMER):
        self.document = document
        self.settings = settings
        self.resources = resources
        self.timer = timer
        self.vectors = VectorCache(resources.encoder) if resources.encoder is not None else None

    @cached_property
    def sentences(self) -> Sentences:
        with self.timer("metric:sentences"):
            return Sentences(self.document.markdown, sentence_spans(self.document.markdown))

    @cached_property
    def pairs(self) -> list[Pair] | None:
        if self.resources.coref is None:
            return None
        with self.timer("metric:coref"):
            return self.resources.coref.pairs(self.document.markdown)

    @property
    def coref_backend(self) -> str | None:
        return self.resources.coref.name if self.resources.coref is not None else None

    def prepare(self, pool: list[Candidate]) -> None:
        """Find the coreference pairs, and embed in one batch every distinct text that ICC and DCC of these
        candidates will ask for."""
        _ = self.pairs
        if self.vectors is None:
            return
        texts: list[str] = []
        for candidate in pool:
            if candidate.error is None and candidate.chunks:
                texts += [c.text for c in candidate.chunks]
                texts += icc_texts(candidate.chunks, self.sentences)
        with self.timer("metric:embed"):
            self.vectors.prepare(texts)

    def score(self, candidate: Candidate) -> Scored:
        t0 = time.perf_counter()
        values: dict[str, float | None] = dict.fromkeys(METRICS)
        ms: dict[str, float] = {}
        if candidate.error is None and candidate.chunks:
            chunks = candidate.chunks
            chunking = self.settings.chunking
            steps = {
                "sc": lambda: size_compliance(chunks, chunking.min_tokens, chunking.max_tokens),
                "bi": lambda: block_integrity(self.document.units or self.document.blocks, chunks),
                "rc": lambda: references_completeness(self.pairs, chunks),
            }
            if self.vectors is not None:
                steps["icc"] = lambda: intrachunk_cohesion(chunks, self.sentences, self.vectors)
                steps["dcc"] = lambda: contextual_coherence(chunks, self.vectors, self.settings.metrics.window_tokens)
            for name, step in steps.items():
                if self.settings.weights.as_dict()[name] <= 0:
                    continue
                s0 = time.perf_counter()
                values[name] = step()
                ms[name] = (time.perf_counter() - s0) * 1000
                self.timer.add({f"metric:{name}": ms[name]})
        return Scored(
            candidate,
            values,
            weighted_score(values, self.settings.weights),
            (time.perf_counter() - t0) * 1000,
            metric_ms=ms,
            rc_backend=self.coref_backend if "rc" in ms else None,
        )


def score_all(
    document: Document, pool: list[Candidate], settings: Settings, resources: Resources, timer: Timer = NULL_TIMER
) -> tuple[Scored, ...]:
    scorer = DocumentMetrics(document, settings, resources, timer)
    scorer.prepare(pool)
    return tuple(scorer.score(c) for c in pool)


def weighted_score(values: dict[str, float | None], weights: ScoringSettings) -> float | None:
    """Weighted mean over the defined metrics, the weights renormalised over those (algorithm-spec §5)."""
    w = weights.as_dict()
    defined = [(w[k], v) for k, v in values.items() if v is not None and w.get(k, 0) > 0]
    total = sum(weight for weight, _ in defined)
    if total == 0:
        return None
    return sum(weight * v for weight, v in defined) / total
