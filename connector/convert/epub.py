"""EPUB → Markdown with EbookLib: the spine's XHTML documents in reading order, each through the HTML converter
(main content, headings, tables, code), joined; the title from the package's Dublin Core metadata."""

from __future__ import annotations

import io
import warnings
import zipfile

from connector.convert import html, markdown
from connector.convert.office import _guarded
from connector.errors import ConversionError
from connector.models import Document
from connector.visible import visible

_CONTAINER = "META-INF/container.xml"
_OPF_NS = "{http://www.idpf.org/2007/opf}"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"


@_guarded("EPUB")
def convert(data: bytes) -> Document:
    from ebooklib import ITEM_DOCUMENT, epub

    try:
        with warnings.catch_warnings():  # EbookLib warns about options whose defaults will change
            warnings.simplefilter("ignore")
            book = epub.read_epub(io.BytesIO(_without_fragment_hrefs(data)), options={"ignore_ncx": True})
    except Exception as exc:  # EbookLib raises EpubException, KeyError, BadZipFile, XML errors, ...
        raise ConversionError(f"cannot open EPUB: {type(exc).__name__}: {exc}") from exc
    parts = []
    seen = set()  # one file listed by several manifest items (SiSU's `chapter.xhtml#o8`) is read once
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ITEM_DOCUMENT or item.file_name in seen:
            continue
        seen.add(item.file_name)
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


def _without_fragment_hrefs(data: bytes) -> bytes:
    """The EPUB with `#fragment`s cut from its manifest hrefs. SiSU (Debian's live-manual EPUBs) lists every section
    anchor as a manifest item, `href="about-manual.xhtml#o8"`; readers go to the file, but EbookLib looks for a zip
    member of that name and refuses the whole book (KeyError). Cutting the fragment makes such items name their file,
    which the spine loop then reads once. An EPUB without such hrefs is returned unchanged."""
    from lxml import etree

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        container = etree.fromstring(archive.read(_CONTAINER))
        rootfile = container.find(f"{_CONTAINER_NS}rootfiles/{_CONTAINER_NS}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            return data  # EbookLib gives the clear error for a package it cannot find
        opf_name = rootfile.get("full-path")
        opf = etree.fromstring(archive.read(opf_name))
        items = [item for item in opf.iterfind(f"{_OPF_NS}manifest/{_OPF_NS}item") if "#" in item.get("href", "")]
        if not items:
            return data
        for item in items:
            item.set("href", item.get("href").split("#", 1)[0])
        package = etree.tostring(opf, xml_declaration=True, encoding="utf-8")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy:
            for info in archive.infolist():
                copy.writestr(info, package if info.filename == opf_name else archive.read(info))
    return out.getvalue()
