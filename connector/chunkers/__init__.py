"""Chunking strategies, by the name stored in `strategy`."""

from __future__ import annotations

from connector.chunkers.base import Chunker
from connector.chunkers.langchain import LangChainChunker
from connector.chunkers.llm_regex import LLMRegexChunker
from connector.chunkers.page import PageChunker
from connector.chunkers.recursive import RecursiveChunker
from connector.chunkers.sections import SectionsChunker
from connector.chunkers.semantic import SemanticChunker
from connector.chunkers.sentences import SentenceChunker
from connector.chunkers.window import TokenWindowChunker
from connector.errors import FatalError
from connector.settings import ChunkingSettings

STRATEGIES = (
    "page", "recursive_1100", "recursive_600", "llm_regex", "sections", "sentence", "semantic", "token_window",
    "langchain_4000",
)  # fmt: skip


def build(settings: ChunkingSettings) -> list[Chunker]:
    """The configured strategies, in the configured order (which is also the tie-break order)."""
    chunkers: list[Chunker] = []
    for name in settings.strategies:
        if name == "page":
            chunkers.append(PageChunker(encoding=settings.encoding))
        elif name == "langchain_4000":
            chunkers.append(LangChainChunker(encoding=settings.encoding))
        elif name == "llm_regex":
            chunkers.append(LLMRegexChunker(llm=settings.llm, encoding=settings.encoding))
        elif name == "sections":
            chunkers.append(SectionsChunker(max_tokens=settings.max_tokens, encoding=settings.encoding))
        elif name == "sentence":
            chunkers.append(SentenceChunker(sentences=settings.sentences_per_chunk, encoding=settings.encoding))
        elif name == "semantic":
            chunkers.append(
                SemanticChunker(
                    settings.semantic_percentile, encoder=settings.semantic_encoder, encoding=settings.encoding
                )
            )
        elif name == "token_window":
            chunkers.append(
                TokenWindowChunker(
                    size=settings.window_tokens, overlap=settings.window_overlap, encoding=settings.encoding
                )
            )
        elif name.startswith("recursive_") and name.removeprefix("recursive_").isdigit():
            size = int(name.removeprefix("recursive_"))
            chunkers.append(RecursiveChunker(size, settings.encoding, name, settings.recursive_overlap_tokens))
        else:
            raise FatalError(f"unknown chunking strategy {name!r}; known: {', '.join(STRATEGIES)}")
    return chunkers
