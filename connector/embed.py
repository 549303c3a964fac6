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
        )
        for i, c in enumerate(chunks)
    )
