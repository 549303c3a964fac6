"""Hashed bag-of-words vectors: a fast, deterministic, lexical stand-in for a sentence embedder.

Used where thousands of sentences must be compared per document and a neural model would cost minutes on a CPU
(the `semantic` strategy's default), and, without stop-word filtering, as the `fake` embedder of tests and
benchmarks. Each word is hashed to a signed coordinate (the hashing trick); counts are log-scaled.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections import Counter

import numpy as np

from connector.embedders.base import Embeddings, ModelSpec, normalise

_WORD = re.compile(r"\w+")
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "he",
        "her",
        "his",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
        "not",
        "no",
        "can",
        "may",
        "must",
        "should",
        "would",
        "been",
        "being",
        "do",
        "does",
        "did",
        "if",
        "into",
        "than",
        "also",
        "such",
    ]
)


def hashed_bow(texts: list[str], dim: int, stop_words: frozenset[str] = frozenset()) -> np.ndarray:
    # Counted per text in C (`Counter`), then every (text, word) pair of the batch placed at once: a Python loop
    # over the words cost the `semantic` strategy more than all its other work on a short document.
    rows: list[int] = []
    words: list[str] = []
    counts: list[int] = []
    for i, text in enumerate(texts):
        found = Counter(_WORD.findall(text.lower()))
        kept = [word for word in found if word not in stop_words] if stop_words else list(found)
        rows += [i] * len(kept)
        words += kept
        counts += map(found.__getitem__, kept)
    if not words:
        return np.zeros((len(texts), dim), dtype=np.float32)
    codes = np.fromiter(map(_code, words, itertools.repeat(dim)), dtype=np.int64, count=len(words))
    signs = 1.0 - 2.0 * (codes & 1)
    weights = (1.0 + np.log(np.asarray(counts, dtype=np.float64))) * signs
    flat = np.asarray(rows, dtype=np.int64) * dim + (codes >> 1)
    # Words that hash to one column of one text add up, as the hashing trick has them.
    vectors = np.bincount(flat, weights=weights, minlength=len(texts) * dim).reshape(len(texts), dim)
    return normalise(vectors)


@functools.lru_cache(maxsize=65_536)
def _code(word: str, dim: int) -> int:
    """A word's column and sign (the hashing trick) as one int, column * 2 + (1 if negative), computed once per
    word: words repeat across sentences."""
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return (h % dim) * 2 + (0 if (h >> 32) & 1 else 1)


class LexicalEncoder:
    provider = "lexical"
    name = "lexical-hash-1024"
    dim = 1024

    def embed(self, texts: list[str]) -> Embeddings:
        return Embeddings.whole(texts, hashed_bow(texts, self.dim, STOP_WORDS))


def spec(embed) -> ModelSpec:
    return ModelSpec(LexicalEncoder.provider, LexicalEncoder.name, LexicalEncoder.dim)


def load(embed, models_dir) -> LexicalEncoder:
    return LexicalEncoder()
