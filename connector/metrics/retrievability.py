"""RT, Retrievability (ours, beyond the paper): how often a passage of the document, asked as a query, finds the
chunk it came from, with no labels.

Probes are sentences sampled evenly through the document (the same for every candidate). For each probe and
candidate, the target is the chunk holding the whole sentence, embedded *without* it (the inverse cloze task of
Lee et al., 2019): the probe must find its context, not itself. The probe is retrieved when the characters of the
chunks ranked at or above its target, among all of the candidate's chunks, fit in `budget_chars` — what a reader
(or an LLM's context) would go through before reaching it. RT is the share of probes retrieved.

That one rule guards both degenerate winners: a chunk per sentence leaves an empty context that finds nothing, and
one giant chunk costs more characters than the budget holds. A probe that a chunk boundary cuts is not retrieved
(no chunk holds it whole), so a candidate that cuts sentences pays here too.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from connector.models import Chunk

MIN_WORDS = 8  # shorter sentences (headings, list items, table rows) say too little to find anything


@dataclass(frozen=True, slots=True)
class Probe:
    start: int
    end: int
    text: str


def sample_probes(text: str, sentences: Sequence[tuple[int, int]], count: int) -> list[Probe]:
    """Up to `count` sentences of at least MIN_WORDS words, evenly spaced through the document (deterministic)."""
    usable = [(a, b) for a, b in sentences if len(text[a:b].split()) >= MIN_WORDS]
    if not usable or count <= 0:
        return []
    step = len(usable) / min(count, len(usable))
    picked = [usable[int(i * step + step / 2)] for i in range(min(count, len(usable)))]
    return [Probe(a, b, text[a:b]) for a, b in picked]


def masked_text(text: str, chunk: Chunk, probe: Probe) -> str:
    return (text[chunk.start : probe.start] + " " + text[probe.end : chunk.end]).strip()


def holders(chunks: Sequence[Chunk], probes: Sequence[Probe]) -> list[int | None]:
    """Index of the chunk holding each probe whole, or None when a boundary cuts it (overlapping candidates: the
    last-starting chunk that holds it)."""
    starts = [c.start for c in chunks]
    out: list[int | None] = []
    for p in probes:
        i = bisect.bisect_right(starts, p.start) - 1
        found = None
        while i >= 0 and chunks[i].end > p.start:  # earlier chunks can hold it only when chunks overlap
            if chunks[i].end >= p.end:
                found = i
                break
            i -= 1
        out.append(found)
    return out


def retrievability_texts(text: str, chunks: Sequence[Chunk], probes: Sequence[Probe]) -> list[str]:
    """Every text RT asks vectors for (so that all candidates' texts are embedded in one batch)."""
    out = [p.text for p in probes] + [c.text for c in chunks]
    for p, i in zip(probes, holders(chunks, probes), strict=True):
        if i is not None:
            out.append(masked_text(text, chunks[i], p))
    return out


def retrievability(
    text: str,
    chunks: Sequence[Chunk],
    probes: Sequence[Probe],
    vectors: Callable[[list[str]], np.ndarray],
    budget_chars: int,
) -> float | None:
    if not probes or not chunks:
        return None
    chunk_vectors = vectors([c.text for c in chunks])
    query_vectors = vectors([p.text for p in probes])
    lengths = np.array([len(c.text) for c in chunks], dtype=np.int64)
    found = 0
    for p, q, i in zip(probes, query_vectors, holders(chunks, probes), strict=True):
        if i is None:
            continue
        masked = masked_text(text, chunks[i], p)
        if not any(ch.isalnum() for ch in masked):
            continue  # the chunk was the sentence alone: nothing left to find it by
        target = float(vectors([masked])[0] @ q)
        sims = chunk_vectors @ q
        sims[i] = target
        ahead = sims > target
        if int(lengths[ahead].sum()) + int(lengths[i]) <= budget_chars:
            found += 1
    return found / len(probes)
