"""HTML tables made ready for markdownify: layout tables become the blocks they hold, and the rows of data tables get
an empty cell wherever a cell above spans down into them.

A page laid out with a `<table>` (a column of links beside the content, as sites of the 1990s were built) holds
headings, paragraphs and other tables in its cells. As a pipe table it becomes one row of glued text whose headings
are lost, so a table with a heading, a table, several paragraphs or a code block of several lines in one of its cells
(or `role="presentation"`) is unwrapped: its rows and cells become `<div>`s. texi2html (GNU manuals built before
Texinfo 5: gettext's) indents every example with a table, an empty cell then the `<pre>`: a pipe table's cell is one
line, so the example's lines ran together into one. A list or one paragraph per cell stays a data table: Sphinx puts
a `<p>` in every cell.

markdownify writes each `<tr>`'s cells in order and ignores `rowspan`: the rows below a spanning cell come out short,
their cells under the wrong columns. They get an empty cell where the span covers them (the DOCX converter also
writes a merged cell's text once), and every row is filled up to the widest row's width.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, Tag

LAYOUT_PARAGRAPHS = 2
"""A table with this many paragraphs in one cell is page layout, not data."""
MAX_COLSPAN = 1000
"""markdownify's own cap on `colspan`."""

_HEADING = re.compile(r"^h[1-6]$")
_PARTS = frozenset({"caption", "colgroup", "col", "thead", "tbody", "tfoot", "tr", "td", "th"})
_LAYOUT_ROLES = frozenset({"presentation", "none"})


@dataclass(slots=True)
class _Table:
    tag: Tag
    layout: bool
    parts: list[Tag] = field(default_factory=list)  # its own rows, cells, sections: not a nested table's
    rows: list[Tag] = field(default_factory=list)


def prepare(soup: BeautifulSoup, root: Tag) -> None:
    """Unwrap the layout tables under `root` and pad the rows of the others (see the module's docstring)."""
    for table in _tables(root):
        if table.layout:
            for tag in (table.tag, *table.parts):
                tag.name = "div"
        else:
            _pad(soup, table.rows)


def _tables(root: Tag) -> list[_Table]:
    """Every table under `root` with its own parts, and whether it is layout. One walk with an explicit stack
    that knows each element's nearest table and cell: a page of tables nested thousands deep stays linear."""
    found: list[_Table] = []
    paragraphs: dict[int, int] = {}  # id(cell) → paragraphs seen in it
    stack: list[tuple[Tag, _Table | None, Tag | None]] = [(root, None, None)]
    while stack:
        tag, table, cell = stack.pop()
        if tag.name == "table":
            if table is not None and cell is not None:
                table.layout = True  # a table inside a cell
            table, cell = _Table(tag, str(tag.get("role") or "").lower() in _LAYOUT_ROLES), None
            found.append(table)
        elif table is not None and tag.name in _PARTS:
            table.parts.append(tag)
            if tag.name == "tr":
                table.rows.append(tag)
            elif tag.name in ("td", "th"):
                cell = tag
        elif table is not None and cell is not None:
            if _HEADING.match(tag.name) or (tag.name == "pre" and "\n" in tag.get_text().strip("\n")):
                table.layout = True
            elif tag.name == "p":
                paragraphs[id(cell)] = paragraphs.get(id(cell), 0) + 1
                table.layout = table.layout or paragraphs[id(cell)] >= LAYOUT_PARAGRAPHS
        stack.extend((child, table, cell) for child in reversed(tag.contents) if isinstance(child, Tag))
    return found


def _pad(soup: BeautifulSoup, rows: list[Tag]) -> None:
    """Give `rows` an empty cell under every cell that spans down into them, then fill each row up to the widest
    row's width. At most as many cells are added as the table has: a hostile `rowspan` on a huge table adds no more."""
    cells = [[c for c in row.children if isinstance(c, Tag) and c.name in ("td", "th")] for row in rows]
    budget = sum(map(len, cells))
    covered: dict[int, int] = {}  # column → rows below that a spanning cell still covers
    widths: list[int] = []
    for i, (row, own) in enumerate(zip(rows, cells, strict=True)):
        column = 0
        for cell in own:
            column = _fill(soup, row, cell, column, covered)
            width, down = _span(cell, "colspan", MAX_COLSPAN), _span(cell, "rowspan", len(rows) - i) - 1
            if down > 0:
                budget -= width * down  # the empty cells this span will take, put in by `_fill`
                if budget < 0:
                    return
                covered.update(dict.fromkeys(range(column, column + width), down))
            column += width
        while covered and column <= max(covered):
            if covered.get(column, 0) > 0:
                column = _fill(soup, row, None, column, covered)
                continue
            if budget == 0:  # a column this row leaves out, left of one that a cell above covers
                return
            budget -= 1
            row.append(soup.new_tag("td"))
            column += 1
        widths.append(column)
    widest = max(widths, default=0)
    for row, width in zip(rows, widths, strict=False):
        if widest - width > budget:
            return
        budget -= widest - width
        row.extend([soup.new_tag("td") for _ in range(widest - width)])


def _fill(soup: BeautifulSoup, row: Tag, before: Tag | None, column: int, covered: dict[int, int]) -> int:
    """Put an empty cell (before `before`, else at the row's end) for each column from `column` on that a cell above
    covers; the next free column."""
    while covered.get(column, 0) > 0:
        covered[column] -= 1
        if covered[column] == 0:
            del covered[column]
        empty = soup.new_tag("td")
        if before is None:
            row.append(empty)
        else:
            before.insert_before(empty)
        column += 1
    return column


def _span(cell: Tag, attribute: str, most: int) -> int:
    """`colspan` or `rowspan` as HTML reads it, at most `most`: 1 unless a number; `rowspan="0"` spans to the end."""
    value = str(cell.get(attribute) or "").strip()
    if not value.isdigit():
        return 1
    n = int(value)
    return min(most, n) if n > 0 else (most if attribute == "rowspan" else 1)
