"""Hashed bag-of-words vectors: a fast, deterministic, lexical stand-in for a sentence embedder.

Used where thousands of sentences must be compared per document and a neural model would cost minutes on a CPU
(the `semantic` strategy's default), and, without stop-word filtering, as the `fake` embedder of tests and
benchmarks. Each word is hashed to a signed coordinate (the hashing trick); counts are log-scaled.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re

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
    vectors = np.zeros((len(texts), dim), dtype=np.float64)
    for i, text in enumerate(texts):
        counts: dict[str, int] = {}
        for word in _WORD.findall(text.lower()):
            if word not in stop_words:
                counts[word] = counts.get(word, 0) + 1
        row: dict[int, float] = {}
        for word, n in counts.items():
            slot, sign = _slot(word, dim)
            row[slot] = row.get(slot, 0.0) + (1.0 + math.log(n)) * sign
        if row:
            vectors[i, list(row)] = list(row.values())
    return normalise(vectors)


@functools.lru_cache(maxsize=65_536)
def _slot(word: str, dim: int) -> tuple[int, float]:
    """A word's column and sign (the hashing trick), computed once per word: words repeat across sentences."""
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return h % dim, 1.0 if (h >> 32) & 1 else -1.0


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
