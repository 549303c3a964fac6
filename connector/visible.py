"""What a text shows. Whitespace, controls and format characters render as nothing: a document of them alone is
empty (conversion fails it), and a chunk neither starts nor ends with them (a span of them alone is no chunk)."""

from __future__ import annotations

import re

# Controls, Unicode's format characters (Cf: soft hyphen, zero-width space and joiners, bidirectional marks, word
# joiner and invisible operators, BOM, interlinear annotation marks, tags), the combining grapheme joiner, variation
# selectors and the Hangul fillers. Not the Cf characters that render (Arabic number signs, Egyptian format controls).
_RANGES = (
    (0x00, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x34F, 0x34F), (0x61C, 0x61C), (0x115F, 0x1160), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF),
)  # fmt: skip
INVISIBLE = frozenset(chr(c) for a, b in _RANGES for c in range(a, b + 1))
_SHOWN = re.compile("[^\\s" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _RANGES) + "]")


def visible(text: str) -> bool:
    """Whether `text` shows anything."""
    return _SHOWN.search(text) is not None


def blank(char: str) -> bool:
    """Whether one character shows nothing."""
    return char.isspace() or char in INVISIBLE
