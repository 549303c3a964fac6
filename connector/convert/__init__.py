"""Conversion: raw bytes → `Document` (Markdown text, block map, units, page map).

One module per input format; each produces Markdown (or keeps the user's text as it is) and its blocks:
- Markdown: the text unchanged, blocks from a CommonMark parser;
- plain text / reStructuredText: the text unchanged, paragraphs and underlined headings;
- HTML: visible text converted to Markdown, then parsed as Markdown;
- PDF: see `pdf.py`.
Anything the document itself is to blame for raises a `DocumentError` subclass with a message saying what.
"""

from __future__ import annotations

from pathlib import PurePath

from connector.convert import html, markdown, pdf, structure, text
from connector.errors import ConversionError, UnsupportedDocument
from connector.models import Document

MIME_BY_SUFFIX = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/x-rst",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}
SUPPORTED = ", ".join(sorted(MIME_BY_SUFFIX))


def mime_for_path(path: str | PurePath) -> str | None:
    return MIME_BY_SUFFIX.get(PurePath(path).suffix.lower())


def convert(data: bytes, mime_type: str, encoding: str = "o200k_base") -> Document:
    mime = (mime_type or "").split(";")[0].strip().lower()
    if mime == "application/pdf":
        document = pdf.convert(data, encoding)
    elif mime in ("text/markdown", "text/x-markdown"):
        source = decode(data)
        document = Document(source, markdown.blocks(source))
    elif mime in ("text/html", "application/xhtml+xml"):
        converted = html.to_markdown(decode(data))
        if not converted.strip():
            raise ConversionError("HTML page has no visible text")
        converted = markdown.split_large_tables(converted, encoding=encoding)
        document = Document(converted, markdown.blocks(converted))
    elif mime.startswith("text/"):
        source = decode(data)
        document = Document(source, text.blocks(source))
    else:
        raise UnsupportedDocument(
            f"unsupported MIME type {mime_type!r}: expected text/plain, text/x-rst, text/markdown, text/html "
            "or application/pdf"
        )
    return Document(
        document.markdown,
        document.blocks,
        document.page_starts,
        structure.units(document.markdown, document.blocks, encoding),
    )


def decode(data: bytes) -> str:
    if b"\x00" in data:
        raise ConversionError("file contains NUL bytes: binary data, not text")
    try:
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not valid UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from exc
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    if not source.strip():
        raise ConversionError("document is empty")
    return source
