"""`connector bench-metrics FILE`: the cost of scoring every candidate of one document, per metric.

The document is converted and every configured candidate generated first (not timed here: `connector bench`
covers those stages); the metric encoder and coreference backend are loaded before the clock starts (the static
model's one-time distillation included in `load_s`, not in the scoring time). Then all candidates are scored the
way the pipeline does: sentences, coreference and one batch of vectors once per document, then per-candidate
arithmetic.
"""

from __future__ import annotations

import time
from pathlib import Path

from connector import candidates, chunkers
from connector.convert import convert, mime_for_path
from connector.embedders import load_configured
from connector.metrics import DocumentMetrics, Resources
from connector.settings import Settings
from connector.timing import Timer


def run(path: Path, settings: Settings, model: str) -> dict:
    document = convert(path.read_bytes(), mime_for_path(path), settings.chunking)
    pool = candidates.generate(document, chunkers.build(settings.chunking), settings.chunking)
    candidates.shutdown_pool()
    settings = settings.model_copy(update={"metrics": settings.metrics.model_copy(update={"model": model})})
    t0 = time.perf_counter()
    embedder = load_configured(settings) if model == "same" else None
    resources = Resources.load(settings, embedder)
    load_s = time.perf_counter() - t0
    timer = Timer()
    t0 = time.perf_counter()
    scorer = DocumentMetrics(document, settings, resources, timer)
    scorer.prepare(pool, pairs=True)
    scored = [scorer.score(c) for c in pool]
    score_s = time.perf_counter() - t0
    return {
        "file": path.name,
        "characters": len(document.markdown),
        "encoder": resources.encoder.name if resources.encoder else None,
        "coref": scorer.coref_backend,
        "coref_pairs": len(scorer.pairs or []),
        "candidates": len(pool),
        "chunks": sum(len(c.chunks) for c in pool),
        "distinct_texts": len(scorer.vectors) if scorer.vectors is not None else 0,
        "load_s": round(load_s, 2),
        "score_s": round(score_s, 3),
        "ms": {k: round(v, 1) for k, v in timer.ms.items()},
        "rows": [
            {"strategy": s.candidate.strategy, "chunks": len(s.candidate.chunks), **s.metrics, "score": s.score}
            for s in scored
        ],
    }
