"""Embedding models by setting name. Heavy imports (torch) happen only when a real model is instantiated, so the
model's identity (name, dimension) can be checked against the database before paying for the load."""

from __future__ import annotations

from connector.embedders.base import Embedder, Embeddings
from connector.embedders.fake import FakeEmbedder
from connector.embedders.lexical import LexicalEncoder
from connector.embedders.minilm import MiniLMEmbedder
from connector.errors import FatalError

_BY_SETTING: dict[str, type] = {"minilm": MiniLMEmbedder, "fake": FakeEmbedder, "lexical": LexicalEncoder}

__all__ = ["Embedder", "Embeddings", "dimension_of", "embedder_class", "load"]


def embedder_class(name: str) -> type:
    """The class for a setting value; its `name` and `dim` are class attributes, readable without loading."""
    try:
        return _BY_SETTING[name]
    except KeyError:
        raise FatalError(f"unknown embedder {name!r}; known: {', '.join(_BY_SETTING)}") from None


def dimension_of(name: str) -> int:
    return embedder_class(name).dim


def load(name: str, batch_size: int = 32) -> Embedder:
    return embedder_class(name)(batch_size=batch_size)
