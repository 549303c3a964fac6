"""A DOCX body's text, read from its XML: what python-docx's `iter_inner_content()`, `Paragraph.text` and
`cell.text` miss.

Those see only the body's direct paragraphs and tables and a paragraph's direct runs, so Word's wrappers hid text:
content controls (`w:sdt`, block, row, cell or inline), tracked insertions (`w:ins`, `w:moveTo`), fields, smart
tags, text boxes and tables nested in a cell. Here every wrapper is opened; what is no longer (or never was) visible
text is skipped: tracked deletions (`w:del`, `w:moveFrom`), field codes (`w:instrText`), properties. A text box
(`w:txbxContent`) is a paragraph of its own after the one it is anchored in (in a cell, part of the cell's text);
of an `mc:AlternateContent`, which holds the same box twice (DrawingML and VML), one branch is read. Footnotes and
endnotes become Markdown footnotes: `[^n]` where they are cited, numbered in citation order, and a `Note` after the
block that cites them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lxml import etree

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_MATH_TEXT = "{http://schemas.openxmlformats.org/officeDocument/2006/math}t"
_FOOTNOTES = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes"
_ENDNOTES = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/endnotes"


def _w(*names: str) -> frozenset[str]:
    return frozenset(f"{{{W}}}{name}" for name in names)


_P, _TBL, _TR, _TC, _T = (f"{{{W}}}{name}" for name in ("p", "tbl", "tr", "tc", "t"))
_BOX = f"{{{W}}}txbxContent"
_ALTERNATE, _CHOICE, _FALLBACK = (f"{{{_MC}}}{name}" for name in ("AlternateContent", "Choice", "Fallback"))
_TAB = _w("tab", "ptab")
_BREAK = _w("br", "cr")
_HYPHEN = f"{{{W}}}noBreakHyphen"
_NOTE_REFERENCE = {f"{{{W}}}footnoteReference": "footnote", f"{{{W}}}endnoteReference": "endnote"}
# deleted text, field codes, properties (a deleted paragraph mark sits in w:pPr/w:rPr/w:del), the note's own mark
_SKIPPED = _w("del", "moveFrom", "delText", "instrText", "delInstrText", "pPr", "rPr", "sdtPr", "sdtEndPr", "tblPr",
              "tblGrid", "trPr", "tcPr", "footnoteRef", "endnoteRef", "commentReference")  # fmt: skip
# block-level wrappers whose children are paragraphs and tables (or rows, or cells) as if they stood in their place
_WRAPPERS = _w("sdt", "sdtContent", "customXml", "ins", "moveTo", "smartTag")


@dataclass(frozen=True)
class Para:
    """A paragraph: its `w:p` (whose style and numbering say heading or list item) and its text, line breaks as
    "\\n", tabs as "\\t", footnote references as `[^n]`."""

    p: etree._Element
    text: str


@dataclass(frozen=True)
class Table:
    rows: list[list[str]]


@dataclass(frozen=True)
class Note:
    """A footnote's or endnote's text, after the block that cites it as `[^label]`."""

    label: str
    text: str


class _Notes:
    """The notes of a document by (kind, id); each gets its label when first cited, and waits until the block that
    cites it is out."""

    def __init__(self, bodies: dict[tuple[str, str], etree._Element]) -> None:
        self.bodies = bodies
        self.labels: dict[tuple[str, str], str] = {}  # "" for a note with no text (or one being read)
        self.pending: list[Note] = []
        self.count = 0

    def cite(self, kind: str, note_id: str) -> str:
        key = (kind, note_id)
        if key not in self.labels:
            self.labels[key] = ""  # a note that cites itself finds it here, not in an endless recursion
            body = self.bodies.get(key)
            text = " ".join(_inline(body, self, None).split()) if body is not None else ""
            if text:  # a reference to a missing or empty note points to nothing
                self.count += 1
                self.labels[key] = str(self.count)
                self.pending.append(Note(self.labels[key], text))
        return f"[^{self.labels[key]}]" if self.labels[key] else ""

    def flush(self) -> Iterator[Note]:
        notes, self.pending = self.pending, []
        yield from notes


def blocks(doc) -> Iterator[Para | Table | Note]:
    """The paragraphs, tables and notes of a python-docx `Document`'s body, in reading order."""
    notes = _Notes(_note_bodies(doc))
    for block in _blocks(doc.element.body, notes):
        yield block
        yield from notes.flush()


def _note_bodies(doc) -> dict[tuple[str, str], etree._Element]:
    bodies = {}
    parser = etree.XMLParser(resolve_entities=False, huge_tree=True)
    for rel in doc.part.rels.values():
        kind = {_FOOTNOTES: "footnote", _ENDNOTES: "endnote"}.get(rel.reltype)
        if kind is None or rel.is_external:
            continue
        for note in etree.fromstring(rel.target_part.blob, parser).iter(f"{{{W}}}{kind}"):
            bodies[(kind, note.get(f"{{{W}}}id") or "")] = note  # separators are never cited
    return bodies


def _blocks(el: etree._Element, notes: _Notes) -> Iterator[Para | Table]:
    for child in el:
        if child.tag == _P:
            boxes: list[etree._Element] = []
            yield Para(child, _inline(child, notes, boxes))
            for box in boxes:
                yield from _blocks(box, notes)
        elif child.tag == _TBL:
            yield Table(_rows(child, notes))
        elif child.tag in _WRAPPERS:
            yield from _blocks(child, notes)
        elif child.tag == _ALTERNATE and (branch := _branch(child)) is not None:
            yield from _blocks(branch, notes)


def _inline(el: etree._Element, notes: _Notes, boxes: list[etree._Element] | None) -> str:
    """The text under `el` in document order. Text boxes go to `boxes` to be read after the paragraph; with no list
    (in a cell, in a note) their text is read in place. A paragraph inside ends with a line break."""
    out: list[str] = []
    for child in el:
        tag = child.tag
        if tag in (_T, _MATH_TEXT):
            out.append(child.text or "")
        elif tag in _TAB:
            out.append("\t")
        elif tag in _BREAK:
            out.append("\n")
        elif tag == _HYPHEN:
            out.append("-")
        elif tag in _NOTE_REFERENCE:
            out.append(notes.cite(_NOTE_REFERENCE[tag], child.get(f"{{{W}}}id") or ""))
        elif tag in _SKIPPED or not isinstance(tag, str):  # comments and processing instructions have no str tag
            continue
        elif tag == _BOX and boxes is not None:
            boxes.append(child)
        elif tag == _ALTERNATE:
            branch = _branch(child)
            out.append(_inline(branch, notes, boxes) if branch is not None else "")
        elif tag == _TBL:
            out.append("\n" + nested_table(_rows(child, notes)) + "\n")
        else:  # runs, hyperlinks, fields, content controls, insertions, drawings: what they hold
            paragraph = tag == _P  # a paragraph in a cell, note or text box: on lines of its own
            out.append("\n" * paragraph + _inline(child, notes, boxes) + "\n" * paragraph)
    return "".join(out)


def _branch(alternate: etree._Element) -> etree._Element | None:
    """The branch of an `mc:AlternateContent` to read: its first `mc:Choice` (Word's DrawingML), else its
    `mc:Fallback` (VML). Both hold the same text box; reading both would say it twice."""
    return alternate.find(_CHOICE) if alternate.find(_CHOICE) is not None else alternate.find(_FALLBACK)


def _rows(tbl: etree._Element, notes: _Notes) -> list[list[str]]:
    """A table's rows of cell texts, one per grid column: a horizontally merged cell's text once, then empty cells;
    a vertically merged one repeated down its rows (as python-docx gives them); rows and cells in content controls
    included."""
    rows: list[list[str]] = []
    above: dict[int, str] = {}  # grid column → text of the cell there in the row above
    for tr in _children(tbl, _TR):
        cells: list[str] = [""] * _grid_before(tr)
        for tc in _children(tr, _TC):
            merged = _continues_merge(tc)
            text = above.get(len(cells), "") if merged else " ".join(_inline(tc, notes, None).split())
            cells += [text] + [""] * (_grid_span(tc) - 1)
        above = dict(enumerate(cells))
        rows.append(cells)
    return rows


def _children(el: etree._Element, tag: str) -> Iterator[etree._Element]:
    for child in el:
        if child.tag == tag:
            yield child
        elif child.tag in _WRAPPERS:
            yield from _children(child, tag)


def _tc_property(tc: etree._Element, name: str) -> etree._Element | None:
    return tc.find(f"{{{W}}}tcPr/{{{W}}}{name}")


def _grid_span(tc: etree._Element) -> int:
    span = _tc_property(tc, "gridSpan")
    value = span.get(f"{{{W}}}val") if span is not None else None
    return min(max(int(value), 1), 64) if value and value.isdigit() else 1  # Word's limit is 63 columns


def _grid_before(tr: etree._Element) -> int:
    before = tr.find(f"{{{W}}}trPr/{{{W}}}gridBefore")
    value = before.get(f"{{{W}}}val") if before is not None else None
    return min(int(value), 64) if value and value.isdigit() else 0


def _continues_merge(tc: etree._Element) -> bool:
    merge = _tc_property(tc, "vMerge")
    return merge is not None and merge.get(f"{{{W}}}val", "continue") == "continue"


def nested_table(rows: list[list[str]]) -> str:
    """A table inside a cell, as text that fits in the cell: cells separated by "; ", rows by " / "."""
    return " / ".join("; ".join(c for c in row if c) for row in rows if any(row))
