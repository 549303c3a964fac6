"""ICC and DCC (algorithm-spec §4): how well a chunk's sentences agree with the chunk, and how well each chunk
agrees with its neighbourhood. Vectors come from a `VectorCache`, so texts shared by candidates cost once.

- ICC: for each chunk with ≥ 2 sentences, the mean cosine between each sentence (clipped to the chunk) and the
  whole chunk; the mean over those chunks, clipped to [0, 1]. NULL when no chunk has two sentences. A candidate of
  more than ICC_MAX_CHUNKS chunks (a document of megabytes) is measured on that many, evenly spaced.
- DCC: windows of consecutive chunks holding up to `window_tokens` tokens, sliding one chunk at a time; a window
  counts when it has ≥ 2 chunks and its last chunk differs from the previous window's. For every (window, member)
  pair, the cosine between the window and the member; the mean, clipped to [0, 1]. NULL with < 2 chunks. A
  window's vector is the token-weighted mean of its members' vectors: how both our MiniLM embedder and a static
  model pool a long text anyway, and it spares embedding ~3000-token texts once per chunk.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

import numpy as np

from connector.chunkers.base import trim
from connector.models import Chunk

WINDOW_TOKENS = 3000
_ALNUM = re.compile(r"[^\W_]")  # what str.isalnum() accepts: \w less the underscore


class Sentences:
    """A document's sentence spans, with the pieces of them that fall inside a chunk."""

    def __init__(self, text: str, spans: list[tuple[int, int]]):
        self.text = text
        self.spans = spans
        self._ends = [b for _, b in spans]
        self._within: dict[tuple[int, int], list[tuple[int, int]]] = {}
        # Each sentence trimmed, or None when it holds no letter or digit: what a chunk holding all of it gets, and
        # most chunks hold most of their sentences whole (worked out when first asked for).
        self._whole: list[tuple[int, int] | None | bool] = [False] * len(spans)

    def within(self, chunk: Chunk) -> list[tuple[int, int]]:
        """Spans of the sentences (clipped to the chunk, trimmed) that hold a letter or digit. Kept per chunk span:
        ICC asks twice for each chunk (to announce its spans, then to score), and candidates share chunks."""
        key = (chunk.start, chunk.end)
        found = self._within.get(key)
        if found is not None:
            return found
        out = []
        spans, whole = self.spans, self._whole
        i = bisect.bisect_right(self._ends, chunk.start)
        while i < len(spans) and spans[i][0] < chunk.end:
            start, end = spans[i]
            if start >= chunk.start and end <= chunk.end:
                piece = whole[i]
                if piece is False:
                    piece = whole[i] = self._piece(start, end)
            else:
                piece = self._piece(max(start, chunk.start), min(end, chunk.end))
            if piece is not None:
                out.append(piece)
            i += 1
        self._within[key] = out
        return out

    def _piece(self, start: int, end: int) -> tuple[int, int] | None:
        a, b = trim(self.text, start, end)
        return (a, b) if _ALNUM.search(self.text, a, b) else None


ICC_MAX_CHUNKS = 1000
"""ICC is the mean over at most this many of a candidate's chunks, evenly spaced (`icc_sample`): every sentence of
every candidate (a 5 MB changelog: 55,000 sentences, eight candidates) took 330 MB of vectors and half the document's
time; a thousand chunks' mean is as telling."""


def icc_sample(chunks: Sequence[Chunk]) -> Sequence[Chunk]:
    """The chunks ICC averages over: all of them, or ICC_MAX_CHUNKS evenly spaced through the document."""
    n = len(chunks)
    if n <= ICC_MAX_CHUNKS:
        return chunks
    return [chunks[k * n // ICC_MAX_CHUNKS] for k in range(ICC_MAX_CHUNKS)]


def icc_spans(chunks: Sequence[Chunk], sentences: Sentences) -> list[tuple[int, int]]:
    """Every span ICC will ask vectors for (to embed a document's candidates in one batch)."""
    out = []
    for chunk in icc_sample(chunks):
        pieces = sentences.within(chunk)
        if len(pieces) >= 2:
            out.append((chunk.start, chunk.end))
            out += pieces
    return out


def intrachunk_cohesion(
    chunks: Sequence[Chunk], sentences: Sentences, vectors: Callable[[list[tuple[int, int]]], np.ndarray]
) -> float | None:
    """`vectors` maps spans of the document to unit vectors (`VectorCache.spans`)."""
    scores = []
    for chunk in icc_sample(chunks):
        pieces = sentences.within(chunk)
        if len(pieces) < 2:
            continue
        rows = vectors([(chunk.start, chunk.end), *pieces])
        scores.append(_mean32(rows[1:] @ rows[0]))
    if not scores:
        return None
    return _clipped_mean(scores)


def _mean32(values: np.ndarray) -> float:
    """`float(np.mean(values))` of a float32 vector to the bit: numpy's pairwise sum, then its quotient by the count
    (taken in float64) rounded back to float32; without the ~4 µs of numpy's argument handling, once per chunk."""
    return float(np.float32(float(np.add.reduce(values)) / len(values)))


def _clipped_mean(values: Sequence[float]) -> float:
    """`float(np.clip(np.mean(values), 0, 1))` to the bit (the same float64 array and pairwise sum), without the
    ~7 µs numpy spends handling the arguments of the two calls: ICC and DCC take one for every candidate."""
    mean = float(np.add.reduce(np.asarray(values, dtype=np.float64))) / len(values)
    return min(max(mean, 0.0), 1.0)


def windows(token_counts: Sequence[int], limit: int = WINDOW_TOKENS) -> list[tuple[int, int]]:
    """[i, j) chunk ranges of the DCC windows."""
    out = []
    previous_last = -1
    n = len(token_counts)
    j, total = 0, 0
    for i in range(n):
        if j < i + 1:  # a window always holds its first chunk, however long
            j, total = i + 1, token_counts[i]
        while j < n and total + token_counts[j] <= limit:
            total += token_counts[j]
            j += 1
        if j - i >= 2 and j - 1 != previous_last:
            out.append((i, j))
        previous_last = j - 1
        total -= token_counts[i]
    return out


def contextual_coherence(
    chunks: Sequence[Chunk], vectors: Callable[[list[tuple[int, int]]], np.ndarray], limit: int = WINDOW_TOKENS
) -> float | None:
    if len(chunks) < 2:
        return None
    counts = [max(c.token_count, 1) for c in chunks]
    spans = windows(counts, limit)
    if not spans:
        return None
    rows = vectors([(c.start, c.end) for c in chunks])
    weights = np.asarray(counts, dtype=np.float64)[:, None]
    sims = []
    for i, j in spans:
        window = (rows[i:j] * weights[i:j]).sum(axis=0)
        window /= np.linalg.norm(window) or 1.0
        sims.extend(rows[i:j] @ window)
    return _clipped_mean(sims)
