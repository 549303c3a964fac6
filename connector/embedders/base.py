"""The interface every embedding model implements, and the window-pooling every long-text embedder needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class Window:
    """One model window of a text: its character span in that text and its own unit vector."""

    start: int
    end: int
    vector: np.ndarray  # shape (dim,), float32
    tokens: int = 1  # its weight in the text's vector (the tokens it holds; 1 for a text that is one window)


@dataclass(frozen=True, slots=True)
class Embeddings:
    """Unit-length vectors, one row per input text (the token-weighted mean of its windows), and each text's
    windows with their own vectors: a text that fits the model is one window whose vector is the text's."""

    vectors: np.ndarray  # shape (n, dim), float32
    window_spans: tuple[tuple[Window, ...], ...]

    @property
    def windows(self) -> tuple[int, ...]:
        """How many model windows each text took."""
        return tuple(len(w) for w in self.window_spans)

    @classmethod
    def whole(cls, texts: list[str], vectors: np.ndarray) -> Embeddings:
        """Each text embedded as one window (models without an input limit)."""
        return cls(vectors, tuple((Window(0, len(t), v),) for t, v in zip(texts, vectors, strict=True)))


class Embedder(Protocol):
    name: str  # recorded in connector.embedding_models with the vectors it made
    dim: int

    def embed(self, texts: list[str]) -> Embeddings: ...


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A vector space: the provider that loads it, the model's name, its dimension, and the options needed to load it
    again (a base URL, asked-for dimensions; never a key). Stored per slot in connector.embedding_models."""

    provider: str
    name: str
    dim: int | None  # None: not known before the endpoint answers once
    options: tuple[tuple[str, object], ...] = ()

    @property
    def cache_key(self) -> str:
        """The embedding cache's model column: vectors of one name and dimension are interchangeable (the ONNX and
        torch runtimes of MiniLM agree to a cosine of 0.9999)."""
        return f"{self.name}@{self.dim}"

    def describe(self) -> str:
        where = dict(self.options).get("base_url")
        return f"{self.name} ({self.dim} dimensions, {self.provider}{f' at {where}' if where else ''})"


def normalise(vectors: np.ndarray) -> np.ndarray:
    # In float64: a float32 norm of large values (1e24) overflows to inf and turns the row into zeros.
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


def pool_windows(window_vectors: np.ndarray, weights: list[int], owners: list[int], n: int) -> np.ndarray:
    """Weighted mean of each text's window vectors (weight = tokens in the window), renormalised."""
    dim = window_vectors.shape[1]
    pooled = np.zeros((n, dim), dtype=np.float64)
    for row, owner, weight in zip(window_vectors, owners, weights, strict=True):
        pooled[owner] += weight * row
    return normalise(pooled)
