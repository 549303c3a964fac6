"""Chunking strategies as configuration objects: one pydantic class per strategy, told apart by `kind`.

The object is the strategy: its fields are its parameters (recorded with every candidate it produces), `name` is
what the database stores in `candidates.strategy` and `chunks.strategy`, and `build(chunking)` returns the chunker
that runs it. A list of them is `ChunkingSettings.strategies`; a plain name (`"recursive_1100"`, `"sections"`) is
shorthand for a preset, so `CONNECTOR_CHUNK_STRATEGIES='["page","recursive_1100"]'` and
`CONNECTOR_CHUNK_STRATEGIES='[{"kind":"recursive","max_tokens":800,"overlap_tokens":100}]'` both work.

This module imports no chunker at import time: `connector.settings` needs these classes, and the chunkers need
the settings.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from connector.chunkers.base import Chunker
    from connector.settings import ChunkingSettings


class _Strategy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("", description="Stored in `strategy`; derived from the kind and parameters when empty.")

    @model_validator(mode="after")
    def _default_name(self):
        if not self.name:
            object.__setattr__(self, "name", self.default_name())
        return self

    def default_name(self) -> str:
        return self.kind  # type: ignore[attr-defined]

    @property
    def params(self) -> dict:
        """The strategy's parameters: every field but the name (what tells two strategies apart)."""
        return self.model_dump(exclude={"name"})

    def build(self, chunking: ChunkingSettings) -> Chunker:
        raise NotImplementedError


class Page(_Strategy):
    """One chunk per page; not applicable to formats without pages."""

    kind: Literal["page"] = "page"

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.page import PageChunker

        return PageChunker(chunking.encoding, self.name)


class Recursive(_Strategy):
    """Split-then-merge recursive splitter up to `max_tokens`, optionally carrying whole sentences over."""

    kind: Literal["recursive"] = "recursive"
    max_tokens: int = Field(1100, gt=0)
    overlap_tokens: int = Field(0, ge=0, description="Whole trailing sentences of the previous chunk, up to this.")

    def default_name(self) -> str:
        return f"recursive_{self.max_tokens}" + (f"_overlap{self.overlap_tokens}" if self.overlap_tokens else "")

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.recursive import RecursiveChunker

        return RecursiveChunker(self.max_tokens, chunking.encoding, self.name, self.overlap_tokens)


class Sections(_Strategy):
    """A chunk per heading section; with `merge`, consecutive sections packed together up to `max_tokens`.
    Not applicable to a document without headings."""

    kind: Literal["sections"] = "sections"
    max_tokens: int | None = Field(None, gt=0, description="Unset: the oversize guard's limit.")
    merge: bool = False

    def default_name(self) -> str:
        return "sections_merged" if self.merge else "sections"

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.sections import SectionsChunker

        return SectionsChunker(self.max_tokens or chunking.max_tokens, chunking.encoding, self.name, self.merge)


class Sentence(_Strategy):
    """A fixed number of sentences per chunk."""

    kind: Literal["sentence"] = "sentence"
    sentences: int = Field(8, gt=0)

    def default_name(self) -> str:
        return "sentence" if self.sentences == 8 else f"sentence_{self.sentences}"

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.sentences import SentenceChunker

        return SentenceChunker(self.sentences, chunking.encoding, self.name)


class Semantic(_Strategy):
    """Cuts where neighbouring sentences' similarity drops most."""

    kind: Literal["semantic"] = "semantic"
    percentile: float = Field(90.0, ge=0, le=100)
    encoder: str = Field("lexical", description="Sentence encoder: an embedder setting (lexical, minilm).")

    @field_validator("encoder")
    @classmethod
    def _known_encoder(cls, value: str) -> str:
        # Checked with the settings, not when a document is chunked: an encoder misspelt failed every document a
        # replica claimed ("no chunking strategy produced chunks"), for good, while it ran beside healthy ones.
        from connector.embedders import PROVIDERS

        if value not in PROVIDERS:
            raise ValueError(f"unknown encoder {value!r}; known: {', '.join(PROVIDERS)}")
        return value

    def default_name(self) -> str:
        if (self.percentile, self.encoder) == (90.0, "lexical"):
            return "semantic"
        return f"semantic_{self.percentile:g}" + ("" if self.encoder == "lexical" else f"_{self.encoder}")

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.semantic import SemanticChunker

        return SemanticChunker(self.percentile, self.encoder, chunking.encoding, name=self.name)


class TokenWindow(_Strategy):
    """Fixed token windows overlapping by `overlap` tokens."""

    kind: Literal["token_window"] = "token_window"
    size: int = Field(512, gt=0)
    overlap: int = Field(50, ge=0)

    def default_name(self) -> str:
        return "token_window" if (self.size, self.overlap) == (512, 50) else f"token_window_{self.size}_{self.overlap}"

    @model_validator(mode="after")
    def _overlap_below_size(self):
        if self.overlap >= self.size:
            raise ValueError("overlap must be smaller than size")
        return self

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.window import TokenWindowChunker

        return TokenWindowChunker(self.size, self.overlap, chunking.encoding, self.name)


class LLMRegex(_Strategy):
    """A regex written by the LLM endpoint of `CONNECTOR_LLM_*`; skipped without one."""

    kind: Literal["llm_regex"] = "llm_regex"

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.llm_regex import LLMRegexChunker

        return LLMRegexChunker(chunking.llm, chunking.encoding, self.name)


class LangChain(_Strategy):
    """LangChain's RecursiveCharacterTextSplitter at its defaults: the baseline people run."""

    kind: Literal["langchain"] = "langchain"
    chunk_size: int = Field(4000, gt=0, description="Characters.")
    overlap: int = Field(200, ge=0, description="Characters.")

    def default_name(self) -> str:
        return f"langchain_{self.chunk_size}"

    def build(self, chunking: ChunkingSettings) -> Chunker:
        from connector.chunkers.langchain import LangChainChunker

        return LangChainChunker(chunking.encoding, self.chunk_size, self.overlap, self.name)


StrategyConfig = Annotated[
    Page | Recursive | Sections | Sentence | Semantic | TokenWindow | LLMRegex | LangChain, Field(discriminator="kind")
]

PRESETS = ("page", "recursive_<N>", "recursive_<N>_overlap<M>", "sections", "sections_merged", "sentence",
           "semantic", "token_window", "llm_regex", "langchain_<N>")  # fmt: skip

_RECURSIVE = re.compile(r"recursive_(\d+)(?:_overlap(\d+))?")
_LANGCHAIN = re.compile(r"langchain_(\d+)")


def preset(name: str, legacy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config (as a dict, validated by the caller) a strategy name stands for. `legacy` holds the flat
    `CONNECTOR_CHUNK_*` knobs of earlier releases (sentences_per_chunk, window_tokens, ...), which still set the
    presets' parameters."""
    legacy = {k: v for k, v in (legacy or {}).items() if v is not None}
    simple: dict[str, dict[str, Any]] = {
        "page": {"kind": "page"},
        "sections": {"kind": "sections"},
        "sections_merged": {"kind": "sections", "merge": True},
        "llm_regex": {"kind": "llm_regex"},
        # Presets keep their names whatever the legacy knobs say: stored strategy names stay as they were.
        "sentence": {"kind": "sentence", "sentences": legacy.get("sentences_per_chunk", 8), "name": "sentence"},
        "semantic": {
            "kind": "semantic",
            "percentile": legacy.get("semantic_percentile", 90.0),
            "encoder": legacy.get("semantic_encoder", "lexical"),
            "name": "semantic",
        },
        "token_window": {
            "kind": "token_window",
            "size": legacy.get("window_tokens", 512),
            "overlap": legacy.get("window_overlap", 50),
            "name": "token_window",
        },
    }
    if name in simple:
        return simple[name]
    if m := _RECURSIVE.fullmatch(name):
        overlap = int(m.group(2)) if m.group(2) else legacy.get("recursive_overlap_tokens", 0)
        return {"kind": "recursive", "max_tokens": int(m.group(1)), "overlap_tokens": overlap, "name": name}
    if m := _LANGCHAIN.fullmatch(name):
        return {"kind": "langchain", "chunk_size": int(m.group(1))}
    raise ValueError(f"unknown chunking strategy {name!r}; known: {', '.join(PRESETS)}, or an object with a `kind`")
