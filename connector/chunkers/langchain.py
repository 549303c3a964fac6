"""The baseline most pipelines ship with: LangChain's `RecursiveCharacterTextSplitter` at its common defaults
(4000 characters, 200 overlap, separators "\\n\\n", "\\n", " ", ""), re-implemented over offsets.

It measures characters, not tokens, has no lower bound, and overlaps consecutive chunks by whole splits up to
`overlap` characters. Kept faithful (including keeping each separator at the start of the next split) so that
`connector eval` compares adaptive chunking with what people actually run.
"""

from __future__ import annotations

from dataclasses import dataclass

from connector import tokens
from connector.chunkers.base import Split, trim
from connector.models import Chunk, Document

SEPARATORS = ("\n\n", "\n", " ", "")

Span = tuple[int, int]


@dataclass(frozen=True)
class LangChainChunker:
    encoding: str  # only to count the chunks' tokens: the splitter itself measures characters
    chunk_size: int = 4000  # LangChain's defaults: the baseline is what people run
    overlap: int = 200
    name: str = "langchain_4000"

    @property
    def params(self) -> dict:
        return {"chunk_size": self.chunk_size, "overlap": self.overlap, "unit": "characters", "overlapping": True}

    def split(self, document: Document) -> Split:
        text = document.markdown
        chunks = []
        for a, b in self._split(text, 0, len(text), SEPARATORS):
            piece = text[a:b]
            chunks.append(Chunk(a, b, piece, tokens.count(piece, self.encoding)))
        return Split(chunks)

    def _split(self, text: str, start: int, end: int, separators: tuple[str, ...]) -> list[Span]:
        separator, rest = separators[-1], ()
        for i, sep in enumerate(separators):
            if sep == "" or text.find(sep, start, end) >= 0:
                separator, rest = sep, separators[i + 1 :]
                break
        out: list[Span] = []
        good: list[Span] = []
        for a, b in _splits(text, start, end, separator):
            if b - a < self.chunk_size:
                good.append((a, b))
                continue
            if good:
                out.extend(self._merge(text, good))
                good = []
            out.extend(self._split(text, a, b, rest) if rest else [(a, b)])
        if good:
            out.extend(self._merge(text, good))
        return out

    def _merge(self, text: str, splits: list[Span]) -> list[Span]:
        """Greedy packing with LangChain's overlap rule: after a flush, drop splits from the front until the
        remainder is at most `overlap` characters (and the next split fits)."""
        docs: list[Span] = []
        current: list[Span] = []
        total = 0
        for a, b in splits:
            n = b - a
            if total + n > self.chunk_size and current:
                docs.append((current[0][0], current[-1][1]))
                while total > self.overlap or (total + n > self.chunk_size and total > 0):
                    total -= current[0][1] - current[0][0]
                    current.pop(0)
            current.append((a, b))
            total += n
        if current:
            docs.append((current[0][0], current[-1][1]))
        trimmed = (trim(text, a, b) for a, b in docs)
        return [(a, b) for a, b in trimmed if b > a]


def _splits(text: str, start: int, end: int, separator: str) -> list[Span]:
    """Split [start, end) at each separator, the separator starting the following split (keep_separator=True)."""
    if separator == "":
        return [(i, i + 1) for i in range(start, end)]
    cuts = [start]
    pos = text.find(separator, start, end)
    while pos >= 0:
        if pos > cuts[-1]:
            cuts.append(pos)
        pos = text.find(separator, pos + len(separator), end)
    cuts.append(end)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
