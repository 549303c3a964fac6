"""Conversion: raw bytes → `Document` (Markdown text, block map, units, page map).

One module per input format; each produces Markdown (or keeps the user's text as it is) and its blocks:
- Markdown: the text unchanged, blocks from a CommonMark parser;
- plain text / reStructuredText: the text unchanged, paragraphs and underlined headings;
- HTML: visible text converted to Markdown, then parsed as Markdown;
- PDF: see `pdf.py`.
Bytes become text in `sniff.py` (byte-order marks, UTF-16, what a file labelled PDF really is).
Anything the document itself is to blame for raises a `DocumentError` subclass with a message saying what.
"""

from __future__ import annotations

from pathlib import PurePath

from connector.convert import html, markdown, pdf, sniff, structure, text
from connector.convert.sniff import decode
from connector.errors import ConversionError, UnsupportedDocument
from connector.models import Document
from connector.settings import ChunkingSettings

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


def convert(data: bytes, mime_type: str, settings: ChunkingSettings) -> Document:
    """`data` as a `Document`; `settings` give the token encoding (units, table splits) and the table size limit.

    A file labelled PDF is opened as a PDF only when its bytes are one (`%PDF-` in the first 1024 bytes, as PDF
    readers accept): PyMuPDF would otherwise open HTML or text as a document of its own and render that. Anything
    else is sniffed: HTML goes to the HTML converter, text to the text converter, other bytes fail as "not a PDF
    (looks like ...)". A document nested too deeply for any converter fails as a `ConversionError`; no
    `RecursionError` escapes."""
    try:
        return _convert(data, mime_type, settings)
    except RecursionError as exc:
        raise ConversionError("document is nested too deeply to convert (RecursionError)") from exc


def _convert(data: bytes, mime_type: str, settings: ChunkingSettings) -> Document:
    mime = (mime_type or "").split(";")[0].strip().lower()
    if mime == "application/pdf":
        if sniff.is_pdf(data):
            document = pdf.convert(data, settings)
        else:
            source = sniff.not_a_pdf(data)
            document = _from_html(source, settings) if sniff.looks_like_html(source) else _from_text(source)
    elif mime in ("text/markdown", "text/x-markdown"):
        source = decode(data)
        document = Document(source, markdown.blocks(source))
    elif mime in ("text/html", "application/xhtml+xml"):
        document = _from_html(decode(data), settings)
    elif mime.startswith("text/"):
        document = _from_text(decode(data))
    else:
        raise UnsupportedDocument(
            f"unsupported MIME type {mime_type!r}: expected text/plain, text/x-rst, text/markdown, text/html "
            "or application/pdf"
        )
    return Document(
        document.markdown,
        document.blocks,
        document.page_starts,
        structure.units(document.markdown, document.blocks, settings.encoding),
    )


def _from_html(source: str, settings: ChunkingSettings) -> Document:
    converted = html.to_markdown(source)
    if not converted.strip():
        raise ConversionError("HTML page has no visible text")
    converted = markdown.split_large_tables(converted, settings.table_max_tokens, settings.encoding)
    return Document(converted, markdown.blocks(converted))


def _from_text(source: str) -> Document:
    return Document(source, text.blocks(source))
