"""Office documents → Markdown: DOCX (python-docx), PPTX (python-pptx), ODT (its `content.xml`, read with lxml).

Structure comes from what the formats record, never from looks: a DOCX heading is a paragraph whose style (or the
style it is based on) is named "Heading N" or "Title" (style *names*: a French Word calls the style id `Titre1`);
list items are paragraphs with numbering or a list style; tables become pipe tables, a merged cell's text once.
A PPTX slide is a page: its title placeholder is a `##` heading, its text frames lists by indent level, its tables
pipe tables, its speaker notes a paragraph. Titles come from the core properties, else the first heading.
"""

from __future__ import annotations

import functools
import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator

from connector.convert import markdown, sniff
from connector.errors import ConversionError, DocumentError
from connector.models import Document
from connector.visible import visible

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_MARKDOWN_START = re.compile(r"^(?=[#>|]|[-=]{3,}\s*$|[-*+]\s|\d{1,9}[.)]\s)", re.MULTILINE)


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


def _document(text: str, title: str | None, what: str, page_starts: tuple[int, ...] = ()) -> Document:
    if not visible(text):
        raise ConversionError(f"{what} has no text")
    blocks = markdown.blocks(text, page_starts)
    title = " ".join((title or "").split()) or markdown.first_title(text, blocks)
    return Document(text, blocks, page_starts, title=title)


def _open_error(what: str, exc: Exception) -> ConversionError:
    return ConversionError(f"cannot open {what}: {type(exc).__name__}: {exc}")


def _guarded(what: str):
    """A converter whose library may raise anything on a malformed file (KeyError, ValueError, XML errors,
    NotImplementedError, zlib.error): the document is to blame, so it fails as a `ConversionError`. The archive is
    checked for a zip bomb first."""

    def wrap(convert: Callable[[bytes], Document]) -> Callable[[bytes], Document]:
        @functools.wraps(convert)
        def guarded(data: bytes) -> Document:
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
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        doc = python_docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises KeyError, ValueError, BadZipFile, PackageNotFoundError, ...
        raise _open_error("DOCX", exc) from exc
    # `paragraph.style` looks the style up among all of them on every call (50k paragraphs: minutes): once per id.
    styles = {s.style_id: s for s in doc.styles}
    default = next((s for s in doc.styles if s.type == 1 and s._element.default), None)  # WD_STYLE_TYPE.PARAGRAPH
    kinds: dict[str | None, tuple[int | None, str]] = {}
    parts: list[tuple[str, str]] = []
    for item in doc.iter_inner_content():
        if isinstance(item, Paragraph):
            style_id = item._p.style
            if style_id not in kinds:
                style = styles.get(style_id, default) if style_id else default
                kinds[style_id] = (_docx_heading_level(style), ((style.name if style is not None else "") or ""))
            parts.append(_docx_paragraph(item, *kinds[style_id]))
        elif isinstance(item, Table):
            parts.append(("table", pipe_table(_docx_rows(item))))
    return _document(_join(parts), doc.core_properties.title, "DOCX document")


def _docx_paragraph(p, level: int | None, style: str) -> tuple[str, str]:
    text = " ".join(p.text.split())
    if not text:
        return "paragraph", ""
    if level is not None:
        return "heading", "#" * level + " " + text
    numbered = p._p.pPr is not None and p._p.pPr.numPr is not None
    if numbered or style.lower().startswith("list"):
        marker = "1." if "number" in style.lower() else "-"
        return "item", f"{marker} {text}"
    return "paragraph", _escape(text)


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


def _docx_rows(table) -> list[list[str]]:
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:  # a horizontally merged cell repeats in `row.cells`: its text once
            cells.append("" if cell._tc is previous else cell.text)
            previous = cell._tc
        rows.append(cells)
    return rows


# --- PPTX ---------------------------------------------------------------------------------------------------------


@_guarded("PPTX")
def pptx(data: bytes) -> Document:
    from pptx import Presentation

    try:
        deck = Presentation(io.BytesIO(data))
    except Exception as exc:
        raise _open_error("PPTX", exc) from exc
    pages: list[str] = []
    for number, slide in enumerate(deck.slides, 1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
        parts: list[tuple[str, str]] = [("heading", f"## {title or f'Slide {number}'}")]
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
    return _document("\n".join(pages), deck.core_properties.title, "PPTX presentation", tuple(starts))


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
    paragraphs = [(p.level, " ".join("".join(r.text for r in p.runs).split())) for p in shape.text_frame.paragraphs]
    paragraphs = [(level, text) for level, text in paragraphs if text]
    if len(paragraphs) == 1 and paragraphs[0][0] == 0:
        return [("paragraph", _escape(paragraphs[0][1]))]
    return [("item", "  " * level + "- " + text) for level, text in paragraphs]


# --- ODT ----------------------------------------------------------------------------------------------------------

_ODF = {
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
}


@_guarded("ODT")
def odt(data: bytes) -> Document:
    from lxml import etree

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            content = etree.fromstring(z.read("content.xml"), etree.XMLParser(resolve_entities=False, huge_tree=True))
            meta = z.read("meta.xml") if "meta.xml" in z.namelist() else None
    except (zipfile.BadZipFile, KeyError, etree.XMLSyntaxError) as exc:
        raise _open_error("ODT", exc) from exc
    title = None
    if meta:
        found = etree.fromstring(meta, etree.XMLParser(resolve_entities=False)).find(".//dc:title", _ODF)
        title = found.text if found is not None else None
    body = content.find(".//office:text", _ODF)
    parts = list(_odt_parts(body)) if body is not None else []
    return _document(_join(parts), title, "ODT document")


def _odt_text(el) -> str:
    return " ".join("".join(el.itertext()).split())


def _odt_parts(el, depth: int = 0) -> Iterator[tuple[str, str]]:
    t, tb = f"{{{_ODF['text']}}}", f"{{{_ODF['table']}}}"
    for child in el:
        if child.tag == t + "h":
            level = int(child.get(t + "outline-level") or 1)
            text = _odt_text(child)
            yield ("heading", "#" * min(max(level, 1), 6) + " " + text) if text else ("heading", "")
        elif child.tag == t + "p":
            yield "paragraph", _escape(_odt_text(child))
        elif child.tag == t + "list":
            for item in child.iter(t + "list-item"):
                texts = [_odt_text(p) for p in item if p.tag in (t + "p", t + "h")]
                if any(texts):
                    yield "item", "  " * min(depth, 4) + "- " + " ".join(x for x in texts if x)
        elif child.tag == tb + "table":
            # direct rows and cells only (rows may sit in header-rows/row-groups): an inner table stays in its cell
            rows = child.xpath("./table:table-row | ./*/table:table-row", namespaces=_ODF)
            yield "table", pipe_table([[_odt_text(c) for c in r.xpath("./table:table-cell", namespaces=_ODF)]
                                       for r in rows])  # fmt: skip
        elif child.tag in (t + "section", t + "soft-page-break") or child.tag.endswith("}index-body"):
            yield from _odt_parts(child, depth)
