"""Embedding stage: only the winner's chunks are embedded, with their page range and heading path attached."""

from __future__ import annotations

from connector.embedders import Embedder
from connector.models import Candidate, Document, EmbeddedChunk


def embed_winner(document: Document, winner: Candidate, embedder: Embedder) -> tuple[EmbeddedChunk, ...]:
    chunks = winner.chunks
    result = embedder.embed([c.text for c in chunks])
    return tuple(
        EmbeddedChunk(
            ordinal=i,
            chunk=c,
            embedding=result.vectors[i],
            page_start=document.page_at(c.start),
            page_end=document.page_at(c.end - 1),
            section_path=document.section_path_at(c.start),
            embed_windows=result.windows[i],
            chunk_type=chunk_type(document, c),
        )
        for i, c in enumerate(chunks)
    )


_TYPE_BY_KIND = {"table": "table", "list": "list", "code": "code"}


def chunk_type(document: Document, chunk) -> str:
    """text, table, list or code: the kind of the blocks holding most of the chunk's characters."""
    share: dict[str, int] = {}
    for block in document.blocks:
        if block.end <= chunk.start:
            continue
        if block.start >= chunk.end:
            break
        kind = _TYPE_BY_KIND.get(block.kind, "text")
        share[kind] = share.get(kind, 0) + min(block.end, chunk.end) - max(block.start, chunk.start)
    return max(share, key=share.get) if share else "text"
