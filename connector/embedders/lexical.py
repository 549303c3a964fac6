"""Hashed bag-of-words vectors: a fast, deterministic, lexical stand-in for a sentence embedder.

Used where thousands of sentences must be compared per document and a neural model would cost minutes on a CPU
(the `semantic` strategy's default), and, without stop-word filtering, as the `fake` embedder of tests and
benchmarks. Each word is hashed to a signed coordinate (the hashing trick); counts are log-scaled.
"""

from __future__ import annotations

import hashlib
import itertools
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


def hashed_bow(
    texts: list[str], dim: int, stop_words: frozenset[str] = frozenset(), compact: bool = False
) -> np.ndarray:
    """One unit vector per text, `dim` wide; `compact`: only the columns some text uses, in their order (the same
    norms, dot products and cosines, without the zero columns every later step would carry along)."""
    # Every word of the batch numbered by first appearance, then each (text, word) pair counted and placed at once
    # by numpy: one `Counter` per text and the lists built from it cost the `semantic` strategy more than all its
    # other work on a short document.
    found = [_WORD.findall(text.lower()) for text in texts]
    if stop_words:
        found = [[word for word in words if word not in stop_words] for words in found]
    index: dict[str, int] = {}
    ids = [index.setdefault(word, len(index)) for word in itertools.chain.from_iterable(found)]
    if not ids:
        return np.zeros((len(texts), dim), dtype=np.float32)
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), [len(words) for words in found])
    pairs, first, counts = np.unique(rows * len(index) + ids, return_index=True, return_counts=True)
    # Back in the order the pairs first appear (text by text, then word by word): the order in which counting per
    # text had bincount add the weights of words that share a column (the float64 sums, before the float32 cast).
    order = np.argsort(first, kind="stable")
    pairs, counts = pairs[order], counts[order]
    codes = np.fromiter(_codes(index, dim), dtype=np.int64, count=len(index))[pairs % len(index)]
    signs = 1.0 - 2.0 * (codes & 1)
    weights = (1.0 + np.log(counts.astype(np.float64))) * signs
    columns = codes >> 1
    if compact:
        width = len(used := np.unique(columns))
        columns = np.searchsorted(used, columns)
    else:
        width = dim
    # Words that hash to one column of one text add up, as the hashing trick has them.
    flat = (pairs // len(index)) * width + columns
    vectors = np.bincount(flat, weights=weights, minlength=len(texts) * width).reshape(len(texts), width)
    return normalise(vectors)


_CODES: dict[int, dict[str, int]] = {}  # dim -> word -> its code (see `_code`); plain dicts: a lookup per word
CODES_KEPT = 65_536  # words per dimension whose code is kept (see `_codes`)


def _codes(words, dim: int) -> list[int]:
    """`_code` of each word, computed once per word (words repeat across sentences and documents). At most
    CODES_KEPT words are kept per dimension: a batch that would pass that starts the cache again, and one with more
    new words than that keeps none of them."""
    known = _CODES.setdefault(dim, {})
    codes = list(map(known.get, words))
    if None in codes:
        new = [k for k, code in enumerate(codes) if code is None]
        keep = len(new) <= CODES_KEPT
        if keep and len(known) + len(new) > CODES_KEPT:
            known.clear()
        words = list(words)
        for k in new:
            codes[k] = _code(words[k], dim)
            if keep:
                known[words[k]] = codes[k]
    return codes


def _code(word: str, dim: int) -> int:
    """A word's column and sign (the hashing trick) as one int, column * 2 + (1 if negative)."""
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return (h % dim) * 2 + (0 if (h >> 32) & 1 else 1)


class LexicalEncoder:
    provider = "lexical"
    name = "lexical-hash-1024"
    dim = 1024

    def embed(self, texts: list[str]) -> Embeddings:
        return Embeddings.whole(texts, hashed_bow(texts, self.dim, STOP_WORDS))

    def compact(self, texts: list[str]) -> np.ndarray:
        """`embed`'s vectors without the columns no text uses: for comparing these texts with one another."""
        return hashed_bow(texts, self.dim, STOP_WORDS, compact=True)


def spec(embed) -> ModelSpec:
    return ModelSpec(LexicalEncoder.provider, LexicalEncoder.name, LexicalEncoder.dim)


def load(embed, models_dir) -> LexicalEncoder:
    return LexicalEncoder()
