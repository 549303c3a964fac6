"""Semantic splitting: cut where the similarity between neighbouring sentences drops.

Each sentence is compared with its neighbours through windows of `window` sentences on either side of every gap
(the mean of their vectors, as TextTiling does, which steadies the signal of short sentences); the gaps whose
distance is in the top `(100 - percentile)` % become cuts. The guards then bound the sizes.

The sentence encoder is lexical by default (hashed bag of words, no stop words): thousands of sentences per
document cost milliseconds, where a neural model on a CPU costs minutes. `encoder` names any embedder setting.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from connector.chunkers.base import Split, make_chunk
from connector.chunkers.sentences import sentence_spans
from connector.models import Document


@dataclass(frozen=True)
class SemanticChunker:
    percentile: float
    encoder: str
    encoding: str
    window: int = 3  # sentences on either side of a gap (a design constant, not a setting)
    name: str = "semantic"

    @property
    def params(self) -> dict:
        return {"percentile": self.percentile, "window": self.window, "encoder": self.encoder}

    def split(self, document: Document) -> Split:
        text = document.markdown
        spans = sentence_spans(text)
        if len(spans) < 2:
            chunk = make_chunk(text, 0, len(text), self.encoding)
            return Split([chunk] if chunk else [])
        distances = self._distances(text, spans)
        threshold = percentile(distances, self.percentile)
        cuts = [spans[i + 1][0] for i, d in enumerate(distances) if d > threshold]
        bounds = [0, *cuts, len(text)]
        chunks = (make_chunk(text, a, b, self.encoding) for a, b in zip(bounds, bounds[1:], strict=False))
        return Split([c for c in chunks if c is not None])

    def _distances(self, text: str, spans: list[tuple[int, int]]) -> list[float]:
        """The distance across every gap, BLOCK_SENTENCES gaps at a time: the vectors of a block's sentences (and of
        `window` sentences either side of it) are all a block holds. At once, a 5 MB changelog's 80,000 sentences
        took 2 GB (a float32 and three float64 arrays of 1,024 columns per sentence) and a 50 MB file past 13 GB."""
        encoder = _encoder(self.encoder)
        n = len(spans)
        distances: list[float] = []
        for first in range(1, n, BLOCK_SENTENCES):  # gaps [first, last), the gap g after sentence g - 1
            last = min(n, first + BLOCK_SENTENCES)
            lo, hi = max(0, first - self.window), min(n, last - 1 + self.window)
            texts = [text[a:b] for a, b in spans[lo:hi]]
            # The lexical encoder's vectors of a short document use a few hundred of its 1,024 columns: the others
            # are left out (the same cosines; on 1,007 documents the same cuts, the distances equal or within an
            # ulp), which took a fifth off this strategy's work on a 2,400-character row.
            vectors = encoder.compact(texts) if hasattr(encoder, "compact") else encoder.embed(texts).vectors
            # NOTE: a block's window sums are its own prefix sums' differences: past the first block a distance may
            # differ from the whole document's in the last bits (the same sums, rounded from another origin).
            distances += gap_distances(vectors, self.window)[first - lo - 1 : last - lo - 1].tolist()
        return distances


BLOCK_SENTENCES = 4096
"""Gaps whose distances are worked out together: a document of fewer sentences is one block, as before blocks."""


@functools.cache
def _encoder(name: str):
    """The sentence encoder, loaded once per process: loading reads the settings (environment and .env), which
    costs more than splitting a short document."""
    from connector.embedders import load

    return load(name)


def percentile(values: list[float], q: float) -> float:
    """`np.percentile(values, q)` (linear interpolation) to the last bit, for 0 <= q <= 100 and values that do not
    mix -0.0 with 0.0 (numpy's partition may order those either way; a gap's distance is never -0.0): numpy's order
    statistics (past the last one, its index -1, and the gamma that follows from it), then its `_lerp`, in Python
    floats, which are the same IEEE doubles. numpy's own costs ~0.1 ms a call in argument handling, a tenth of this
    strategy's work on a short document."""
    ordered = sorted(values)
    virtual = (len(ordered) - 1) * (q / 100)
    if virtual >= len(ordered) - 1:
        below = above = len(ordered) - 1
        gamma = virtual + 1  # numpy's index of the last value is -1
    else:
        below = math.floor(virtual)
        above = below + 1
        gamma = virtual - below
    a, b = ordered[below], ordered[above]
    difference = b - a
    if gamma >= 0.5:
        return b - difference * (1 - gamma)
    return a + difference * gamma


def gap_distances(vectors: np.ndarray, window: int) -> np.ndarray:
    """Cosine distance across each gap between sentence i and i + 1, from the mean vectors of `window` sentences
    before and after the gap."""
    n = len(vectors)
    prefix = np.zeros((n + 1, vectors.shape[1]), dtype=vectors.dtype)
    # Row by row: the same sums in the same order as np.cumsum(axis=0), whose loop runs down each of the 1024
    # columns in turn and cost ten times more on a short document.
    for i in range(n):
        np.add(prefix[i], vectors[i], out=prefix[i + 1])
    prefix = prefix.astype(np.float64)
    gap = np.arange(1, n)  # the gap after sentence gap - 1
    left = prefix[gap] - prefix[np.maximum(0, gap - window)]
    right = prefix[np.minimum(n, gap + window)] - prefix[gap]
    denominator = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    dots = np.einsum("ij,ij->i", left, right)
    return np.where(denominator > 0, 1.0 - dots / np.where(denominator > 0, denominator, 1.0), 1.0)
