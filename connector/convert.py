"""Conversion: raw bytes → `Document` (Markdown text, blocks, page map, headings).

This is the skeleton converter: text and Markdown pass through unchanged, PDFs become one paragraph per layout block
with a page map. Structure-aware conversion (tables, running headers, footnotes) replaces the PDF path later; the
`Document` it returns keeps the same shape.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePath

from connector.errors import ConversionError, UnsupportedDocument
from connector.models import Block, Document

MIME_BY_SUFFIX = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
    ".pdf": "application/pdf",
}

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def mime_for_path(path: str | PurePath) -> str | None:
    return MIME_BY_SUFFIX.get(PurePath(path).suffix.lower())


def convert(data: bytes, mime_type: str) -> Document:
    """Convert one document; raises `DocumentError` subclasses for anything the document itself is to blame for."""
    mime = (mime_type or "").split(";")[0].strip().lower()
    if mime == "application/pdf":
        return _from_pdf(data)
    if mime in ("text/markdown", "text/x-markdown"):
        return _from_text(data, markdown=True)
    if mime.startswith("text/"):
        return _from_text(data, markdown=False)
    raise UnsupportedDocument(
        f"unsupported MIME type {mime_type!r}: expected text/plain, text/markdown or application/pdf"
    )


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise ConversionError("file contains NUL bytes: binary data, not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not valid UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _from_text(data: bytes, *, markdown: bool) -> Document:
    text = _decode(data)
    if not text.strip():
        raise ConversionError("document is empty")
    headings = _markdown_headings(text) if markdown else ()
    return Document(markdown=text, blocks=paragraph_blocks(text), headings=headings)


def _from_pdf(data: bytes) -> Document:
    import pymupdf

    try:
        pdf = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises several types (FileDataError, RuntimeError) for broken files
        raise ConversionError(f"cannot open PDF: {exc}") from exc
    with pdf:
        if pdf.needs_pass:
            raise ConversionError("PDF is encrypted (password required)")
        parts: list[str] = []
        page_starts: list[int] = []
        offset = 0
        try:
            for page in pdf:
                page_starts.append(offset)
                paragraphs = [
                    _clean_pdf_text(b[4]) for b in page.get_text("blocks", sort=True) if b[6] == 0 and b[4].strip()
                ]
                page_text = "\n\n".join(p for p in paragraphs if p)
                # Pages are separated by a blank line so that a page break is also a paragraph break.
                piece = page_text + "\n\n"
                parts.append(piece)
                offset += len(piece)
        except Exception as exc:
            raise ConversionError(f"cannot read PDF page {len(page_starts)}: {exc}") from exc
    markdown = "".join(parts)
    if not markdown.strip():
        raise ConversionError(f"PDF has no extractable text ({len(page_starts)} pages; scanned images?)")
    return Document(markdown=markdown, blocks=paragraph_blocks(markdown), page_starts=tuple(page_starts))


def _clean_pdf_text(text: str) -> str:
    # NFKC would also fold ligatures, but it rewrites too much (superscripts, fractions); NFC plus an explicit
    # ligature map is the narrow fix.
    text = unicodedata.normalize("NFC", text.replace("\x00", "")).translate(_LIGATURES)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})


def paragraph_blocks(text: str) -> tuple[Block, ...]:
    """Non-blank spans separated by blank lines, trimmed of surrounding whitespace."""
    blocks: list[Block] = []
    pos = 0
    for m in _PARAGRAPH_BREAK.finditer(text):
        _append_trimmed(blocks, text, pos, m.start())
        pos = m.end()
    _append_trimmed(blocks, text, pos, len(text))
    return tuple(blocks)


def _append_trimmed(blocks: list[Block], text: str, start: int, end: int) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        blocks.append(Block(start, end))


def _markdown_headings(text: str) -> tuple[tuple[int, int, str], ...]:
    fences = [m.start() for m in _FENCE.finditer(text)]
    headings = []
    for m in _MD_HEADING.finditer(text):
        inside_fence = sum(1 for f in fences if f < m.start()) % 2 == 1
        if not inside_fence:
            headings.append((m.start(), len(m.group(1)), m.group(2).strip()))
    return tuple(headings)
