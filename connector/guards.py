"""Guard post-processing applied to every candidate (algorithm-spec §3).

1. Oversize: a chunk above `max_tokens` is re-split with the recursive splitter at `max_tokens`.
2. Tiny: a chunk below `min_tokens` is merged into the next chunk if the result stays within `merge_limit`, else
   into the previous one if that fits; repeated until nothing changes.

Ours: a merge that stays within `max_tokens` is preferred (next, then previous) before one that only stays within
`merge_limit`: a 1100–1150-token chunk is allowed by the guard but counts against Size Compliance.
"""

from __future__ import annotations

from connector.chunkers.base import make_chunk
from connector.chunkers.recursive import split_span
from connector.models import Chunk
from connector.settings import ChunkingSettings


def apply(text: str, chunks: list[Chunk], settings: ChunkingSettings) -> list[Chunk]:
    return merge_tiny(text, split_oversize(text, chunks, settings), settings)


def split_oversize(text: str, chunks: list[Chunk], settings: ChunkingSettings) -> list[Chunk]:
    out: list[Chunk] = []
    for chunk in chunks:
        if chunk.token_count > settings.max_tokens:
            out.extend(split_span(text, chunk.start, chunk.end, settings.max_tokens, settings.encoding))
        else:
            out.append(chunk)
    return out


def merge_tiny(text: str, chunks: list[Chunk], settings: ChunkingSettings) -> list[Chunk]:
    out = list(chunks)
    changed = True
    while changed and len(out) > 1:
        changed = False
        i = 0
        while i < len(out):
            if out[i].token_count >= settings.min_tokens or len(out) == 1:
                i += 1
                continue
            merged_at = _merge_tiny_at(text, out, i, settings)
            if merged_at is None:
                i += 1
            else:
                changed = True
                i = merged_at
    return out


def _merge_tiny_at(text: str, out: list[Chunk], i: int, settings: ChunkingSettings) -> int | None:
    """Merge out[i] into a neighbour in place; the index to continue from, or None when no merge fits."""
    for limit in (settings.max_tokens, settings.merge_limit):
        if i + 1 < len(out) and (merged := _merge(text, out[i], out[i + 1], limit, settings)) is not None:
            out[i : i + 2] = [merged]
            return i
        if i > 0 and (merged := _merge(text, out[i - 1], out[i], limit, settings)) is not None:
            out[i - 1 : i + 1] = [merged]
            return i - 1
    return None


def _merge(text: str, left: Chunk, right: Chunk, limit: int, settings: ChunkingSettings) -> Chunk | None:
    merged = make_chunk(text, min(left.start, right.start), max(left.end, right.end), settings.encoding)
    if merged is not None and merged.token_count <= limit:
        return merged
    return None
