"""`connector bench-embed DIR`: the storage embedder's throughput per MiniLM runtime, side by side in one process.

The texts are real chunks: every document of DIR converted and cut by `recursive_1100` (the default pool's
workhorse), embedded as the writer embeds them (long ones in windows). The runtimes run in turn, the order rotated
each round, so that a machine's changing load falls on all of them alike; each round reports chunks per second and
the ratio to the first runtime in the same round, and the vectors' agreement with the first runtime (cosine).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from connector import chunkers
from connector.convert import convert
from connector.embedders import close, load
from connector.ingest import select
from connector.settings import Settings


def chunk_texts(paths: list[Path], settings: Settings, limit: int) -> list[str]:
    chunker = chunkers.build(settings.chunking.forced("recursive_1100"))[0]
    texts: list[str] = []
    for ref in select(paths).refs:
        try:
            document = convert(ref.path.read_bytes(), ref.mime, settings.chunking)
        except Exception:  # noqa: BLE001 - a document that does not convert is not a benchmark's business
            continue
        texts.extend(c.text for c in chunker.split(document).chunks)
    return texts[:limit] if limit else texts


def run(paths: list[Path], settings: Settings, runtimes: list[str], rounds: int, limit: int) -> dict:
    texts = chunk_texts(paths, settings, limit)
    models = {r: load("minilm", settings.embed.model_copy(update={"runtime": r}), settings.metric_models_dir)
              for r in runtimes}  # fmt: skip
    try:
        for m in models.values():
            m.embed(texts[:4])  # warm up: first-call allocations are not throughput
        per_round, vectors = [], {}
        for i in range(rounds):
            order = runtimes[i % len(runtimes) :] + runtimes[: i % len(runtimes)]
            seconds = {}
            for r in order:
                t0 = time.perf_counter()
                vectors[r] = models[r].embed(texts).vectors
                seconds[r] = time.perf_counter() - t0
            base = runtimes[0]
            per_round.append({r: {"chunks_per_s": round(len(texts) / seconds[r], 2),
                                  "ratio": round(seconds[base] / seconds[r], 3)} for r in runtimes})  # fmt: skip
    finally:
        for m in models.values():
            close(m)
    first = vectors[runtimes[0]]
    agreement = {}
    for r, v in vectors.items():
        cosines = np.sum(v * first, axis=1)
        agreement[r] = {"mean_cosine": round(float(np.mean(cosines)), 6), "min_cosine": round(float(cosines.min()), 6)}
    return {"texts": len(texts), "characters": sum(map(len, texts)), "rounds": per_round, "agreement": agreement}
