"""Office documents → Markdown: DOCX (python-docx, its body XML read in `docx_xml.py`), PPTX (python-pptx), ODT
(its `content.xml`, read with lxml).

Structure comes from what the formats record, never from looks: a DOCX heading is a paragraph whose style (or the
style it is based on) is named "Heading N" or "Title" (style *names*: a French Word calls the style id `Titre1`);
list items are paragraphs with numbering or a list style; an ODT paragraph whose style sets a fixed-pitch font is a
line of code (consecutive ones a code block); tables become pipe tables, a merged cell's text once, a
table inside a cell as text in that cell. A PPTX slide is a page: its title placeholder is a `##` heading, its text
frames lists by indent level, its tables pipe tables, its speaker notes a paragraph. Titles come from the core
properties, else the first heading.

Text is all of it and nothing glued: a line break (Word's `w:br`, ODF's `text:line-break`, PowerPoint's Shift+Enter)
stays a line break in a paragraph and is a space where Markdown needs one line (headings, list items, cells); tabs
and ODF's `text:s` are spaces. A text box or frame is a paragraph of its own after the one it is anchored in.
Footnotes and endnotes are Markdown footnotes, as the PDF converter writes them: `[^n]` where cited, numbered in
citation order, and a `[^n]: text` paragraph after the block that cites them (after the list, for a list item).
"""

from __future__ import annotations

import functools
import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator

from connector.convert import docx_xml, markdown, sniff
from connector.errors import ConversionError, DocumentError
from connector.models import Document
from connector.visible import visible

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
# what would start a block of its own at the start of a line: a heading, quote, table row, rule or setext underline,
# list item, code fence, or an HTML block that runs on past a blank line (a paragraph's line breaks are kept, so any
# of its lines may start one)
_MARKDOWN_START = re.compile(
    r"^(?=[#>|]|[-=]{3,}\s*$|(?:[*_][ \t]*){3,}$|[-*+]\s|\d{1,9}[.)]\s|`{3}|~{3}"
    r"|<[!?]|(?i:<(?:script|pre|style|textarea)\b))",
    re.MULTILINE,
)


def _escape(text: str) -> str:
    return _MARKDOWN_START.sub("\\\\", text)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|")


def pipe_table(rows: list[list[str]]) -> str:
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [[_cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def _lines(text: str) -> str:
    """A paragraph's text with its line breaks kept, one per line break (a blank line would end the paragraph), and
    other whitespace collapsed."""
    return "\n".join(line for line in (" ".join(raw.split()) for raw in text.splitlines()) if line)


def _notes_after_lists(parts: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """Footnotes cited in a list item wait until the list ends: between two items they would cut the list in two."""
    held: list[tuple[str, str]] = []
    previous = ""
    for kind, text in parts:
        if kind == "note" and previous == "item":
            held.append((kind, text))
            continue
        if held and kind != "item" and text.strip():
            yield from held
            held = []
        yield kind, text
        previous = kind if text.strip() else previous
    yield from held


def _join(parts: Iterable[tuple[str, str]]) -> str:
    """Markdown from (kind, text) parts: consecutive list items one list, everything else a paragraph of its own."""
    out: list[str] = []
    previous = ""
    for kind, text in parts:
        if not text.strip():
            continue
        out.append(("\n" if kind == "item" and previous == "item" else "\n\n" if out else "") + text)
        previous = kind
    return "".join(out) + "\n" if out else ""


def _document(
    text: str,
    title: str | None,
    what: str,
    page_starts: tuple[int, ...] = (),
    placeholders: frozenset[str] = frozenset(),
) -> Document:
    """`placeholders`: headings the converter made up ("Slide 1" for a slide with no title), never the title."""
    if not visible(text):
        raise ConversionError(f"{what} has no text")
    blocks = markdown.blocks(text, page_starts)
    title = " ".join((title or "").split()) or markdown.first_title(text, blocks)
    return Document(text, blocks, page_starts, title=None if title in placeholders else title)


def _open_error(what: str, exc: Exception) -> ConversionError:
    return ConversionError(f"cannot open {what}: {type(exc).__name__}: {exc}")


def _guarded(what: str, zipped: bool = True):
    """A converter whose library may raise anything on a malformed file (KeyError, ValueError, XML errors,
    NotImplementedError, zlib.error, struct.error): the document is to blame, so it fails as a `ConversionError`. A
    `zipped` format's archive is checked for a zip bomb first."""

    def wrap(convert: Callable[[bytes], Document]) -> Callable[[bytes], Document]:
        @functools.wraps(convert)
        def guarded(data: bytes) -> Document:
            if zipped:
                sniff.check_archive(data, what)
            try:
                return convert(data)
            except (DocumentError, RecursionError, MemoryError):
                raise
            except Exception as exc:
                raise ConversionError(f"cannot read {what}: {type(exc).__name__}: {exc}") from exc

        return guarded

    return wrap


# --- DOCX ---------------------------------------------------------------------------------------------------------


@_guarded("DOCX")
def docx(data: bytes) -> Document:
    import docx as python_docx

    try:
        doc = python_docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises KeyError, ValueError, BadZipFile, PackageNotFoundError, ...
        raise _open_error("DOCX", exc) from exc
    # `paragraph.style` looks the style up among all of them on every call (50k paragraphs: minutes): once per id.
    styles = {s.style_id: s for s in doc.styles}
    default = next((s for s in doc.styles if s.type == 1 and s._element.default), None)  # WD_STYLE_TYPE.PARAGRAPH
    kinds: dict[str | None, tuple[int | None, str]] = {}
    parts: list[tuple[str, str]] = []
    for block in docx_xml.blocks(doc):
        if isinstance(block, docx_xml.Para):
            style_id = block.p.style
            if style_id not in kinds:
                style = styles.get(style_id, default) if style_id else default
                kinds[style_id] = (_docx_heading_level(style), ((style.name if style is not None else "") or ""))
            parts.append(_docx_paragraph(block, *kinds[style_id]))
        elif isinstance(block, docx_xml.Table):
            parts.append(("table", pipe_table(block.rows)))
        else:
            parts.append(("note", f"[^{block.label}]: {block.text}"))
    return _document(_join(_notes_after_lists(parts)), doc.core_properties.title, "DOCX document")


def _docx_paragraph(para, level: int | None, style: str) -> tuple[str, str]:
    text = " ".join(para.text.split())
    if not text:
        return "paragraph", ""
    if level is not None:
        return "heading", "#" * level + " " + text
    numbered = para.p.pPr is not None and para.p.pPr.numPr is not None
    if numbered or style.lower().startswith("list"):
        marker = "1." if "number" in style.lower() else "-"
        return "item", f"{marker} {text}"
    return "paragraph", _escape(_lines(para.text))


def _docx_heading_level(style) -> int | None:
    seen = 0
    while style is not None and seen < 10:  # a custom heading style is based on a built-in one
        name = (style.name or "").strip()
        if name.lower() == "title":
            return 1
        if m := _HEADING_STYLE.match(name):
            return min(int(m.group(1)), 6)
        style, seen = style.base_style, seen + 1
    return None


# --- PPTX ---------------------------------------------------------------------------------------------------------


@_guarded("PPTX")
def pptx(data: bytes) -> Document:
    from pptx import Presentation

    try:
        deck = Presentation(io.BytesIO(data))
    except Exception as exc:
        raise _open_error("PPTX", exc) from exc
    pages: list[str] = []
    untitled: set[str] = set()
    for number, slide in enumerate(deck.slides, 1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
        if not title:
            untitled.add(title := f"Slide {number}")
        parts: list[tuple[str, str]] = [("heading", f"## {title}")]
        for shape in _shapes(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            parts += _pptx_shape(shape)
        if slide.has_notes_slide and (notes := slide.notes_slide.notes_text_frame) is not None:
            parts.append(("paragraph", _escape(" ".join(notes.text.split()))))
        pages.append(_join(parts))
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + 1
    return _document(
        "\n".join(pages), deck.core_properties.title, "PPTX presentation", tuple(starts), frozenset(untitled)
    )


def _shapes(shapes) -> Iterator:
    """Shapes in reading order (top to bottom, then left to right), groups opened."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _pptx_shape(shape) -> list[tuple[str, str]]:
    if shape.has_table:
        return [("table", pipe_table([[c.text for c in row.cells] for row in shape.table.rows]))]
    if not shape.has_text_frame:
        return []
    # `p.text`, not its runs: it has fields (slide number, date) and gives a line break (Shift+Enter) as "\v"
    paragraphs = [(p.level, p.text) for p in shape.text_frame.paragraphs if p.text.strip()]
    if len(paragraphs) == 1 and paragraphs[0][0] == 0:
        return [("paragraph", _escape(_lines(paragraphs[0][1])))]
    return [("item", "  " * level + "- " + " ".join(text.split())) for level, text in paragraphs]


# --- ODT ----------------------------------------------------------------------------------------------------------

_ODF = {
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
}


def open_odf(data: bytes, what: str):
    """An OpenDocument package's `content.xml` and `styles.xml` (None if absent) parsed, and its `dc:title`: shared
    by ODT and ODP."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, huge_tree=True)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            content = etree.fromstring(z.read("content.xml"), parser)
            meta = z.read("meta.xml") if "meta.xml" in z.namelist() else None
            styles = etree.fromstring(z.read("styles.xml"), parser) if "styles.xml" in z.namelist() else None
    except (zipfile.BadZipFile, KeyError, etree.XMLSyntaxError) as exc:
        raise _open_error(what, exc) from exc
    title = None
    if meta:  # broken metadata is the document's fault too ("cannot read ...", from `_guarded`)
        found = etree.fromstring(meta, etree.XMLParser(resolve_entities=False)).find(".//dc:title", _ODF)
        title = found.text if found is not None else None
    return content, styles, title


@_guarded("ODT")
def odt(data: bytes) -> Document:
    content, styles, title = open_odf(data, "ODT")
    body = content.find(".//office:text", _ODF)
    code = _odt_code_styles([content] if styles is None else [styles, content])
    parts = list(_odt_notes(body, code)) if body is not None else []
    return _document(_join(_code_blocks(_notes_after_lists(parts))), title, "ODT document")


def _odt_code_styles(trees: list) -> frozenset[str]:
    """The paragraph styles set in a fixed-pitch font (its font face declared `style:font-pitch="fixed"`), by
    themselves or by the style they inherit from: the styles of code listings ("Preformatted Text", or a manual's own
    `P_code`). The style records it, not the paragraph: direct formatting of one paragraph does not count. None when
    the default style is fixed-pitch: a document typed all in Courier is no listing."""
    st = f"{{{_ODF['style']}}}"
    fixed = {face.get(st + "name") for tree in trees for face in tree.iter(st + "font-face")
             if face.get(st + "font-pitch") == "fixed"}  # fmt: skip
    parent: dict[str, str] = {}
    font: dict[str, str] = {}
    for tree in trees:
        for style in (*tree.iter(st + "default-style"), *tree.iter(st + "style")):
            if style.get(st + "family") != "paragraph":
                continue
            name = style.get(st + "name") or ""  # "": the default style, every chain's end
            parent[name] = style.get(st + "parent-style-name") or "" if name else ""
            props = style.find(st + "text-properties")
            if props is not None and props.get(st + "font-name"):
                font[name] = props.get(st + "font-name")

    def monospace(name: str) -> bool:
        for _ in range(20):  # a chain of parents, never a loop
            if name in font or not name:
                return font.get(name) in fixed
            name = parent.get(name, "")
        return False

    if monospace("") or monospace("Standard"):
        return frozenset()
    return frozenset(name for name in parent if name and monospace(name))


def _code_blocks(parts: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """Consecutive code lines as one fenced code block; empty lines inside it kept, those around it dropped."""
    lines: list[str] = []
    for kind, text in (*parts, ("end", "")):
        if kind == "code":
            lines.append(text)
            continue
        if any(line.strip() for line in lines):
            code = "\n".join(lines).strip("\n")
            fence = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`{3,}", code))])
            yield "code", f"{fence}\n{code}\n{fence}"
        lines = []
        if kind != "end":
            yield kind, text


MAX_CODE_SPACES = 200
"""A code line's `text:s` stands for at most this many spaces: deep enough for any indentation, where a count of
millions in a few bytes of XML would fill the memory."""
_XML_SPACE = re.compile(r"[ \t\r\n]+")  # ODF collapses white space in text as HTML does; text:s, text:tab say more


def _odt(name: str) -> str:
    prefix, local = name.split(":")
    return f"{{{_ODF[prefix]}}}{local}"


_ODT_CONTAINERS = frozenset(map(_odt, ("text:section", "text:soft-page-break", "draw:frame", "draw:text-box")))
_ODT_PARAGRAPHS = frozenset(map(_odt, ("text:p", "text:h")))
_ODT_SPACE, _ODT_TAB, _ODT_BREAK, _ODT_NOTE, _ODT_NOTE_BODY = map(
    _odt, ("text:s", "text:tab", "text:line-break", "text:note", "text:note-body")
)
_ODT_FRAME, _ODT_TEXT_BOX, _ODT_TABLE, _ODT_COMMENT = map(
    _odt, ("draw:frame", "draw:text-box", "table:table", "office:annotation")
)


def _odt_notes(body, code: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """The parts of an ODT body, each followed by the notes it cites as Markdown footnotes, numbered in order; the
    paragraphs in a style of `code` are code lines."""
    notes: list[str] = []
    done = 0
    for part in _odt_parts(body, notes, 0, code):
        yield part
        yield from (("note", f"[^{n + 1}]: {notes[n]}") for n in range(done, len(notes)))
        done = len(notes)


def _odt_parts(el, notes: list[str], depth: int, code: frozenset[str]) -> Iterator[tuple[str, str]]:
    t, tb = f"{{{_ODF['text']}}}", f"{{{_ODF['table']}}}"
    for child in el:
        if child.tag == t + "h":
            level = int(child.get(t + "outline-level") or 1)
            text = " ".join(_odt_inline(child, notes, None).split())
            yield ("heading", "#" * min(max(level, 1), 6) + " " + text) if text else ("heading", "")
        elif child.tag == t + "p" and child.get(t + "style-name") in code:
            # as paragraphs, each line was a block of its own, Markdown-escaped (a `#` prompt as `\#`), unindented
            text = _odt_inline(child, notes, None, code=True)
            yield from (("code", line.strip(" ").replace("\0", " ")) for line in text.split("\n"))
        elif child.tag == t + "p":
            frames: list = []
            yield "paragraph", _escape(_lines(_odt_inline(child, notes, frames)))
            for frame in frames:  # a frame's paragraphs are paragraphs of their own, after the one it is anchored in
                yield from _odt_parts(frame, notes, depth, code)
        elif child.tag == t + "list":
            for item in child.iter(t + "list-item"):
                texts = [" ".join(_odt_inline(p, notes, None).split()) for p in item if p.tag in (t + "p", t + "h")]
                if any(texts):
                    yield "item", "  " * min(depth, 4) + "- " + " ".join(x for x in texts if x)
        elif child.tag == tb + "table":
            yield "table", pipe_table(_odt_rows(child, notes))
        elif child.tag in _ODT_CONTAINERS or child.tag.endswith("}index-body"):
            yield from _odt_parts(child, notes, depth, code)


def _odt_rows(table, notes: list[str]) -> list[list[str]]:
    # direct rows and cells only (rows may sit in header-rows/row-groups): an inner table is part of its cell's text
    rows = table.xpath("./table:table-row | ./*/table:table-row", namespaces=_ODF)
    return [[" ".join(_odt_inline(c, notes, None).split()) for c in r.xpath("./table:table-cell", namespaces=_ODF)]
            for r in rows]  # fmt: skip


def _odt_inline(el, notes: list[str], frames: list | None, code: bool = False) -> str:
    """The text under `el`: `text:s` a space, `text:tab` a tab, `text:line-break` a line break, a note its `[^n]`
    (its text appended to `notes`), a paragraph inside on lines of its own, comments nothing. Frames anchored here go
    to `frames`, to be read after the paragraph; with no list (in a heading, list item or cell) their text is read in
    place. In `code`, `text:s` is as many NULs as it counts spaces (no XML text holds a NUL): the caller strips the
    spaces of the XML's layout around each line, then makes them the spaces that indent code."""
    out = [_XML_SPACE.sub(" ", el.text or "")]
    for child in el:
        tag = child.tag
        if tag == _ODT_SPACE and code:
            count = child.get(f"{{{_ODF['text']}}}c") or "1"
            out.append("\0" * min(int(count) if count.isdigit() else 1, MAX_CODE_SPACES))
        elif tag in (_ODT_SPACE, _ODT_TAB):
            out.append(" " if tag == _ODT_SPACE else "\t")  # runs of spaces are collapsed anyway: one is enough
        elif tag == _ODT_BREAK:
            out.append("\n")
        elif tag == _ODT_NOTE:
            body = child.find(_ODT_NOTE_BODY)
            text = " ".join(_odt_inline(body, notes, None).split()) if body is not None else ""
            notes += [text] if text else []
            out.append(f"[^{len(notes)}]" if text else "")
        elif tag == _ODT_FRAME and frames is not None:
            frames.append(child)
        elif tag == _ODT_FRAME:
            out += ["\n" + _odt_inline(box, notes, None) for box in child.findall(_ODT_TEXT_BOX)]
        elif tag == _ODT_TABLE:
            out.append("\n" + docx_xml.nested_table(_odt_rows(child, notes)) + "\n")
        elif isinstance(tag, str) and tag != _ODT_COMMENT:  # spans, links, fields; not XML comments
            paragraph = tag in _ODT_PARAGRAPHS
            out.append("\n" * paragraph + _odt_inline(child, notes, frames, code) + "\n" * paragraph)
        out.append(_XML_SPACE.sub(" ", child.tail or ""))
    return "".join(out)
