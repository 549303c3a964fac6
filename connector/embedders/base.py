"""The interface every embedding model implements, and the window-pooling every long-text embedder needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class Embeddings:
    """Unit-length vectors, one row per input text, and how many model windows each text took."""

    vectors: np.ndarray  # shape (n, dim), float32
    windows: tuple[int, ...]


class Embedder(Protocol):
    name: str  # recorded in connector.embedding_model; a database serves one model
    dim: int

    def embed(self, texts: list[str]) -> Embeddings: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


def pool_windows(window_vectors: np.ndarray, weights: list[int], owners: list[int], n: int) -> np.ndarray:
    """Weighted mean of each text's window vectors (weight = tokens in the window), renormalised."""
    dim = window_vectors.shape[1]
    pooled = np.zeros((n, dim), dtype=np.float64)
    for row, owner, weight in zip(window_vectors, owners, weights, strict=True):
        pooled[owner] += weight * row
    return normalise(pooled)
