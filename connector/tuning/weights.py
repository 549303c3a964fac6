"""Metric weights learned from a user's own questions, cross-validated over documents.

The data is a table: for each QA document, each candidate's metric values and how well its chunks answered that
document's questions (recall@k, MRR). A weight vector chooses one candidate per document (the highest weighted
score, as selection does); its quality is the mean recall (then MRR) of the chosen candidates. Weights are searched
on a grid over the simplex (steps of `1 / GRID`), fitted on the training documents of each fold and judged on the
held-out ones against the weights in use (the configured ones) on the same documents; the folds are dealt `repeats`
times from different shuffles. Every document is thus held out `repeats` times, and its gain is the mean of those.
The gain is claimed only when the mean over documents stays positive two standard errors down (about 97.5 %
one-sided) and MRR does not drop: a grid of a few hundred weight vectors fitted to a few dozen documents finds a
"gain" in pure noise often enough that a weaker rule (one standard error over five folds) claimed one on random
data in our tests.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

GRID = 5  # weights in steps of 0.2: 126 vectors over 5 metrics, 252 over 6 — coarse on purpose, the data is small


@dataclass(frozen=True, slots=True)
class Row:
    """One candidate of one document: its metric values and how its chunks did on the document's questions."""

    doc: str
    strategy: str
    metrics: dict[str, float | None]
    recall: float
    mrr: float


@dataclass(frozen=True, slots=True)
class Fold:
    repeat: int
    test_docs: tuple[str, ...]
    weights: dict[str, float]
    tuned: tuple[float, float]  # held-out (recall, MRR) with the weights fitted on the other folds
    current: tuple[float, float]  # held-out (recall, MRR) with the weights in use


@dataclass(frozen=True, slots=True)
class TuneResult:
    metrics: tuple[str, ...]
    documents: int
    weights: dict[str, float]  # fitted on every document
    folds: tuple[Fold, ...]
    doc_gains: dict[str, tuple[float, float]]  # held-out (recall, MRR) gain of each document, mean over repeats
    # Spearman correlation of the selection score with per-document recall: weights name → (pooled over every
    # candidate of every document, mean within documents)
    correlations: dict[str, tuple[float | None, float | None]]

    @property
    def gain(self) -> float:
        return statistics.fmean(g for g, _ in self.doc_gains.values())

    @property
    def mrr_gain(self) -> float:
        return statistics.fmean(g for _, g in self.doc_gains.values())

    @property
    def spread(self) -> float:
        """Standard error of the mean recall gain over the documents."""
        g = [g for g, _ in self.doc_gains.values()]
        return statistics.stdev(g) / math.sqrt(len(g)) if len(g) > 1 else float("inf")

    @property
    def shown(self) -> bool:
        """Whether the held-out gain in recall is there beyond twice its standard error, MRR not dropping."""
        return self.gain - 2 * self.spread > 0 and self.mrr_gain >= 0


def score(metrics: dict[str, float | None], weights: dict[str, float]) -> float | None:
    """Weighted mean over the defined metrics, renormalised over those (as `connector.metrics.weighted_score`)."""
    defined = [(weights.get(k, 0.0), v) for k, v in metrics.items() if v is not None and weights.get(k, 0.0) > 0]
    total = sum(w for w, _ in defined)
    return sum(w * v for w, v in defined) / total if total else None


def choose(rows: Sequence[Row], weights: dict[str, float]) -> Row | None:
    """The row selection would pick: highest score, ties to the first (the configured order); None when no
    candidate has a score under these weights — the sidecar would fail that document (`select.choose`)."""
    best, best_score = None, -math.inf
    for row in rows:
        s = score(row.metrics, weights)
        if s is not None and s > best_score:
            best, best_score = row, s
    return best


def quality(by_doc: dict[str, list[Row]], docs: Sequence[str], weights: dict[str, float]) -> tuple[float, float]:
    """Mean recall and MRR of the chosen candidates; a document these weights cannot score retrieves nothing."""
    chosen = [choose(by_doc[d], weights) for d in docs]
    return (statistics.fmean(r.recall if r else 0.0 for r in chosen),
            statistics.fmean(r.mrr if r else 0.0 for r in chosen))  # fmt: skip


def grid(metrics: Sequence[str], steps: int = GRID) -> list[dict[str, float]]:
    """Every weight vector on the simplex with coordinates in multiples of 1/steps (at least one weight > 0)."""
    out = []
    for parts in itertools.product(range(steps + 1), repeat=len(metrics)):
        if sum(parts) == steps:
            out.append({m: p / steps for m, p in zip(metrics, parts, strict=True)})
    return out


def fit(by_doc: dict[str, list[Row]], docs: Sequence[str], candidates: list[dict[str, float]]) -> dict[str, float]:
    """The grid point with the best training recall, then MRR; among equals the one nearest to equal weights
    (the least committal explanation of the data)."""
    metrics = list(candidates[0])
    equal = 1 / len(metrics)

    def key(w: dict[str, float]):
        recall, mrr = quality(by_doc, docs, w)
        return (round(recall, 9), round(mrr, 9), -sum((w[m] - equal) ** 2 for m in metrics))

    return max(candidates, key=key)


def tune(
    rows: Sequence[Row], metrics: Sequence[str], current: dict[str, float], folds: int = 5, repeats: int = 3,
    seed: int = 0,
) -> TuneResult:  # fmt: skip
    """Cross-validated weights: `repeats` times, the documents shuffled (from `seed`) and dealt into `folds`; judged
    against `current`, the weights in use (those of `metrics`; equal weights where they give these metrics none).
    It used to be equal weights over every metric computed, RT included, which the defaults are not (RT 0): a fold
    whose fitted weights were the defaults showed a "gain" over them, and such a gain wrote weights."""
    by_doc: dict[str, list[Row]] = {}
    for row in rows:
        by_doc.setdefault(row.doc, []).append(row)
    docs = sorted(by_doc)
    if len(docs) < 2:
        raise ValueError("tuning needs questions on at least two documents")
    if folds < 2 or repeats < 1:
        raise ValueError("tuning needs at least two folds and one shuffle")
    rng = random.Random(seed)
    k = min(folds, len(docs))
    candidates = grid(metrics)
    equal = dict.fromkeys(metrics, 1 / len(metrics))
    total = sum(current.get(m, 0.0) for m in metrics)
    baseline = {m: current.get(m, 0.0) / total for m in metrics} if total > 0 else equal
    results = []
    gains: dict[str, list[tuple[float, float]]] = {d: [] for d in docs}
    for repeat in range(repeats):
        order = docs[:]
        rng.shuffle(order)
        for test in (tuple(sorted(order[i::k])) for i in range(k)):
            w = fit(by_doc, [d for d in docs if d not in test], candidates)
            results.append(Fold(repeat, test, w, quality(by_doc, test, w), quality(by_doc, test, baseline)))
            for d in test:
                tuned, flat = quality(by_doc, [d], w), quality(by_doc, [d], baseline)
                gains[d].append((tuned[0] - flat[0], tuned[1] - flat[1]))
    doc_gains = {d: (statistics.fmean(g for g, _ in gs), statistics.fmean(m for _, m in gs)) for d, gs in gains.items()}
    fitted = fit(by_doc, docs, candidates)
    named = {"current": baseline, "equal": equal, "fitted": fitted}
    if "rt" in metrics and len(metrics) > 1:
        named["paper (equal, no rt)"] = {m: 0.0 if m == "rt" else 1 / (len(metrics) - 1) for m in metrics}
    correlations = {name: (correlation(rows, w), within_correlation(by_doc, w)) for name, w in named.items()}
    return TuneResult(tuple(metrics), len(docs), fitted, tuple(results), doc_gains, correlations)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties get their mean rank); None when either side is constant."""
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else None


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def correlation(rows: Sequence[Row], weights: dict[str, float]) -> float | None:
    pairs = [(s, r.recall) for r in rows if (s := score(r.metrics, weights)) is not None]
    return spearman([p[0] for p in pairs], [p[1] for p in pairs])


def within_correlation(by_doc: dict[str, list[Row]], weights: dict[str, float]) -> float | None:
    """Mean over documents of the correlation between the candidates' scores and their recall, over the documents
    where it is defined (candidates differ in recall and in score): what selection within a document needs."""
    values = [c for rows in by_doc.values() if (c := correlation(rows, weights)) is not None]
    return statistics.fmean(values) if values else None
