"""PDF → Markdown with a page map, through PyMuPDF.

Per page: the layout's text blocks in reading order, one paragraph each. Across pages: running headers and footers
(a line repeated at the top or bottom of several pages, digits ignored) and bare page numbers are removed (pages
live in the page map); words hyphenated across a line break are joined; ligatures are unfolded; Unicode NFC. The
result is parsed as Markdown for its blocks, each tagged with its page.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from connector.convert import markdown
from connector.errors import ConversionError
from connector.models import Document

EDGE_LINES = 3  # paragraphs at the top and at the bottom of a page where running headers and footers live
MIN_REPEATS = 3  # the same text at a page edge on this many pages is furniture, not content
BAND_SHARE = 0.5  # a short edge paragraph at a vertical position shared by this share of pages is furniture
BAND_POINTS = 4.0  # vertical positions are compared in bands this many points high
SHORT_CHARS = 120

_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
_HYPHENATED = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")
_PAGE_NUMBER = re.compile(r"^\s*(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,6})(?:\s*(?:/|of)\s*\d{1,4})?\s*$", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


def convert(data: bytes) -> Document:
    import pymupdf

    try:
        pdf = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises several types (FileDataError, RuntimeError) for broken files
        raise ConversionError(f"cannot open PDF: {exc}") from exc
    with pdf:
        if pdf.needs_pass:
            raise ConversionError("PDF is encrypted (password required)")
        if pdf.page_count == 0:
            raise ConversionError("PDF has no pages")
        try:
            pages = [_page_paragraphs(page) for page in pdf]
        except Exception as exc:
            raise ConversionError(f"cannot read PDF: {exc}") from exc
    pages = remove_furniture(pages)
    parts: list[str] = []
    page_starts: list[int] = []
    offset = 0
    for paragraphs in pages:
        page_starts.append(offset)
        # Pages are separated by a blank line so that a page break is also a paragraph break.
        piece = "\n\n".join(paragraphs) + "\n\n" if paragraphs else ""
        parts.append(piece)
        offset += len(piece)
    text = "".join(parts)
    if not text.strip():
        raise ConversionError(f"PDF has no extractable text ({len(pages)} pages; scanned images?)")
    starts = tuple(page_starts)
    return Document(text, markdown.blocks(text, starts), starts)


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    top: float  # y of the block's top edge, in points
    bottom: float


def _page_paragraphs(page) -> list[Para]:
    paragraphs = []
    for _x0, y0, _x1, y1, raw, _n, kind in page.get_text("blocks", sort=True):
        if kind != 0:  # image block
            continue
        cleaned = clean(raw)
        if cleaned:
            paragraphs.append(Para(cleaned, y0, y1))
    return paragraphs


def clean(text: str) -> str:
    # NFKC would also fold ligatures, but it rewrites too much (superscripts, fractions): NFC plus a ligature map.
    text = unicodedata.normalize("NFC", text.replace("\x00", "")).translate(_LIGATURES)
    text = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return _HYPHENATED.sub("", text)


def remove_furniture(pages: list[list[Para]]) -> list[list[str]]:
    """Drop running headers/footers and bare page numbers from the edges of each page; return paragraph texts.

    Furniture is recognised two ways: the same text (digits ignored) near a page edge on several pages, or a short
    first or last paragraph whose vertical position recurs on most pages (a running footer such as
    "4.4. Debian changelog 21" changes its words with every section but never its place). Only paragraphs at the
    edges are ever removed, peeled off from the outside in."""

    def key(text: str) -> str:
        return _DIGITS.sub("#", " ".join(text.split())).lower()

    def band(p: Para) -> tuple[int, int]:
        return round(p.top / BAND_POINTS), round(p.bottom / BAND_POINTS)

    def edge(paragraphs: list[Para]) -> list[Para]:
        return paragraphs[:EDGE_LINES] + paragraphs[-EDGE_LINES:] if len(paragraphs) > 2 * EDGE_LINES else paragraphs

    texts: Counter[str] = Counter()
    bands: Counter[tuple[int, int]] = Counter()
    for paragraphs in pages:
        texts.update({key(p.text) for p in edge(paragraphs)})
        bands.update({band(p) for p in paragraphs[:1] + paragraphs[-1:]})
    enough_pages = len(pages) >= MIN_REPEATS
    repeated = {k for k, n in texts.items() if n >= MIN_REPEATS} if enough_pages else set()
    fixed = {b for b, n in bands.items() if n >= max(MIN_REPEATS, BAND_SHARE * len(pages))} if enough_pages else set()

    def furniture(p: Para) -> bool:
        short = len(p.text) <= SHORT_CHARS and p.text.count("\n") <= 1
        return bool(_PAGE_NUMBER.match(p.text)) or key(p.text) in repeated or (short and band(p) in fixed)

    out = []
    for paragraphs in pages:
        # Peel furniture off both ends, at most EDGE_LINES paragraphs each: a header is only ever at the top.
        kept = list(paragraphs)
        for _ in range(EDGE_LINES):
            if kept and furniture(kept[0]):
                kept.pop(0)
            if kept and furniture(kept[-1]):
                kept.pop()
        out.append([p.text for p in kept])
    return out
