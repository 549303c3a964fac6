"""Page layout of PDF text blocks: reading order across columns, and the navigation pages that are not content.

Columns. PyMuPDF's `sort=True` orders blocks top to bottom, then left to right, which interleaves the columns of a
two-column paper (headings 1, 4, 2, 5, ...). Columns are found per page from the geometry of its lines: the x-axis is
covered by the lines of the blocks narrower than `NARROW_SHARE` of the page, and an x-range inside the text that
(almost) no line covers is a gutter. A block that crosses a gutter (title, abstract, a wide figure or table) is
full-width: it splits the page into bands, and each band is read column by column, each column top to bottom.
A page is only reordered when its column text is most of the page and every column holds a real share of it, so
a one-column page with an indented list or a two-cell table keeps PyMuPDF's order.

Navigation. Tables of contents, lists of figures and back-of-book indexes are lists of page numbers: they rank high
for any question that names a section (every title is there) and answer none. A block is navigation when most of
its visual rows are dot-leader entries (`Title . . . . 29`), or when nearly all are entries ending in page numbers
and they are ordered as such lists are (page numbers ascending: a contents list; terms alphabetical: an index).
On a page that is mostly navigation, its short left-overs ("Contents", the index's letter headings) go too.
"""

from __future__ import annotations

import bisect
import re

from connector.convert.pdf_tables import MONO_FONT, MONOSPACED, block_of, lines_of, visual_rows

NARROW_SHARE = 0.55  # blocks narrower than this share of the page width are column candidates
BIN_POINTS = 2.0  # the x-axis coverage histogram's bin width
GUTTER_COVERAGE = 0.15  # a bin covered by at most this share of the busiest bin's lines is empty
MIN_GUTTER_POINTS = 6.0
MIN_COLUMN_TEXT = 0.1  # every column holds at least this share of the column text
MIN_COLUMNS_TEXT = 0.4  # and the column text is at least this share of the page's text
CROSS_POINTS = 3.0  # a block must reach this far past both edges of a gutter to cross it
COLUMN_FILL = 0.6  # lines of column text fill at least this share of their column's width, on average
INSIDE_SHARE = 0.7  # a block is split into columns only when this share of its lines stay inside one
SIMILAR_WIDTH = 0.5  # the columns of a page layout are of about the same width
MIN_COLUMN_LINES = 5
MIN_COLUMN_WIDTH = 0.2  # share of the text's width: at most five columns
PAIR_POINTS = 2.0
MIN_PAIRS = 3
PAIRED_SHARE = 0.5

# dots then page numbers ("Title . . . . 29", "term . . . 13, 15"), or a run of spaced dots whose number is set apart
# (a math ellipsis ". . ." has three)
_LEADER = re.compile(
    r"(?:\.\s*){4,}\s*(?:\d{1,4}|[ivxlc]{1,6})(?:\s*[,–-]\s*\d{1,4})*\s*$|(?:\.\s){5,}|…{3,}", re.IGNORECASE
)
_PAGES = r"(?:\d{1,4}(?:\s*[–-]\s*\d{1,4})?|[ivxlc]{1,6})"
_ENTRY = re.compile(rf"^(?P<term>.*[^\W\d_].*?)[,\s]\s*(?P<pages>{_PAGES}(?:\s*,\s*{_PAGES})*)\s*$", re.IGNORECASE)
# "12.3 45" (a row of a numeric table), "width: 2" (a setting): not entries
_DATA_ROW = re.compile(r"\d[\d.,%]*\s+\d{1,4}\s*$|[:=]\s*\d{1,4}\s*$")
_INDEX_COMMA = re.compile(r",\s*\d{1,4}\s*$")
# "error state, 44, 129": a term, then its pages after a comma (what a data row's numbers are not)
_PAGE_LIST = re.compile(rf"[^\W\d_],\s*{_PAGES}(?:\s*,\s*{_PAGES})+\s*$", re.IGNORECASE)
_BARE = re.compile(rf"^\s*{_PAGES}\s*$", re.IGNORECASE)
ENTRY_MAX_CHARS = 300
NAV_LEADER_SHARE = 0.3
NAV_ENTRY_SHARE = 0.7
NAV_MIN_ROWS = 4
NAV_ORDERED_SHARE = 0.7  # share of neighbouring entries in order (page numbers, or terms A to Z)
NAV_DISTINCT_SHARE = 0.8  # entries name different things
NAV_DISTINCT_PAGES = 0.25  # and refer to more than a few pages (the same number on every row is a value)
NAV_PAGE_SHARE = 0.5  # a page whose text is at least this much navigation loses its short left-overs too
LEFTOVER_WORDS = 3
PROSE_SIZE = 0.95  # text after a contents list set at least this large, relative to the list, is the page's prose


def _bbox(block: dict) -> tuple[float, float, float, float]:
    return tuple(block["bbox"])  # type: ignore[return-value]


def _size(block: dict) -> float:
    """The block's font size, weighted by characters."""
    spans = [(span["size"], len(span["text"].strip())) for line in block["lines"] for span in line["spans"]]
    return sum(size * n for size, n in spans) / max(sum(n for _, n in spans), 1)


def _chars(block: dict) -> int:
    return sum(len(span["text"].strip()) for line in block["lines"] for span in line["spans"])


def reading_order(blocks: list[dict], width: float, height: float) -> list[dict]:
    """`blocks` (PyMuPDF's top-to-bottom order) in reading order: bands between full-width blocks, each read
    column by column. Unchanged when the page has no columns."""
    columns = _columns(blocks, width)
    widths = [b - a for a, b in columns]
    if (
        len(columns) < 2
        or min(widths) < SIMILAR_WIDTH * max(widths)  # a table's label column is no page column
        or min(widths) < MIN_COLUMN_WIDTH * (columns[-1][1] - columns[0][0])  # nor are a numeric table's columns
    ):
        return blocks
    gutters = [(a[1], b[0]) for a, b in zip(columns, columns[1:], strict=False)]

    def crosses(box) -> bool:
        return any(box[0] < g0 - CROSS_POINTS and box[2] > g1 + CROSS_POINTS for g0, g1 in gutters)

    def column(box) -> int:
        middle = (box[0] + box[2]) / 2
        return min(range(len(columns)), key=lambda i: 0 if columns[i][0] <= middle <= columns[i][1] else
                   min(abs(middle - columns[i][0]), abs(middle - columns[i][1])))  # fmt: skip

    pieces: list[tuple[dict, bool]] = []  # (block, full-width)
    for block in blocks:
        pieces += _split(block, crosses, column, columns) if crosses(_bbox(block)) else [(block, False)]
    text = sum(_chars(b) for b in blocks)
    per_column, lines = [0] * len(columns), [0] * len(columns)
    for b, wide in pieces:
        if not wide:
            per_column[column(_bbox(b))] += _chars(b)
            lines[column(_bbox(b))] += len(b["lines"])
    column_text = sum(per_column)
    if (
        column_text < MIN_COLUMNS_TEXT * text
        or min(per_column) < MIN_COLUMN_TEXT * column_text
        or min(lines) < MIN_COLUMN_LINES
        or _paired([b for b, wide in pieces if not wide], column)
    ):
        return blocks
    separators = sorted((b for b, wide in pieces if wide), key=lambda b: _bbox(b)[1])
    tops = [_bbox(w)[1] for w in separators]
    bands: list[list[dict]] = [[] for _ in range(len(separators) + 1)]
    for b, wide in pieces:
        if not wide:
            bands[bisect.bisect_right(tops, _bbox(b)[1])].append(b)
    out: list[dict] = []
    for i, band in enumerate(bands):
        out += sorted(band, key=lambda b: (column(_bbox(b)), _bbox(b)[1], _bbox(b)[0]))
        if i < len(separators):
            out.append(separators[i])
    return out


def _paired(blocks: list[dict], column) -> bool:
    """Blocks side by side row by row (a table whose cells PyMuPDF gave blocks of their own): most blocks of the
    smaller column start level with a block of another column. Columns of text start level now and then."""
    by_column: dict[int, list[float]] = {}
    for b in blocks:
        by_column.setdefault(column(_bbox(b)), []).append(_bbox(b)[1])
    if len(by_column) < 2:
        return False
    smallest = min(by_column, key=lambda c: len(by_column[c]))
    others = [top for c, tops in by_column.items() if c != smallest for top in tops]
    level = sum(any(abs(top - other) <= PAIR_POINTS for other in others) for top in by_column[smallest])
    return level >= MIN_PAIRS and level >= PAIRED_SHARE * len(by_column[smallest])


def _split(block: dict, crosses, column, columns) -> list[tuple[dict, bool]]:
    """A block that crosses a gutter: full-width as it is, unless its lines are column text that PyMuPDF grouped
    across the gutter (lines that each stay in one column and fill most of it); then one block per column, and one
    for the lines that do cross. Table rows (short cells side by side) stay one full-width block."""
    lines = [line for line in block["lines"] if any(span["text"].strip() for span in line["spans"])]
    inside = [line for line in lines if not crosses(line["bbox"])]
    if len(inside) < INSIDE_SHARE * len(lines):  # a paragraph across the page whose last line is short
        return [(block, True)]
    for i, (x0, x1) in enumerate(columns):  # every column's lines fill it, as column text does (table cells don't)
        mine = [line["bbox"][2] - line["bbox"][0] for line in inside if column(line["bbox"]) == i]
        if mine and sum(mine) / len(mine) < COLUMN_FILL * (x1 - x0):
            return [(block, True)]
    out: list[tuple[dict, bool]] = []
    for i in range(len(columns)):
        mine = [line for line in inside if column(line["bbox"]) == i]
        if mine:
            out.append((block_of(mine), False))
    across = [line for line in lines if crosses(line["bbox"])]
    if across:
        out.append((block_of(across), True))
    return out


def _columns(blocks: list[dict], width: float) -> list[tuple[float, float]]:
    """x-ranges of the page's text columns (one range when it has none), from its lines narrower than
    `NARROW_SHARE` of the page (full-width lines, a title or an abstract, would cover every gutter)."""
    lines = [
        line["bbox"]
        for block in blocks
        for line in block["lines"]
        if line["bbox"][2] - line["bbox"][0] < NARROW_SHARE * width
        and any(span["text"].strip() for span in line["spans"])
    ]
    if len(lines) < 4:
        return []
    left, right = min(b[0] for b in lines), max(b[2] for b in lines)
    bins = [0] * (int((right - left) / BIN_POINTS) + 1)
    for x0, _, x1, _ in lines:
        for i in range(int((x0 - left) / BIN_POINTS), int((x1 - left) / BIN_POINTS) + 1):
            bins[min(i, len(bins) - 1)] += 1
    empty = max(bins) * GUTTER_COVERAGE
    gutters: list[float] = []
    i = 0
    while i < len(bins):
        j = i
        while j < len(bins) and bins[j] <= empty:
            j += 1
        if j > i and i > 0 and j < len(bins) and (j - i) * BIN_POINTS >= MIN_GUTTER_POINTS:
            gutters += [left + i * BIN_POINTS, left + j * BIN_POINTS]
        i = max(j, i + 1)
    edges = [left, *gutters, right]
    return list(zip(edges[0::2], edges[1::2], strict=True))


def _rows(block: dict) -> list[str]:
    return [" ".join(line.text for line in row) for row in visual_rows(lines_of(block["lines"]))]


def _leader(row: str) -> re.Match | None:
    """`_LEADER` in the row's last ENTRY_MAX_CHARS characters, where an entry's leader and page numbers end: over a
    whole row of dots the pattern is quadratic (8,000 dots: 2 s; a hostile page can set far more on one line)."""
    return _LEADER.search(row[-ENTRY_MAX_CHARS:])


def is_navigation(block: dict) -> bool:
    """A block of table-of-contents or index entries (see the module docstring)."""
    rows = [r for r in _rows(block) if r.strip()]
    if not rows:
        return False
    leaders = sum(bool(_leader(r)) for r in rows)
    if leaders and leaders >= NAV_LEADER_SHARE * len(rows):
        return True
    if len(rows) < NAV_MIN_ROWS:
        return False
    entries = [m for r in rows if (m := _ENTRY.match(r)) and not _data_row(r)]
    bare = sum(bool(_BARE.match(r)) for r in rows)
    if len(entries) + leaders + bare < NAV_ENTRY_SHARE * len(rows) or len(entries) < 2:
        return False
    # Code and program output end lines with numbers too; an index of commands in typewriter type has "term, 12".
    if _monospaced(block) and sum(bool(_INDEX_COMMA.search(m.group(0))) for m in entries) < 0.5 * len(entries):
        return False
    pages = [_first_page(m.group("pages")) for m in entries]
    terms = ["".join(ch for ch in m.group("term").casefold() if ch.isalnum()) for m in entries]  # "\\action": a
    if len(set(terms)) < NAV_DISTINCT_SHARE * len(terms):  # "test row 1", "test row 2": numbered content
        return False
    if len({p for p in pages if p is not None}) < NAV_DISTINCT_PAGES * len(pages):
        return False  # the same number on every row is a value, not page references
    pairs = len(entries) - 1
    ascending = sum(a <= b for a, b in zip(pages, pages[1:], strict=False) if a is not None and b is not None)
    alphabetical = sum(a <= b for a, b in zip(terms, terms[1:], strict=False))
    return max(ascending, alphabetical) >= NAV_ORDERED_SHARE * pairs


def _monospaced(block: dict) -> bool:
    mono = chars = 0
    for line in block["lines"]:
        for span in line["spans"]:
            n = len(span["text"].strip())
            chars += n
            mono += n if span["flags"] & MONOSPACED or MONO_FONT.search(span["font"]) else 0
    return mono > 0.5 * max(chars, 1)


def _first_page(pages: str) -> int | None:
    m = re.match(r"\d+", pages)
    return int(m.group(0)) if m else None


def drop_navigation(blocks: list[dict]) -> list[dict]:
    """`blocks` without navigation blocks; a page that is mostly navigation also loses its short left-overs."""
    nav = [is_navigation(b) for b in blocks]
    if not any(nav):
        return blocks
    total = sum(_chars(b) for b in blocks)
    if sum(_chars(b) for b, n in zip(blocks, nav, strict=True) if n) < NAV_PAGE_SHARE * total:
        return [b for b, n in zip(blocks, nav, strict=True) if not n]
    # In reading order: what comes before the list is content (a title page above a contents list), but for the
    # list's own heading right before it ("Contents"); what comes after its start is the list's (letters, entries).
    # A list followed by prose is a chapter's own contents (minitoc) on the chapter's first page: the short blocks
    # before it are the chapter's heading ("Chapter 3", "Getting started" in doxygen's manual), kept. Prose is set
    # as large as the list: a footnote under a contents list is not.
    first = nav.index(True)
    last = len(nav) - 1 - nav[::-1].index(True)
    leftovers = [_leftover(_rows(b)) for b in blocks]
    entries = _size(blocks[first])
    after = zip(blocks[last + 1 :], leftovers[last + 1 :], strict=True)
    prose = any(not left and _size(b) >= PROSE_SIZE * entries for b, left in after)
    drop = list(nav)
    i = first - 1
    while i >= 0 and leftovers[i] and not prose:
        drop[i] = True
        i -= 1
    for j in range(first + 1, len(blocks)):
        drop[j] = drop[j] or leftovers[j]
    return [b for b, d in zip(blocks, drop, strict=True) if not d]


def _leftover(rows: list[str]) -> bool:
    """On a navigation page: a heading ("Contents", "B") or an entry on its own ("3 Debian Releases 3")."""
    if len(" ".join(rows).split()) <= LEFTOVER_WORDS:
        return True
    return all(_leader(r) or _BARE.match(r) or (_ENTRY.match(r) and not _data_row(r)) for r in rows)


def _data_row(row: str) -> bool:
    # `_PAGE_LIST` is tried at every letter: only on rows as short as index entries are (a hostile PDF's row of
    # 8,000 "i," took seconds).
    return bool(_DATA_ROW.search(row)) and not (len(row) <= ENTRY_MAX_CHARS and _PAGE_LIST.search(row))
