"""Guard post-processing applied to every candidate (algorithm-spec §3).

1. Oversize: a chunk above `max_tokens` is re-split with the recursive splitter at `max_tokens`.
2. Tiny: a chunk below `min_tokens` is merged into the next chunk if the result stays within `merge_limit`, else
   into the previous one if that fits; repeated until nothing changes.

Ours: a merge that stays within `max_tokens` is preferred (next, then previous). When neither fits, the tiny chunk
and a neighbour are re-split into two balanced chunks if both come out in range, before falling back to a merge
that only stays within `merge_limit`: a 1100–1150-token chunk is allowed by the guard but counts against Size
Compliance.
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
    split = False
    for chunk in chunks:
        if chunk.token_count > settings.max_tokens:
            out.extend(
                split_span(text, chunk.start, chunk.end, settings.max_tokens, settings.encoding, overlap_tokens=0)
            )
            split = True
        else:
            out.append(chunk)
    if split and any(b.start < a.end for a, b in zip(out, out[1:], strict=False)):
        return _in_order(out)
    return out


def _in_order(chunks: list[Chunk]) -> list[Chunk]:
    """Overlapping chunks, some re-split: the pieces of one may start before, or with, the last pieces of the chunk
    before it. In order of their start, each kept once, and without those inside another (which cover nothing of
    their own)."""
    out: list[Chunk] = []
    reach = -1  # the furthest end of the chunks kept so far
    for chunk in sorted(chunks, key=lambda c: (c.start, -c.end)):
        if chunk.end <= reach:
            continue
        out.append(chunk)
        reach = chunk.end
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
    for limit in (settings.max_tokens, None, settings.merge_limit):
        for j in (i, i - 1):  # the pair (out[j], out[j + 1]): with the next chunk first, then the previous
            if j < 0 or j + 1 >= len(out):
                continue
            replacement = (
                _rebalance(text, out[j], out[j + 1], settings)
                if limit is None
                else _merge(text, out[j], out[j + 1], limit, settings)
            )
            if replacement is not None:
                out[j : j + 2] = replacement if isinstance(replacement, list) else [replacement]
                return j if limit is not None else j + len(replacement)
    return None


def _rebalance(text: str, left: Chunk, right: Chunk, settings: ChunkingSettings) -> list[Chunk] | None:
    """The two chunks' text re-split into two of similar size, if both then lie in [min_tokens, max_tokens]."""
    total = left.token_count + right.token_count
    limit = min(settings.max_tokens, total // 2 + total // 10)
    if limit < settings.min_tokens:
        # Every half would be under min_tokens and refused: not worth splitting what lies between them, which can
        # be long (a run of zero-width spaces between two words trims to two one-token chunks and a huge gap).
        return None
    halves = split_span(text, left.start, right.end, limit, settings.encoding, overlap_tokens=0)
    if len(halves) == 2 and all(settings.min_tokens <= c.token_count <= settings.max_tokens for c in halves):
        return halves
    return None


def _merge(text: str, left: Chunk, right: Chunk, limit: int, settings: ChunkingSettings) -> Chunk | None:
    merged = make_chunk(text, min(left.start, right.start), max(left.end, right.end), settings.encoding)
    if merged is not None and merged.token_count <= limit:
        return merged
    return None
