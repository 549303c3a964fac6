"""Intrinsic metrics of a candidate (algorithm-spec §4). Each is a pure function returning a value in [0, 1] or
None when undefined for this document. The skeleton computes SC and BI; RC, ICC and DCC are NULL until they exist.
"""

from __future__ import annotations

import time

from connector.metrics.blocks import block_integrity
from connector.metrics.size import size_compliance
from connector.models import Candidate, Document, Scored
from connector.settings import ChunkingSettings, ScoringSettings, Settings
from connector.timing import NULL_TIMER, Timer

METRICS = ("rc", "icc", "dcc", "bi", "sc")


def evaluate(
    document: Document, candidate: Candidate, chunking: ChunkingSettings, timer: Timer = NULL_TIMER
) -> dict[str, float | None]:
    values: dict[str, float | None] = dict.fromkeys(METRICS)
    with timer("metric:sc"):
        values["sc"] = size_compliance(candidate.chunks, chunking.min_tokens, chunking.max_tokens)
    with timer("metric:bi"):
        values["bi"] = block_integrity(document.units or document.blocks, candidate.chunks)
    return values


def weighted_score(values: dict[str, float | None], weights: ScoringSettings) -> float | None:
    """Weighted mean over the defined metrics, the weights renormalised over those (algorithm-spec §5)."""
    w = weights.as_dict()
    defined = [(w[k], v) for k, v in values.items() if v is not None and w.get(k, 0) > 0]
    total = sum(weight for weight, _ in defined)
    if total == 0:
        return None
    return sum(weight * v for weight, v in defined) / total


def score(document: Document, candidate: Candidate, settings: Settings, timer: Timer = NULL_TIMER) -> Scored:
    t0 = time.perf_counter()
    if candidate.error is not None or not candidate.chunks:
        values: dict[str, float | None] = dict.fromkeys(METRICS)
    else:
        values = evaluate(document, candidate, settings.chunking, timer)
    return Scored(candidate, values, weighted_score(values, settings.weights), (time.perf_counter() - t0) * 1000)
