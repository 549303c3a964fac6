"""Tables in PDF text blocks, rebuilt from the geometry of their lines.

PyMuPDF's layout puts each table cell on its own line, so a table arrives as a text block whose lines sit side by
side: several lines share a baseline. That is what this module looks for, with or without ruling lines (booktabs
tables have no vertical rules; `find_tables` needs them or costs ~1 s a page, see the note on issue 4). A block is
a table when at least `MIN_ROWS` of its visual rows hold two or more lines and those rows carry most of its lines;
monospaced blocks (code listings, program output) are left alone.

Columns are the x-intervals of the lines in multi-cell rows, merged where they overlap. A visual row with two or
more cells starts a table row; a single line continues the row it belongs to (`table_rows`: the row above for a
cell set at the top of its row, the row below for the first lines of a cell centred in it), so a cell wrapped over
several lines stays one cell (when two cells of a row wrap together, the wrapped part becomes a row of its own:
text kept, row boundary approximate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIN_LINES = 6
MIN_ROWS = 3
MULTI_SHARE = 0.3  # share of the block's lines that must sit in multi-cell rows (wrapped cells are single)
GAP_TOLERANCE = 1.0  # points: gaps between lines this close are even (rounding in the PDF's coordinates)
MONOSPACED = 8  # PyMuPDF span flag bit
# Fonts that embed without the monospaced flag: Latin Modern Mono, Computer Modern typewriter, Courier, ...
MONO_FONT = re.compile(r"mono|courier|typewriter|consol|^cmtt|^sfmono|inconsolata", re.IGNORECASE)
_LEADER = re.compile(r"(?:\s*\.){4,}\s*")  # table-of-contents dot leaders


@dataclass(frozen=True, slots=True)
class Line:
    x0: float
    top: float
    x1: float
    bottom: float
    text: str
    raw: dict = field(compare=False, repr=False)

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2


@dataclass(frozen=True, slots=True)
class Table:
    text: str  # a Markdown pipe table
    top: float
    bottom: float


def segment(blocks: list[dict], clean) -> list[dict | Table]:
    """The page's text blocks in order, with each table (one block, or a run of adjacent row-like blocks: some
    layouts give each table row its own block) replaced by a `Table`."""
    out: list[dict | Table] = []
    i = 0
    while i < len(blocks):
        j = i + 1
        while (
            j < len(blocks)
            and _row_like(blocks[j - 1])
            and _row_like(blocks[j])
            and _adjacent(blocks[j - 1], blocks[j])
        ):
            j += 1
        group = blocks[i:j]
        found = block_table([line for block in group for line in block["lines"]], clean)
        if found is None and len(group) > 1:
            j = i + 1
            found = block_table(blocks[i]["lines"], clean)
        if found is None:
            out.append(blocks[i])
        else:
            before, table, after = found
            out += [block_of(before)] if before else []
            out.append(table)
            if after:  # the rest of the block: prose, or another table below a spanning line
                blocks = [*blocks[:j], block_of(after), *blocks[j:]]
        i = j
    return out


def block_of(raw_lines: list[dict]) -> dict:
    """A text block made of some of a block's lines (the prose around a table that shares its block)."""
    boxes = [line["bbox"] for line in raw_lines]
    bbox = (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))
    return {"type": 0, "bbox": bbox, "lines": raw_lines}


def _row_like(block: dict) -> bool:
    return any(len(row) >= 2 for row in visual_rows(lines_of(block["lines"])))


def _adjacent(upper: dict, lower: dict) -> bool:
    line_height = max(upper["lines"][-1]["bbox"][3] - upper["lines"][-1]["bbox"][1], 1.0)
    return lower["bbox"][1] - upper["bbox"][3] < line_height


def lines_of(raw: list[dict]) -> list[Line]:
    out = []
    for line in raw:
        text = "".join(span["text"] for span in line["spans"]).strip()
        if text:
            out.append(Line(*line["bbox"], text, line))
    return out


def block_table(raw_lines: list[dict], clean) -> tuple[list[dict], Table, list[dict]] | None:
    """PyMuPDF lines as (lines before the table, the table, lines after it), or None when they are not laid out
    as a table. The table ends at the first line that spans its columns (prose after it, or a title inside
    it); lines before it are prose of the same block. `clean` normalises cell text."""
    mono, chars = 0, 0
    for line in raw_lines:
        for span in line["spans"]:
            n = len(span["text"].strip())
            chars += n
            mono += n if span["flags"] & MONOSPACED or MONO_FONT.search(span["font"]) else 0
    lines = lines_of(raw_lines)
    if len(lines) < MIN_LINES or mono > 0.5 * max(chars, 1):
        return None
    rows = visual_rows(lines)
    multi = [row for row in rows if len(row) >= 2]
    if len(multi) < MIN_ROWS or sum(len(row) for row in multi) < MULTI_SHARE * len(lines):
        return None
    columns = column_intervals(multi)
    if len(columns) < 2:
        return None
    spanning = [_spans_columns(row, columns) for row in rows]
    # A lone line that starts left of every column before the first row is the end of the paragraph above, not a
    # cell: GMPL's "... which may be used in numeric expres-" / "sions:" made "sions:" the table's header row.
    first = next(i for i, row in enumerate(rows) if not spanning[i] and not _left_of_columns(row, columns))
    last = spanning.index(True, first) - 1 if True in spanning[first:] else len(rows) - 1
    before = [line.raw for row in rows[:first] for line in row]
    after = [line.raw for row in rows[last + 1 :] for line in row]
    rows = rows[first : last + 1]
    table: list[list[list[str]]] = []
    for group in table_rows(rows, columns):
        cells: list[list[str]] = [[] for _ in columns]
        for line in (line for row in group for line in row):
            cells[column_of(line, columns)].append(line.text)
        table.append(cells)
    rendered = [[_cell("\n".join(parts), clean) for parts in row] for row in table]
    rendered = [row for row in rendered if any(row)]
    if len(rendered) < 2 or _enumerated(rendered):
        return None
    header, body = rendered[0], rendered[1:]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    top, bottom = min(line.top for row in rows for line in row), max(line.bottom for row in rows for line in row)
    return before, Table("\n".join(out), top, bottom), after


def table_rows(rows: list[list[Line]], columns: list[tuple[float, float]]) -> list[list[list[Line]]]:
    """The visual rows grouped into table rows: each row with lines in two or more columns starts one, and the
    other rows (a wrapped cell's other lines) between two such rows go to the one they belong to.

    A cell set at the top of its row wraps below it; one centred vertically (DocBook/dblatex) wraps above and below,
    so its first line sits nearer the row after than the row before (debian-reference: sudo's description began in
    vim's row). So when the last lone line before a row overlaps it in height, the lone lines between the two rows
    are split at the widest vertical gap in the run, counting from the upper row's bottom to the lower row's top
    (an even gap keeps them with the upper row); otherwise they all stay with the upper row, as top-aligned cells
    need (a line set taller by a formula must not cut a paragraph beside a margin note). Lone lines before the
    first such row open a row of their own, unless the last of them overlaps that row (a centred cell in the
    first row)."""
    rows = _side_by_side(rows, columns)
    anchors = [i for i, row in enumerate(rows) if len({column_of(line, columns) for line in row}) >= 2]
    if not anchors:
        return [rows]
    leading = rows[: anchors[0]]
    if leading and _gap(leading[-1], rows[anchors[0]]) < 0:
        groups, pending = [], leading
    else:
        groups, pending = ([leading] if leading else []), []
    for k, i in enumerate(anchors):
        end = anchors[k + 1] if k + 1 < len(anchors) else len(rows)
        lone = rows[i + 1 : end]
        if k + 1 < len(anchors) and lone and _gap(lone[-1], rows[end]) < -GAP_TOLERANCE:
            bounds = [rows[i], *lone, rows[end]]
            gaps = [_gap(upper, lower) for upper, lower in zip(bounds, bounds[1:], strict=False)]
            widest = max(gaps)
            split = max(n for n, gap in enumerate(gaps) if gap >= widest - GAP_TOLERANCE)
        else:
            split = len(lone)
        groups.append([*pending, rows[i], *lone[:split]])
        pending = lone[split:]
    return groups


def _side_by_side(rows: list[list[Line]], columns: list[tuple[float, float]]) -> list[list[Line]]:
    """The rows with each lone line that overlaps, in height, a line of the row above in another column joined to
    that row: a two-line cell centred beside a one-line cell shares no middle with it (debian-reference's
    `id` beside "afficher l'identité … / associés"), but its lines overlap it."""
    out: list[list[Line]] = []
    for row in rows:
        if out and len(row) == 1 and any(_overlap(line, row[0], columns) for line in out[-1]):
            out[-1] = [*out[-1], row[0]]
        else:
            out.append(row)
    return out


def _overlap(line: Line, other: Line, columns: list[tuple[float, float]]) -> bool:
    """The two lines overlap in height and sit in different columns."""
    beside = column_of(line, columns) != column_of(other, columns)
    return beside and min(line.bottom, other.bottom) - max(line.top, other.top) > GAP_TOLERANCE


def _gap(upper: list[Line], lower: list[Line]) -> float:
    return min(line.top for line in lower) - max(line.bottom for line in upper)


_ENUMERATOR = re.compile(r"^(?:\(?(?:\d{1,3}|[a-z]|[ivx]{1,5})[.)]|[•◦▪▸►‣∙·–-])$", re.IGNORECASE)


def _enumerated(rows: list[list[str]]) -> bool:
    """A numbered or bulleted list whose markers sit apart from their items (slides, hanging indents): two
    "columns", the first of nothing but markers."""
    markers = [row[0] for row in rows if row[0]]
    if len(rows[0]) != 2 or len(markers) < 2:
        return False
    counted = [str(n) for n in range(1, len(markers) + 1)]  # beamer's numbers in balls have no "." after them
    return all(_ENUMERATOR.match(m) for m in markers) or markers == counted


def _left_of_columns(row: list[Line], columns: list[tuple[float, float]]) -> bool:
    return len(row) == 1 and row[0].x0 < columns[0][0] - GAP_TOLERANCE


def _spans_columns(row: list[Line], columns: list[tuple[float, float]]) -> bool:
    """A lone line that runs across the gap between two columns: prose, not a cell."""
    if len(row) != 1:
        return False
    line = row[0]
    gaps = [(left_end, right_start) for (_, left_end), (right_start, _) in zip(columns, columns[1:], strict=False)]
    return any(line.x0 < gap_start and line.x1 > gap_end for gap_start, gap_end in gaps)


def visual_rows(lines: list[Line]) -> list[list[Line]]:
    """Lines grouped by shared vertical middle, top to bottom, each row left to right."""
    rows: list[list[Line]] = []
    for line in sorted(lines, key=lambda item: (item.middle, item.x0)):
        if rows and abs(rows[-1][0].middle - line.middle) < 0.4 * (line.bottom - line.top):
            rows[-1].append(line)
        else:
            rows.append([line])
    return [sorted(row, key=lambda item: item.x0) for row in rows]


def column_intervals(rows: list[list[Line]]) -> list[tuple[float, float]]:
    spans = sorted((line.x0, line.x1) for row in rows for line in row)
    merged: list[list[float]] = []
    for x0, x1 in spans:
        if merged and x0 < merged[-1][1] - 1:
            merged[-1][1] = max(merged[-1][1], x1)
        else:
            merged.append([x0, x1])
    return [(a, b) for a, b in merged]


def column_of(line: Line, columns: list[tuple[float, float]]) -> int:
    """The column whose interval holds the line's left edge (else the last one starting before it)."""
    best = 0
    for i, (x0, _x1) in enumerate(columns):
        if x0 <= line.x0 + 1:
            best = i
    return best


def _cell(text: str, clean) -> str:
    text = " ".join(clean(_LEADER.sub(" ", text)).split())
    return text.replace("\\", "\\\\").replace("|", "\\|")
