"""Section headings of PDFs laid out as manual pages (groff `-man`, `man -Tpdf`, bash's own bash.pdf).

A man page's section names (NAME, SYNOPSIS, DESCRIPTION; .SH) and subsection names (.SS) are bold lines at body size
or barely larger, set left of the body text, which is indented under them. Neither the size rule nor the numbered
rule of `pdf.render` sees them. What marks them is the hanging layout: a short bold line whose following text starts
further right, set left of the document's usual left edge (`body_left`). An option in bold (`--all`) hangs over its
description the same way but starts at the usual left edge, so it stays text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from connector.convert import pdf_tables
from connector.convert.pdf_tables import Table

INDENT = 10.0  # points: the text after a heading starts at least this much further right
CENTRED = 3.0  # points: two lines whose centres are this close are centred on the same axis
OUTDENT = 5.0  # points: a heading starts at least this much left of the document's usual left edge
MAX_CHARS = 60
MAX_WORDS = 8


def split_headings(blocks: list[dict | Table], bold: Callable[[dict], bool]) -> list[tuple[dict | Table, bool]]:
    """The text blocks (and tables, left as they are), each paired with whether it is a hanging bold line; a block
    that opens with one (groff puts a section's name and its first paragraph in one block) is cut in two."""
    out: list[tuple[dict | Table, bool]] = []
    for n, block in enumerate(blocks):
        lines = [] if isinstance(block, Table) else block["lines"]
        if not lines or not _bold_line(lines[0], bold):
            out.append((block, False))
        elif len(lines) > 1:
            if _hangs(lines[0], lines[1], bold):
                out += [(pdf_tables.block_of(lines[:1]), True), (pdf_tables.block_of(lines[1:]), False)]
            else:
                out.append((block, False))
        else:
            after = blocks[n + 1] if n + 1 < len(blocks) else None
            follows = after["lines"][0] if isinstance(after, dict) and after["lines"] else None
            out.append((block, follows is not None and _hangs(lines[0], follows, bold)))
    return out


def _bold_line(line: dict, bold: Callable[[dict], bool]) -> bool:
    spans = [s for s in line["spans"] if s["text"].strip()]
    text = "".join(s["text"] for s in spans).strip()
    short = 0 < len(text) <= MAX_CHARS and len(text.split()) <= MAX_WORDS
    return bool(spans) and short and all(bold(s) for s in spans) and not text.endswith((".", ",", ":", ";"))


def _hangs(line: dict, after: dict, bold: Callable[[dict], bool]) -> bool:
    """`after` starts below `line` and further right, not on the same centre (the second line of a centred title
    starts further right too) and, when it is bold as well, runs past `line`'s end (the second line of a wrapped
    heading starts past the heading's number, but ends before the filled first line does)."""
    (x0, _, x1, bottom), (after_x0, after_top, after_x1, _) = line["bbox"], after["bbox"]
    centred = abs((x0 + x1) - (after_x0 + after_x1)) / 2 < CENTRED
    wrapped = after_x1 <= x1 and all(bold(s) for s in after["spans"] if s["text"].strip())
    return after_x0 >= x0 + INDENT and after_top >= bottom - 1 and not centred and not wrapped


def body_left(lefts: Counter[float]) -> float:
    """The left edge most of the text starts at (`lefts`: characters by rounded left edge)."""
    return lefts.most_common(1)[0][0] if lefts else 0.0


def levels(section_lefts: set[float]) -> dict[float, int]:
    """Heading rank by indentation: sections (.SH) start further left than subsections (.SS)."""
    return {left: rank for rank, left in enumerate(sorted(section_lefts))}


def is_section(hanging: bool, left: float, body: float) -> bool:
    return hanging and body > 0 and left <= body - OUTDENT
