"""Split-then-merge recursive splitter (algorithm-spec §2).

Stage 1 shreds the text along a priority list of separators until every piece fits in `max_tokens`; stage 2 walks
the pieces in order and greedily packs them into chunks of at most `max_tokens`. Shredding first and merging second
is what keeps this splitter from leaving the tiny tail pieces a top-down recursive splitter produces.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from connector import tokens
from connector.chunkers.base import Split, make_chunk
from connector.models import Chunk, Document


class AfterNewline:
    r"""`re.compile(r"(?<=\n)\s*" + marker)`'s matches, found in linear time. The regex tries every position after a
    newline and runs `\s*` to the end of the blank run from each: quadratic on a run of blank lines (20 KB of
    "\t\n" took 85 s over the strategies). Every position after a newline inside one blank run reaches the same
    first non-blank character, so they all match or all fail together: one try per run gives the same matches."""

    _BLANK = re.compile(r"\s*")

    def __init__(self, marker: str):
        self.pattern = re.compile(r"(?<=\n)\s*" + marker)  # what this finds (the tests compare the two)
        self._marker = re.compile(marker)

    def starts(self, text: str, start: int, end: int) -> list[int]:
        """`[m.start() for m in self.pattern.finditer(text, start, end)]`."""
        found = []
        pos = start
        while pos < end:
            if pos > 0 and text[pos - 1] == "\n":  # a lookbehind sees before `start`, as the regex's does
                at = pos
            else:
                newline = text.find("\n", pos, end)
                if newline < 0:
                    break
                at = newline + 1
            first = self._BLANK.match(text, at, end).end()
            marker = self._marker.match(text, first, end)
            if marker is not None:
                found.append(at)
                pos = marker.end()
            else:
                pos = first + 1  # the rest of this blank run fails the same way
        return found


class HeadingAt:
    r"""`re.compile(r"(?<=\n)#{level}\s")`'s matches, found ten times faster. A pattern that opens with a lookbehind
    has no literal prefix for the regex engine to look for, so it is tried at every position: 60 us over an
    8,000-character row for each of the six levels, in each strategy and each level of the recursion, a third of
    the recursive strategies' work on such a row. The same matches, found through the newline before them (searched
    from one character before the slice, where the lookbehind looks)."""

    def __init__(self, level: int):
        self.pattern = re.compile(rf"(?<=\n)#{{{level}}}\s")  # what this finds (the tests compare the two)
        self._fast = re.compile(rf"\n#{{{level}}}(?=\s)")

    def starts(self, text: str, start: int, end: int) -> list[int]:
        """`[m.start() for m in self.pattern.finditer(text, start, end)]`."""
        return [m.start() + 1 for m in self._fast.finditer(text, max(start - 1, 0), end)]


# (pattern, offset of the cut inside the match). The separator starts the following piece (offset 0), except for
# sentence and clause punctuation, which stays with the text it ends (offset 1).
SEPARATORS: tuple[tuple[re.Pattern[str] | AfterNewline | HeadingAt, int], ...] = (
    *((HeadingAt(level), 0) for level in range(1, 7)),
    (AfterNewline(r"\(?[A-Za-z0-9]{1,4}[.)]\s+"), 0),
    (AfterNewline(r"[-*·•●▪◦‣▸▹○◯‒–—]\s+"), 0),
    (re.compile(r"\n{2,}"), 0),
    (re.compile(r"\n"), 0),
    (re.compile(r"[.!?]\s+"), 1),
    (re.compile(r",\s+"), 1),
    (re.compile(r"\s+"), 0),
)

MIN_PIECE_CHARS = 10
"""Stage-1 pieces shorter than this are folded into a neighbour: a lone bullet marker or number is not a unit."""


@dataclass(frozen=True)
class RecursiveChunker:
    max_tokens: int
    encoding: str
    name: str  # recursive_<max_tokens>
    overlap_tokens: int  # the paper's runs use 0

    @property
    def params(self) -> dict:
        params = {"max_tokens": self.max_tokens, "encoding": self.encoding}
        if self.overlap_tokens:
            params.update(overlap_tokens=self.overlap_tokens, overlapping=True)
        return params

    def split(self, document: Document) -> Split:
        text = document.markdown
        return Split(split_span(text, 0, len(text), self.max_tokens, self.encoding, overlap_tokens=self.overlap_tokens))


def split_span(text: str, start: int, end: int, max_tokens: int, encoding: str, *, overlap_tokens: int) -> list[Chunk]:
    """Chunks of at most `max_tokens` covering text[start:end]; used by the strategy and by the oversize guard.

    With `overlap_tokens`, each chunk after the first starts with whole trailing sentences of the chunk before it
    (as many as fit in the budget), then is filled up as usual: overlap in semantic units, never a cut sentence."""
    pieces = _merge_small_pieces(text, _shred(text, start, end, max_tokens, encoding, 0))
    queue = deque(zip(pieces, tokens.count_spans(text, pieces, encoding), strict=True))
    chunks: list[Chunk] = []
    run: list[tuple[tuple[int, int], int]] = []
    total = 0
    while queue or run:
        if queue and (not run or total + queue[0][1] <= max_tokens):
            run.append(queue.popleft())
            total += run[-1][1]
            continue
        # NOTE: the sum of piece counts estimates the run's count; BPE merges across piece edges can make the
        # real count differ, so the flushed chunk is counted exactly and trailing pieces go back if it overflows.
        while True:
            chunk = make_chunk(text, run[0][0][0], run[-1][0][1], encoding)
            if chunk is None or chunk.token_count <= max_tokens or len(run) == 1:
                break
            queue.appendleft(run.pop())
        if chunk is not None and chunk.token_count > max_tokens:
            # One piece that grew past the limit when a sub-10-character neighbour was glued on.
            chunks.extend(
                c
                for a, b in _by_characters(text, chunk.start, chunk.end, max_tokens, encoding)
                if (c := make_chunk(text, a, b, encoding)) is not None
            )
        elif chunk is not None:
            chunks.append(chunk)
        run, total = [], 0
        if overlap_tokens and chunk is not None and queue:
            carried = _carry(text, chunk, overlap_tokens, encoding)
            if carried is not None and carried[1] + queue[0][1] <= max_tokens:
                run, total = [carried], carried[1]
    return chunks


def _carry(text: str, chunk: Chunk, budget: int, encoding: str) -> tuple[tuple[int, int], int] | None:
    """The longest run of whole trailing sentences of `chunk` (never all of them) within `budget` tokens."""
    from connector.chunkers.sentences import sentence_spans

    tail = sentence_spans(text, chunk.start, chunk.end)[1:]
    start, used = None, 0
    counts = tokens.count_spans(text, tail, encoding)
    for (a, _b), n in zip(reversed(tail), reversed(counts), strict=True):
        if used + n > budget:
            break
        start, used = a, used + n
    return ((start, chunk.end), used) if start is not None else None


def _shred(text: str, start: int, end: int, max_tokens: int, encoding: str, level: int) -> list[tuple[int, int]]:
    if end - start <= max_tokens or tokens.count_span(text, start, end, encoding) <= max_tokens:
        # NOTE: the length test is a shortcut, not an approximation: a token is at least one character.
        return [(start, end)]
    for depth in range(level, len(SEPARATORS)):
        pattern, shift = SEPARATORS[depth]
        if isinstance(pattern, AfterNewline | HeadingAt):
            found = pattern.starts(text, start, end)
        else:
            found = [m.start() for m in pattern.finditer(text, start, end)]
        cuts = sorted({at + shift for at in found} - {start, end})
        cuts = [c for c in cuts if start < c < end]
        if not cuts:
            continue
        pieces: list[tuple[int, int]] = []
        bounds = [start, *cuts, end]
        for a, b in zip(bounds, bounds[1:], strict=False):
            pieces.extend(_shred(text, a, b, max_tokens, encoding, depth + 1))
        return pieces
    return _by_characters(text, start, end, max_tokens, encoding)


def _by_characters(text: str, start: int, end: int, max_tokens: int, encoding: str) -> list[tuple[int, int]]:
    """Last resort: the longest prefix that fits, found by binary search, repeatedly."""
    pieces = []
    while start < end:
        lo, hi = start + 1, end
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tokens.count_span(text, start, mid, encoding) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        pieces.append((start, lo))
        start = lo
    return pieces


def _merge_small_pieces(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if len(pieces) < 2:
        return pieces
    merged: list[tuple[int, int]] = []
    carry: int | None = None  # start of a small piece waiting to be glued to the next one
    for a, b in pieces:
        if carry is not None:
            a, carry = carry, None
        if len(text[a:b].strip()) < MIN_PIECE_CHARS:
            carry = a
            continue
        merged.append((a, b))
    if carry is not None:
        if merged:
            merged[-1] = (merged[-1][0], pieces[-1][1])
        else:
            merged.append((carry, pieces[-1][1]))
    return merged
