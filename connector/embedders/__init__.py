"""Embedding models by provider: one module each (minilm, openai, and the fake and lexical stand-ins), one interface
(`Embedder`: `name`, `dim`, `embed(texts)`). Adding a provider is a module and a line in `_PROVIDERS`.

Heavy imports (torch, onnxruntime, openai) happen only when a model is loaded, so a model's identity (`spec`) can be
checked against the database before paying for the load.
"""

from __future__ import annotations

from pathlib import Path

from connector.embedders.base import Embedder, Embeddings, ModelSpec
from connector.errors import FatalError

__all__ = ["Embedder", "Embeddings", "ModelSpec", "close", "load", "load_configured", "spec", "spec_of_settings"]

PROVIDERS = ("minilm", "openai", "fake", "lexical")


def spec(provider: str, embed=None) -> ModelSpec:
    """What `load(provider, embed)` would load, without loading it (dim None: only the endpoint can tell)."""
    embed = embed if embed is not None else _default_embed()
    if provider == "minilm":
        from connector.embedders.minilm import MiniLMEmbedder, model_name

        return ModelSpec("minilm", model_name(embed.runtime), MiniLMEmbedder.dim)
    if provider == "openai":
        from connector.embedders import openai

        return openai.spec(embed)
    if provider == "fake":
        from connector.embedders.fake import FakeEmbedder

        return ModelSpec("fake", FakeEmbedder.name, FakeEmbedder.dim)
    if provider == "lexical":
        from connector.embedders.lexical import LexicalEncoder

        return ModelSpec("lexical", LexicalEncoder.name, LexicalEncoder.dim)
    raise FatalError(f"unknown embedder {provider!r}; known: {', '.join(PROVIDERS)}")


def spec_of_settings(settings) -> ModelSpec:
    return spec(settings.embedder, settings.embed)


def load_configured(settings) -> Embedder:
    """The model the settings name."""
    return load(settings.embedder, settings.embed, settings.metric_models_dir)


def load(provider: str, embed=None, models_dir: Path | None = None) -> Embedder:
    """The model, ready to embed; `embed` is the EmbedSettings (runtime, device, endpoint...), `models_dir` where
    a local model's exported files are kept (default: the settings' models folder)."""
    embed = embed if embed is not None else _default_embed()
    spec(provider, embed)  # an unknown name fails here, before any import
    if provider == "minilm":
        from connector.embedders.minilm import load_minilm

        if models_dir is None:
            from connector.settings import Settings

            models_dir = Settings().metric_models_dir
        return load_minilm(embed, models_dir)
    if provider == "openai":
        from connector.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder(embed)
    if provider == "fake":
        from connector.embedders.fake import FakeEmbedder

        return FakeEmbedder()
    from connector.embedders.lexical import LexicalEncoder

    return LexicalEncoder()


def spec_of(embedder: Embedder) -> ModelSpec:
    """The loaded model's identity (its dimension now known)."""
    found = getattr(embedder, "spec", None)
    if found is not None:
        return found
    return ModelSpec(getattr(embedder, "provider", "custom"), embedder.name, embedder.dim)


def close(embedder: Embedder) -> None:
    """Stop what the model runs in the background (a remote client's dispatcher); a no-op for local ones."""
    closer = getattr(embedder, "close", None)
    if closer is not None:
        closer()


def _default_embed():
    from connector.settings import EmbedSettings

    return EmbedSettings()
