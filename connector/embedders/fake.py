"""A deterministic, instant embedder for tests and throughput benchmarks.

It is a real bag-of-words model, not a random one (see `lexical.hashed_bow`): texts that share words are close in
cosine distance, so nearest-neighbour queries behave sensibly in tests. Its vectors must never change: tests and
stored test databases depend on them.
"""

from __future__ import annotations

from connector.embedders.base import Embeddings, ModelSpec
from connector.embedders.lexical import hashed_bow


class FakeEmbedder:
    provider = "fake"
    name = "fake-bow-384"
    dim = 384

    def embed(self, texts: list[str]) -> Embeddings:
        return Embeddings.whole(texts, hashed_bow(texts, self.dim))


def spec(embed) -> ModelSpec:
    return ModelSpec(FakeEmbedder.provider, FakeEmbedder.name, FakeEmbedder.dim)


def load(embed, models_dir) -> FakeEmbedder:
    return FakeEmbedder()
