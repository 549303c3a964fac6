"""Sentence boundaries, and the `sentence` strategy (N sentences per chunk).

A sentence ends at ".", "!" or "?" (optionally followed by closing quotes or brackets) before whitespace and an
upper-case letter, digit or opening quote; a blank line always ends one. Common abbreviations (e.g., i.e., Dr.)
do not end a sentence. Good enough for chunking and for sentence-level metrics; not a linguistic parser.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from connector.chunkers.base import Split, make_chunk, trim
from connector.models import Document

# The sentence ends where the whitespace group starts: closing quotes and brackets stay with their sentence.
_BOUNDARY = re.compile(r"""[.!?]["'”’)\]]*(\s+)(?=["“'‘(\[]?[A-Z0-9])|(\n[ \t]*\n\s*)""")
_ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|cf|Dr|Mr|Mrs|Ms|Prof|Fig|No|Vol|pp|al)\.|\b[A-Z]\.)$")
_LONGEST_ABBREVIATION = 5  # "Prof.": a match ends at the cut, so it starts at most this far before it


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Trimmed (start, end) spans of the sentences in text[start:end], in order."""
    if start == 0 and end is None:
        return list(_whole(text))
    return _spans(text, start, end)


@functools.lru_cache(maxsize=2)
def _whole(text: str) -> tuple[tuple[int, int], ...]:
    # A document's sentences are wanted four times (the sentence and semantic strategies, coreference, the
    # metrics), one after another in one process.
    return tuple(_spans(text, 0, None))


def _spans(text: str, start: int, end: int | None) -> list[tuple[int, int]]:
    end = len(text) if end is None else end
    spans = []
    pos = start
    for m in _BOUNDARY.finditer(text, start, end):
        cut = m.start(1) if m.group(1) is not None else m.start(2)
        # Looked for at the sentence's end only (`\b` still sees the character before where the search starts).
        if m.group(1) is not None and _ABBREVIATION.search(text, max(pos, cut - _LONGEST_ABBREVIATION - 1), cut):
            continue
        a, b = trim(text, pos, cut)
        if b > a:
            spans.append((a, b))
        pos = m.end()
    a, b = trim(text, pos, end)
    if b > a:
        spans.append((a, b))
    return spans


@dataclass(frozen=True)
class SentenceChunker:
    sentences: int
    encoding: str
    name: str = "sentence"

    @property
    def params(self) -> dict:
        return {"sentences": self.sentences}

    def split(self, document: Document) -> Split:
        text = document.markdown
        spans = sentence_spans(text)
        chunks = []
        for i in range(0, len(spans), self.sentences):
            group = spans[i : i + self.sentences]
            if (chunk := make_chunk(text, group[0][0], group[-1][1], self.encoding)) is not None:
                chunks.append(chunk)
        return Split(chunks)
