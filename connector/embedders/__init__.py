"""Embedding models by setting name. Heavy imports (torch) happen only when a real model is loaded."""

from __future__ import annotations

from connector.embedders.base import Embedder, Embeddings
from connector.errors import FatalError

_DIMENSIONS = {"minilm": 384, "fake": 384}

__all__ = ["Embedder", "Embeddings", "dimension_of", "load"]


def dimension_of(name: str) -> int:
    try:
        return _DIMENSIONS[name]
    except KeyError:
        raise FatalError(f"unknown embedder {name!r}; known: {', '.join(_DIMENSIONS)}") from None


def load(name: str, batch_size: int = 32) -> Embedder:
    if name == "fake":
        from connector.embedders.fake import FakeEmbedder

        return FakeEmbedder()
    if name == "minilm":
        from connector.embedders.minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=batch_size)
    dimension_of(name)  # raises the readable error
    raise AssertionError("unreachable")
