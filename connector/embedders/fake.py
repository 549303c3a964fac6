"""A deterministic, instant embedder for tests and throughput benchmarks.

It is a real bag-of-words model, not a random one: each lower-cased word is hashed to a signed coordinate, so texts
that share words are close in cosine distance and nearest-neighbour queries behave sensibly in tests.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from connector.embedders.base import Embeddings, normalise

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    name = "fake-bow-384"
    dim = 384

    def __init__(self, batch_size: int = 0):  # same signature as the real models; batching is moot here
        pass

    def embed(self, texts: list[str]) -> Embeddings:
        vectors = np.zeros((len(texts), self.dim), dtype=np.float64)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                vectors[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        return Embeddings(normalise(vectors), (1,) * len(texts))
