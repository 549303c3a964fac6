"""The intrinsic metrics of a candidate, each in [0, 1] or None when undefined: the paper's five (algorithm-spec
§4) and our Retrievability (`retrievability`).

What every candidate of a document shares is computed once per document (`DocumentMetrics`): the sentence spans,
the coreference pairs, and one batch of vectors for every distinct text any candidate needs. Then each candidate's
metrics are cheap arithmetic over its boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from connector.chunkers.sentences import sentence_spans
from connector.coref import CorefBackend, Pair
from connector.coref import load as load_coref
from connector.embedders import Embedder
from connector.errors import DocumentError
from connector.metrics.blocks import block_integrity
from connector.metrics.breaks import breaks_of
from connector.metrics.cohesion import Sentences, contextual_coherence, icc_spans, intrachunk_cohesion
from connector.metrics.references import references_completeness
from connector.metrics.retrievability import Probe, retrievability, retrievability_texts, sample_probes
from connector.metrics.size import size_compliance
from connector.metrics.vectors import MetricEncoder, StaticEncoder, StorageEncoder, VectorCache
from connector.models import Candidate, Document, Scored
from connector.select import choose
from connector.settings import ScoringSettings, Settings
from connector.timing import NULL_TIMER, Timer

METRICS = ("rc", "icc", "dcc", "bi", "sc", "rt")
EMBEDDING = frozenset({"icc", "dcc", "rt"})  # the metrics that embed text with the metrics model


@dataclass(frozen=True)
class Resources:
    """What scoring loads once per process: the metric encoder (None when ICC, DCC and RT are weighted 0) and the
    coreference backend (None when RC is)."""

    encoder: MetricEncoder | None
    coref: CorefBackend | None

    @classmethod
    def load(cls, settings: Settings, embedder: Embedder | None = None) -> Resources:
        m = settings.metrics
        encoder: MetricEncoder | None = None
        if settings.weights.icc > 0 or settings.weights.dcc > 0 or settings.weights.rt > 0:
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
        self.vectors = VectorCache(resources.encoder, document.markdown) if resources.encoder is not None else None
        # Metric values by chunk spans: strategies often make the same chunks of a short document (the whole of it,
        # or the same paragraphs), and everything but SC is a function of the spans alone.
        self._by_spans: dict[tuple[tuple[int, int], ...], dict[str, float | None]] = {}
        # And what `connector explain` shows of them (shape, breaks): functions of the spans too (a chunk's token
        # count is its text's).
        self._views: dict[tuple[tuple[int, int], ...], tuple[dict, tuple[dict, ...]]] = {}
        # The weights, and the metrics `score` computes (those weighted above 0, in the order they are measured and
        # listed in `metric_ms`), read once per document: settings' `as_dict` is a new dict at each call, and it was
        # called for every metric of every candidate.
        self._weights = settings.weights.as_dict()
        measured = ("sc", "bi", "rc") if self.vectors is None else ("sc", "bi", "rc", "icc", "dcc", "rt")
        self._measured = tuple(name for name in measured if self._weights[name] > 0)

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

    @cached_property
    def probes(self) -> list[Probe]:
        return sample_probes(self.document.markdown, self.sentences.spans, self.settings.metrics.probes)

    @property
    def coref_backend(self) -> str | None:
        return self.resources.coref.name if self.resources.coref is not None else None

    def prepare(self, pool: list[Candidate], pairs: bool) -> None:
        """Find the coreference pairs (unless `pairs` is False: then only if RC turns out to matter), and embed in
        one batch every distinct text that ICC and DCC of these candidates will ask for."""
        if pairs:
            _ = self.pairs
        if self.vectors is None:
            return
        texts: list[str] = []
        every_span: list[tuple[int, int]] = []
        weights = self.settings.weights
        seen: set[tuple[tuple[int, int], ...]] = set()
        for candidate in pool:
            if candidate.error is None and candidate.chunks:
                spans = tuple((c.start, c.end) for c in candidate.chunks)
                # The same chunks as an earlier candidate ask for the same spans, all listed already (and the batch
                # keeps each span where it first appears).
                if spans not in seen:
                    seen.add(spans)
                    every_span += spans
                    if weights.icc > 0:
                        every_span += icc_spans(candidate.chunks, self.sentences)
                if weights.rt > 0:
                    texts += retrievability_texts(self.document.markdown, candidate.chunks, self.probes)
        with self.timer("metric:embed"):
            self.vectors.prepare_spans(every_span)
            self.vectors.prepare(texts)

    def _sizes(self, candidate: Candidate) -> list[int]:
        """SC's token counts: the strategy's own chunks (before the guards repaired them) by default, as the paper's
        Table 3 measures it; after the guards every candidate complies by construction and SC says nothing."""
        if self.settings.metrics.sc_before_guards and candidate.raw_token_counts:
            return list(candidate.raw_token_counts)
        return [c.token_count for c in candidate.chunks]

    def score(self, candidate: Candidate, rc: bool = True, embedding: bool = True) -> Scored:
        """Every weighted metric of `candidate`; without RC when `rc` is False (`with_rc` adds it later), without
        those that embed text (`EMBEDDING`) when `embedding` is False."""
        t0 = time.perf_counter()
        values: dict[str, float | None] = dict.fromkeys(METRICS)
        ms: dict[str, float] = {}
        if not candidate.chunks:  # a strategy skipped or failed: no value, no score, no view
            return Scored(candidate, values, None, (time.perf_counter() - t0) * 1000, metric_ms=ms)
        spans = tuple((c.start, c.end) for c in candidate.chunks)
        known = self._by_spans.setdefault(spans, {}) if candidate.error is None else {}
        for name in self._measured if candidate.error is None else ():
            if (name == "rc" and not rc) or (name in EMBEDDING and not embedding):
                continue
            if name in known:  # the same chunks as an earlier candidate: the same value, for nothing
                values[name], ms[name] = known[name], 0.0
                continue
            s0 = time.perf_counter()
            values[name] = self._measure(name, candidate)
            ms[name] = (time.perf_counter() - s0) * 1000
            self.timer.add({f"metric:{name}": ms[name]})
            if name != "sc":  # SC reads the strategy's own sizes, before the guards
                known[name] = values[name]
        shape, breaks = self._views_of(candidate, spans)
        return Scored(
            candidate,
            values,
            _weighted(values, self._weights),
            (time.perf_counter() - t0) * 1000,
            metric_ms=ms,
            rc_backend=self.coref_backend if "rc" in ms else None,
            shape=shape,
            breaks=breaks,
        )

    def _measure(self, name: str, candidate: Candidate) -> float | None:
        chunks = candidate.chunks
        if name == "sc":
            chunking = self.settings.chunking
            return size_compliance(self._sizes(candidate), chunking.min_tokens, chunking.max_tokens)
        if name == "bi":
            return block_integrity(self.document.units or self.document.blocks, chunks)
        if name == "rc":
            return references_completeness(self.pairs, chunks)
        m = self.settings.metrics
        if name == "icc":
            return intrachunk_cohesion(chunks, self.sentences, self.vectors.spans)
        if name == "dcc":
            return contextual_coherence(chunks, self.vectors.spans, m.window_tokens)
        return retrievability(self.document.markdown, chunks, self.probes, self.vectors, m.rt_budget_chars)

    def with_rc(self, scored: Scored) -> Scored:
        """`scored` (scored without RC) with RC, its score and its breaks' references added."""
        if scored.candidate.error is not None or not scored.candidate.chunks:
            return scored
        chunks = scored.candidate.chunks
        known = self._by_spans.setdefault(tuple((c.start, c.end) for c in chunks), {})
        ms = dict(scored.metric_ms)
        if "rc" in known:
            value, ms["rc"] = known["rc"], 0.0
        else:
            pairs = self.pairs  # found now, timed as coreference
            s0 = time.perf_counter()
            value = known["rc"] = references_completeness(pairs, chunks)
            ms["rc"] = (time.perf_counter() - s0) * 1000
            self.timer.add({"metric:rc": ms["rc"]})
        values = {**scored.metrics, "rc": value}
        breaks = tuple(breaks_of(self.document, chunks, self.pairs))
        return replace(scored, metrics=values, score=_weighted(values, self._weights), metric_ms=ms,
                       rc_backend=self.coref_backend, breaks=breaks)  # fmt: skip

    def _views_of(self, candidate: Candidate, spans: tuple[tuple[int, int], ...]) -> tuple[dict, tuple[dict, ...]]:
        if spans not in self._views:
            self._views[spans] = (
                shape_of(candidate, self.document, self.settings.chunking),
                # The references a cut breaks only once the pairs are known (`with_rc` adds them then).
                tuple(breaks_of(self.document, candidate.chunks, self.__dict__.get("pairs"))),
            )
        shape, breaks = self._views[spans]
        return dict(shape), breaks


def score_all(
    document: Document, pool: list[Candidate], settings: Settings, resources: Resources, timer: Timer = NULL_TIMER
) -> tuple[Scored, ...]:
    """Every candidate's metrics and score. With `metrics.rc_when_decisive`, the coreference pairs (the costliest
    part of a short document's scoring) are found only when RC can change which candidate wins; with
    `metrics.embed_when_decisive`, the metrics that embed text only when the candidates cut it differently
    (`same_cuts`)."""
    scorer = DocumentMetrics(document, settings, resources, timer)
    lazy = settings.metrics.rc_when_decisive and resources.coref is not None and settings.weights.rc > 0
    if settings.metrics.embed_when_decisive and same_cuts(pool):
        scored = tuple(scorer.score(c, rc=not lazy, embedding=False) for c in pool)
        if any(s.score is not None for s in scored):  # else only the embedding metrics are weighted: measure them
            return scored
    scorer.prepare(pool, pairs=not lazy)
    if not lazy:
        return tuple(scorer.score(c) for c in pool)
    scored = tuple(scorer.score(c, rc=False) for c in pool)
    if rc_cannot_change_choice(scored, settings.weights):
        return scored
    return tuple(scorer.with_rc(s) for s in scored)


def same_cuts(pool: Sequence[Candidate]) -> bool:
    """Whether every candidate that can win makes the same chunks: then only SC tells them apart (see below).

    RC, ICC, DCC, BI and RT are functions of the chunks' spans: equal for every such candidate. SC is not (it reads
    each strategy's own sizes, before the guards). A candidate's score is the weighted mean of its defined metrics,
    so here (C + w_sc * sc) / (W + w_sc) with C and W the same for all: it orders them by SC alone, whatever the
    values of the others and whether they are measured, and a tie goes to the one listed first either way. With
    `metrics.embed_when_decisive`, the metrics that embed text (the costliest part of a short document's scoring)
    are then not measured and stay NULL, as RC does when it cannot change the winner. This is most short documents:
    the whole of a 600-character row is one chunk for every strategy (452 rows of 500 on `connector bench --rows
    500 --chars 600`'s rows)."""
    cuts = {tuple((c.start, c.end) for c in candidate.chunks) for candidate in pool if candidate.error is None}
    cuts.discard(())
    return len(cuts) == 1


def rc_cannot_change_choice(scored: Sequence[Scored], weights: ScoringSettings) -> bool:
    """Whether the candidate that wins without RC wins whatever the coreference pairs turn out to be.

    Either the document has no pairs (or is not English): then RC is undefined for every candidate, and the
    scores without it are the real ones. Or it has some: then a candidate of one chunk breaks none (RC = 1 exactly)
    and any other has RC in [0, 1]; a weighted mean rises with each value, so the winner without RC must still win
    with its own RC at its lowest and every other candidate's at its highest, under `select.choose`'s rule (a tie
    goes to the candidate listed first). Scores without RC are then what is stored: RC stays NULL, as when it is
    weighted 0."""
    try:
        winner = choose(scored)
    except DocumentError:
        return False  # no candidate scores without RC: let RC decide (or fail as it would)

    def bound(s: Scored, rc: float) -> float:
        value = 1.0 if len(s.candidate.chunks) == 1 else rc
        return weighted_score({**s.metrics, "rc": value}, weights)

    low = bound(winner, 0.0)
    ahead = True  # candidates listed before the winner: a tie would go to them
    for s in scored:
        if s is winner:
            ahead = False
            continue
        if s.candidate.error is not None or not s.candidate.chunks:
            continue
        high = bound(s, 1.0)
        if high > low or (ahead and high == low):
            return False
    return True


def shape_of(candidate: Candidate, document: Document, chunking) -> dict:
    """What `connector explain` compares between candidates: token sizes, protected units cut, sizes out of range."""
    counts = sorted(c.token_count for c in candidate.chunks)
    units = document.units or document.blocks
    bi = block_integrity(units, candidate.chunks)
    n = len(counts)
    return {
        "tokens_mean": round(sum(counts) / n, 1),
        "tokens_min": counts[0],
        "tokens_p10": counts[n // 10],
        "tokens_p90": counts[min(n - 1, (9 * n) // 10)],
        "tokens_max": counts[-1],
        "units": len(units),
        "units_cut": 0 if bi is None else round((1 - bi) * len(units)),
        "out_of_range": sum(not chunking.min_tokens <= t <= chunking.max_tokens for t in counts),
    }


def weighted_score(values: dict[str, float | None], weights: ScoringSettings) -> float | None:
    """Weighted mean over the defined metrics, the weights renormalised over those (algorithm-spec §5)."""
    return _weighted(values, weights.as_dict())


def _weighted(values: dict[str, float | None], w: dict[str, float]) -> float | None:
    defined = [(w[k], v) for k, v in values.items() if v is not None and w.get(k, 0) > 0]
    total = sum(weight for weight, _ in defined)
    if total == 0:
        return None
    return sum(weight * v for weight, v in defined) / total
