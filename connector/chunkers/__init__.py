"""Chunking strategies: each configured by an object of `connector.strategies`, whose `build()` returns one."""

from __future__ import annotations

from connector.chunkers.base import Chunker, Split
from connector.settings import ChunkingSettings

__all__ = ["Chunker", "Split", "build"]


def build(settings: ChunkingSettings) -> list[Chunker]:
    """The configured strategies, in the configured order (which is also the tie-break order)."""
    return [config.build(settings) for config in settings.strategies]
