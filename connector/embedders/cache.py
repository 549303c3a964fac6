"""An in-process cache in front of any embedder, keyed by exact text.

`connector eval` embeds the same chunks several times (the adaptive winner is one of the forced candidates; many
strategies agree on small documents), and every question once per run; the cache makes each distinct text cost once.
"""

from __future__ import annotations

import numpy as np

from connector.embedders.base import Embedder, Embeddings, Window


class CachingEmbedder:
    def __init__(self, inner: Embedder):
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self._cache: dict[str, tuple[np.ndarray, tuple[Window, ...]]] = {}

    def embed(self, texts: list[str]) -> Embeddings:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            fresh = self.inner.embed(missing)
            for text, vector, windows in zip(missing, fresh.vectors, fresh.window_spans, strict=True):
                self._cache[text] = (vector, windows)
        rows = [self._cache[t] for t in texts]
        vectors = np.stack([v for v, _ in rows]) if rows else np.zeros((0, self.dim), dtype=np.float32)
        return Embeddings(vectors, tuple(w for _, w in rows))
