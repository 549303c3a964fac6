"""Embedding models by provider: one module each (minilm, openai, and the fake and lexical stand-ins), one interface
(`Embedder`: `name`, `dim`, `embed(texts)`). Adding a provider is a module and a line in `_PROVIDERS`.

Heavy imports (torch, onnxruntime, openai) happen only when a model is loaded, so a model's identity (`spec`) can be
checked against the database before paying for the load.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from connector.embedders.base import Embedder, Embeddings, ModelSpec
from connector.errors import FatalError

__all__ = ["Embedder", "Embeddings", "ModelSpec", "close", "load", "load_configured", "spec", "spec_of_settings"]

# Each provider is a module with `spec(embed) -> ModelSpec` (what it would load, without loading) and
# `load(embed, models_dir) -> Embedder`; a new one (Cohere, Voyage, a LiteLLM route) is a module and a line here.
PROVIDERS = {
    "minilm": "connector.embedders.minilm",
    "openai": "connector.embedders.openai",
    "fake": "connector.embedders.fake",
    "lexical": "connector.embedders.lexical",
}


def _module(provider: str):
    try:
        return importlib.import_module(PROVIDERS[provider])
    except KeyError:
        raise FatalError(f"unknown embedder {provider!r}; known: {', '.join(PROVIDERS)}") from None


def spec(provider: str, embed=None) -> ModelSpec:
    """What `load(provider, embed)` would load, without loading it (dim None: only the endpoint can tell)."""
    return _module(provider).spec(embed if embed is not None else _default_embed())


def spec_of_settings(settings) -> ModelSpec:
    return spec(settings.embedder, settings.embed)


def load_configured(settings) -> Embedder:
    """The model the settings name."""
    return load(settings.embedder, settings.embed, settings.metric_models_dir)


def load(provider: str, embed=None, models_dir: Path | None = None) -> Embedder:
    """The model, ready to embed; `embed` is the EmbedSettings (runtime, device, endpoint...), `models_dir` where
    a local model's exported files are kept (default: the settings' models folder)."""
    return _module(provider).load(embed if embed is not None else _default_embed(), models_dir)


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
