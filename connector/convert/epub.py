"""EPUB → Markdown with EbookLib: the spine's XHTML documents in reading order, each through the HTML converter
(main content, headings, tables, code), joined; the title from the package's Dublin Core metadata."""

from __future__ import annotations

import io
import warnings

from connector.convert import html, markdown
from connector.convert.office import _guarded
from connector.errors import ConversionError
from connector.models import Document
from connector.visible import visible


@_guarded("EPUB")
def convert(data: bytes) -> Document:
    from ebooklib import ITEM_DOCUMENT, epub

    try:
        with warnings.catch_warnings():  # EbookLib warns about options whose defaults will change
            warnings.simplefilter("ignore")
            book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    except Exception as exc:  # EbookLib raises EpubException, KeyError, BadZipFile, XML errors, ...
        raise ConversionError(f"cannot open EPUB: {type(exc).__name__}: {exc}") from exc
    parts = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ITEM_DOCUMENT:
            continue
        page = html.convert(item.get_content().decode("utf-8", "replace"))
        if page.markdown.strip():
            parts.append(page.markdown.strip())
    text = "\n\n".join(parts) + "\n" if parts else ""
    if not visible(text):
        raise ConversionError("EPUB has no text")
    titles = book.get_metadata("DC", "title")
    title = " ".join(str(titles[0][0]).split()) if titles and titles[0][0] else None
    blocks = markdown.blocks(text)
    return Document(text, blocks, title=title or markdown.first_title(text, blocks))
