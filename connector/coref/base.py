"""What a coreference backend gives References Completeness: pairs of character spans."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Protocol

from connector.embedders.lexical import STOP_WORDS

ENGLISH_MIN_STOP_SHARE = 0.2  # English prose runs at 40-50 % function words; code and other languages far less
_WORD = re.compile(r"[^\W\d_]+")
_SAMPLE_WORDS = 20_000


@dataclass(frozen=True, slots=True, order=True)
class Pair:
    """An antecedent mention and a later pronoun that refers to it; offsets are [start, end) into the text."""

    entity_start: int
    entity_end: int
    pronoun_start: int
    pronoun_end: int


class CorefBackend(Protocol):
    name: str  # stored next to every RC value

    def pairs(self, text: str) -> list[Pair] | None:
        """The document's pairs, or None when the backend cannot judge this text (not English)."""
        ...


def is_english(text: str) -> bool:
    """Whether enough of the words are English function words (a cheap check: the heuristic backend's rules and
    the Maverick OntoNotes model are English-only; on other text RC must be NULL, not a wrong number)."""
    # A word holds at least one character: a text this short holds fewer than the sample, found in one C call.
    if len(text) <= _SAMPLE_WORDS:
        words = _WORD.findall(text)
    else:
        words = [m.group() for m in itertools.islice(_WORD.finditer(text), _SAMPLE_WORDS)]
    if len(words) < 5:
        return False
    return sum(map(STOP_WORDS.__contains__, map(str.lower, words))) / len(words) >= ENGLISH_MIN_STOP_SHARE
