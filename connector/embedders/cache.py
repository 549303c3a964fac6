"""An in-process cache in front of any embedder, keyed by exact text.

`connector eval` embeds the same chunks several times (the adaptive winner is one of the forced candidates; many
strategies agree on small documents), and every question once per run; the cache makes each distinct text cost once.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Protocol

import numpy as np
import psycopg

from connector.embedders.base import Embedder, Embeddings, Window, pool_windows
from connector.errors import TransientError

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 60.0  # an unreachable cache is tried (and said) again after this long, not per batch


class CachingEmbedder:
    def __init__(self, inner: Embedder):
        from connector.embedders import spec_of

        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.spec = spec_of(inner)
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


def text_hash(text: str) -> bytes:
    """The cache key of a text (with the model's name and dimension): sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class CacheStore(Protocol):
    """Where `PersistentCache` keeps vectors: `connector.db.embeddings.CacheTable` (connector.embedding_cache)."""

    def get(
        self, model: str, hashes: list[bytes], dim: int
    ) -> dict[bytes, tuple[list[tuple[int, int]], list[int], np.ndarray]]: ...  # noqa: E501

    def put(self, model: str, dim: int, entries: list) -> None: ...


class PersistentCache:
    """Any embedder behind a table of every text it embedded, by (model, sha256 of the text): an edited document's
    unchanged chunks, re-ingested text, and a reembed resumed are never sent to the model again. Each text's windows
    are kept (spans, token weights, vectors), so a hit is exactly what the model answered, and the text's vector is
    pooled from them as the model pools it. `last` says how the last call went: {"embedded": n, "cached": n}."""

    def __init__(self, inner: Embedder, store: CacheStore, key: str):
        from connector.embedders import spec_of

        self.inner = inner
        self.store = store
        self.key = key
        self.name = inner.name
        self.dim = inner.dim
        self.spec = spec_of(inner)
        self.last: dict[str, int] = {"embedded": 0, "cached": 0}
        self.hits: set[bytes] = set()
        self._unreachable_until = 0.0

    def embed(self, texts: list[str]) -> Embeddings:
        from connector.counters import EMBED_CACHE

        if not texts:
            return self.inner.embed(texts)
        hashes = [text_hash(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        found = self._unless_unreachable(lambda: self.store.get(self.key, unique, self.dim)) or {}
        self.hits = set(found)  # which texts of this call the cache had (hashes)
        missing = [h for h in unique if h not in found]
        if missing:
            by_hash = dict(zip(hashes, texts, strict=True))
            fresh = self.inner.embed([by_hash[h] for h in missing])
            entries = []
            for h, windows in zip(missing, fresh.window_spans, strict=True):
                spans = [(w.start, w.end) for w in windows]
                weights = [w.tokens for w in windows]
                vectors = np.stack([w.vector for w in windows])
                found[h] = (spans, weights, vectors)
                entries.append((h, spans, weights, vectors))
            self._unless_unreachable(lambda: self.store.put(self.key, self.dim, entries))
        EMBED_CACHE.labels("hit").inc(len(unique) - len(missing))
        EMBED_CACHE.labels("miss").inc(len(missing))
        self.last = {"embedded": len(missing), "cached": len(unique) - len(missing)}
        rows, weights, owners, per_text = [], [], [], []
        for i, h in enumerate(hashes):
            spans, ws, vectors = found[h]
            per_text.append(tuple(Window(s, e, v, n) for (s, e), v, n in zip(spans, vectors, ws, strict=True)))
            rows.extend(vectors)
            weights.extend(ws)
            owners.extend([i] * len(spans))
        return Embeddings(pool_windows(np.stack(rows), weights, owners, len(texts)), tuple(per_text))

    def _unless_unreachable(self, call):
        """`call()`, or None when the cache's own database connection cannot be had (the role's or server's
        connection limit reached, a lost connection): the cache only saves the model's work, so the texts are
        embedded without it. Counting that as a try of every document in the batch failed them all for good
        within a minute of a full connection limit, the worker's own connection being fine. A grant missing on the
        cache's table is no outage: it is raised, so the worker waits for the grant and /health names it, as for
        every other table (skipped, it was a log line a minute that nobody read)."""
        if time.monotonic() < self._unreachable_until:  # each try may wait for a connect timeout: not per batch
            return None
        try:
            return call()
        except TransientError as exc:
            if isinstance(exc, psycopg.errors.InsufficientPrivilege):  # db.database.MissingPrivilege
                raise
            self._unreachable_until = time.monotonic() + RETRY_AFTER_SECONDS
            log.warning("embedding cache unavailable, embedding without it for %.0f s: %s", RETRY_AFTER_SECONDS, exc)
            return None

    def close(self) -> None:
        closer = getattr(self.inner, "close", None)
        if closer is not None:
            closer()
