"""Conversion: raw bytes → `Document` (Markdown text, block map, units, page map, title).

One module per input format; each produces Markdown (or keeps the user's text as it is) and its blocks:
- Markdown (and R Markdown, Quarto): the text unchanged, blocks from a CommonMark parser;
- plain text, AsciiDoc, Org, LaTeX, source code, any other text: the text unchanged, paragraphs and the dialect's
  headings (`text.py`); GNU info manuals as text without their node lines, menus and tag table (`info.py`);
- reStructuredText (`.rst`): parsed by docutils, written as HTML, then converted as HTML (`rst.py`); DocBook and
  Mallard XML (`.docbook`, `.dbk`, `.page`, an `.xml` that says it is one): mapped to HTML, then converted as HTML
  (`docbook.py`); Texinfo (`.texi`): its commands mapped to HTML, then converted as HTML (`texinfo.py`);
- HTML: the page's main content converted to Markdown, then parsed as Markdown;
- man pages (roff, man(7) or mdoc(7)), Perl POD, Jupyter notebooks, e-mail (`.eml`) and SVG images: converted to
  Markdown (`roff.py`, `pod.py`, `notebook.py`, `mail.py`, `svg.py`), then parsed as Markdown;
- PDF: see `pdf.py`; DOCX, PPTX, ODT: `office.py`; ODP: `odp.py`; RTF: `rtf.py`; EPUB: `epub.py`; DOC (Word
  97-2003): antiword's DocBook, converted as DocBook (`word.py`);
- CSV and TSV (by name, or by content when the name says nothing): one Markdown table (`tabular.py`); XLSX, XLS
  and ODS: a section per sheet holding its table (`spreadsheet.py`).
What a file is comes from its bytes where they say it (`%PDF-`, a ZIP's parts, an OLE2 file's streams, HTML's
signatures, text that decodes), from its name otherwise: a `.txt` that holds a PDF is read as a PDF, a file with
an unknown suffix is read as text when it is text, and anything else fails saying what it looks like. Bytes become
text in `sniff.py`.
A gzip file is read as what it holds, by the same rules, its name without `.gz` naming it (`bash.html.gz`: HTML).
Anything the document itself is to blame for raises a `DocumentError` subclass with a message saying what.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePath

from connector import tokens
from connector.convert import (
    docbook,
    epub,
    html,
    info,
    mail,
    markdown,
    notebook,
    odp,
    office,
    pdf,
    pod,
    roff,
    rst,
    rtf,
    sniff,
    spreadsheet,
    structure,
    svg,
    tabular,
    texinfo,
    text,
    word,
)
from connector.convert.sniff import decode
from connector.errors import ConversionError, UnsupportedDocument
from connector.models import Document
from connector.settings import ChunkingSettings, Settings
from connector.visible import visible

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODT = "application/vnd.oasis.opendocument.text"
ODP = "application/vnd.oasis.opendocument.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
XLS = "application/vnd.ms-excel"
DOC = "application/msword"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
CSV = ("text/csv", "text/tab-separated-values", "text/tsv")
EPUB = "application/epub+zip"
OCTET = "application/octet-stream"
GZIP = ("application/gzip", "application/x-gzip")
ROFF = "text/troff"
POD = "text/x-pod"
NOTEBOOK = "application/x-ipynb+json"
EML = "message/rfc822"
SVG = "image/svg+xml"
RTF = ("application/rtf", "text/rtf")
RST = ("text/x-rst", "text/prs.fallenstein.rst")
TEXINFO = ("text/x-texinfo", "application/x-texinfo")
DOCBOOK = "application/docbook+xml"
XML = ("application/xml", "text/xml", DOCBOOK, "application/x-docbook+xml")

MAX_DOCUMENT_BYTES = int(Settings.model_fields["max_document_mb"].default * 1_000_000)
"""The size limit a gzip file's content keeps to when the caller gives none: `max_document_mb`'s default."""

_MARKDOWN_NAMES = (".mdwn", ".mdown", ".mkd", ".mkdn", ".mkdown", ".mdtext", ".mdtxt", ".livemd", ".ronn", ".mdx")
MIME_BY_SUFFIX = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    # the other names Markdown goes by (ikiwiki's `.mdwn`, `.mkd`, `.mdown`); MDX is Markdown with JSX in it
    **dict.fromkeys(_MARKDOWN_NAMES, "text/markdown"),
    ".rmd": "text/markdown",
    ".qmd": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/x-rst",
    ".adoc": "text/asciidoc",
    ".asciidoc": "text/asciidoc",
    ".org": "text/x-org",
    ".tex": "text/x-tex",
    ".ltx": "text/x-tex",
    ".html": "text/html",
    ".htm": "text/html",
    ".xhtml": "application/xhtml+xml",
    ".pdf": "application/pdf",
    ".docx": DOCX,
    ".doc": DOC,
    ".pptx": PPTX,
    ".odt": ODT,
    ".odp": ODP,
    ".rtf": RTF[0],
    ".xlsx": XLSX,
    ".xls": XLS,
    ".ods": ODS,
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".tab": "text/tab-separated-values",
    ".epub": EPUB,
    ".man": ROFF,
    ".pod": POD,
    ".ipynb": NOTEBOOK,
    ".eml": EML,
    ".svg": SVG,
    ".texi": TEXINFO[0],
    ".texinfo": TEXINFO[0],
    ".txi": TEXINFO[0],
    ".docbook": DOCBOOK,
    ".dbk": DOCBOOK,
}
SUPPORTED = ", ".join(sorted(MIME_BY_SUFFIX)) + ", man pages (.1 to .9) and any other text file"
_MAN_SECTION = re.compile(r"\.[1-9][a-z]{0,6}$")  # `ls.1`, `GET.1p`, `CA.pl.1ssl`, `File::Temp.3perl`
_MEDIA = ("image", "audio", "video", "font", "model")
_TEXT_DIALECT = {"text/asciidoc": "asciidoc", "text/x-asciidoc": "asciidoc", "text/x-org": "org", "text/x-tex": "tex"}


def mime_for_path(path: str | PurePath) -> str:
    """The MIME type a file's name suggests; `application/octet-stream` (decided by its bytes) when it says none.
    A gzipped file's is that of the name it has without `.gz`: `convert` reads what it holds."""
    name = PurePath(path)
    if name.suffix.lower() == ".gz":
        name = name.with_suffix("")
    suffix = name.suffix.lower()
    return ROFF if _MAN_SECTION.match(suffix) else MIME_BY_SUFFIX.get(suffix, OCTET)


def convert(data: bytes, mime_type: str, settings: ChunkingSettings, max_bytes: int = MAX_DOCUMENT_BYTES) -> Document:
    """`data` as a `Document`; `settings` give the token encoding (units, table splits), the table size limit and
    whether navigation pages stay; `max_bytes` (`Settings.max_document_bytes`) bounds what a gzip file holds.

    A file labelled PDF is opened as a PDF only when its bytes are one (`%PDF-` in the first 1024 bytes, as PDF
    readers accept): PyMuPDF would otherwise open HTML or text as a document of its own and render that. Anything
    else is sniffed: HTML goes to the HTML converter, text to the text converter, other bytes fail as "not a PDF
    (looks like ...)". A document nested too deeply for any converter fails as a `ConversionError`; no
    `RecursionError` escapes."""
    labelled = (mime_type or "").split(";")[0].strip().lower()
    if sniff.is_gzip(data):  # a gzip file is what it holds; its label names that (`mime_for_path`), or nothing
        data = sniff.gunzip(data, max_bytes)
        labelled = OCTET if labelled in GZIP else labelled
    try:
        return _convert(data, labelled, settings)
    except RecursionError as exc:
        raise ConversionError("document is nested too deeply to convert (RecursionError)") from exc


def _convert(data: bytes, labelled: str, settings: ChunkingSettings) -> Document:
    tokens.forget()  # the texts counted while converting are this document's, not in the one primed before
    mime = sniff.container(data) or labelled  # a ZIP's parts or `%PDF-` say what it is, whatever its name
    if mime == "application/pdf" and not sniff.is_pdf(data):
        source = sniff.not_a_pdf(data)
        document = _from_html(source, settings) if sniff.looks_like_html(source) else _from_text(source, None)
    elif mime == "application/pdf":
        document = pdf.convert(data, settings)
    elif mime == DOCX:
        document = office.docx(data)
    elif mime == PPTX:
        document = office.pptx(data)
    elif mime == ODT:
        document = office.odt(data)
    elif mime == ODP:
        document = odp.odp(data)
    elif mime == EPUB:
        document = epub.convert(data)
    elif mime in RTF and rtf.is_rtf(data):
        document = _split_tables(rtf.convert(data), settings)
    elif mime == XLSX:
        document = _split_tables(spreadsheet.xlsx(data), settings)
    elif mime == XLS and sniff.magic(data) == sniff.LEGACY_OFFICE:  # no `.doc` named `.xls`; a damaged one: xlrd says
        document = _split_tables(spreadsheet.xls(data), settings)
    elif mime == DOC and data.startswith(sniff.OLE2):  # a `.doc` that is RTF or text is read as what it is
        document = _from_word(data, settings)
    elif mime == ODS:
        document = _split_tables(spreadsheet.ods(data), settings)
    elif mime in CSV:
        document = _from_csv(decode(data), settings, named=True)
    elif mime in ("text/markdown", "text/x-markdown"):
        source = decode(data)
        blocks = markdown.blocks(source)
        document = Document(source, blocks, title=markdown.front_matter_title(source) or
                            markdown.first_title(source, blocks))  # fmt: skip
    elif mime in ("text/html", "application/xhtml+xml"):
        document = _from_html(decode(data), settings)
    elif mime == ROFF and sniff.magic(data) is not None:  # `a.7z`, `clip.3gp`, `lib.so.6`: a man page's name only
        document = _sniffed(data, labelled, settings)
    elif mime == ROFF:
        source = decode(data)
        document = _from_roff(source) if sniff.looks_like_roff(source, named=True) else _from_text(source, None)
    elif mime == POD:
        document = _from_pod(decode(data))
    elif mime == NOTEBOOK:
        document = _from_page(_malformed("notebook", lambda: notebook.convert(decode(data))))
    elif mime == EML:
        document = _from_page(_malformed("e-mail", lambda: mail.convert(data)))
    elif mime in (OCTET, *XML) and (kind := docbook.dialect(data, mime == DOCBOOK)) is not None:  # `.xml`, `.page`
        document = _from_docbook(data, kind, settings)
    elif mime == SVG or (mime == OCTET and sniff.looks_like_svg(data)):
        document = _from_page(svg.convert(data))
    elif mime in RST:
        document = _from_rst(decode(data), settings)
    elif mime in TEXINFO:
        document = _from_texinfo(decode(data), settings)
    elif mime.startswith("text/") and mime not in XML:
        source, dialect = decode(data), _TEXT_DIALECT.get(mime)
        is_info = dialect is None and info.is_info(source)  # `bash.info` saved as `.txt`
        document = _from_info(source, settings) if is_info else _from_text(source, dialect)
    else:
        document = _sniffed(data, labelled, settings)
    if not visible(document.markdown):  # each converter says why in its terms; this holds for any format
        raise ConversionError(sniff.NOTHING_VISIBLE)
    # Every later stage counts the tokens of spans of this text (blocks here, then every chunk of every strategy):
    # encoded once whole, its lines' counts are known, and each count after encodes only partial lines.
    tokens.prime(document.markdown, settings.encoding)
    return Document(
        document.markdown,
        document.blocks,
        document.page_starts,
        structure.units(document.markdown, document.blocks, settings.encoding),
        document.title if document.title and visible(document.title) else None,  # `# \u200b` names nothing
    )


def _sniffed(data: bytes, labelled: str, settings: ChunkingSettings) -> Document:
    """A file whose type its name does not say: HTML or text if its bytes are, else unsupported, saying what."""
    what = sniff.magic(data)
    if what is None:
        try:
            # A charset is guessed for text of no type or of a text-like one (`application/json`), never for what
            # its label says is media: four bytes of a PNG read as Windows-1252 are "‰PNG", no text.
            source = decode(data, guess=labelled.partition("/")[0] not in _MEDIA)
        except sniff.BinaryData:
            what = "looks like binary data"
        except sniff.EmptyText:
            raise  # text after all, and it says why it fails
        except ConversionError as exc:
            what = f"not text: {exc}"
        else:
            if sniff.looks_like_html(source):
                return _from_html(source, settings)
            if sniff.looks_like_pod(source):
                return _from_pod(source)
            if sniff.looks_like_roff(source):
                return _from_roff(source)
            if texinfo.looks_like_texinfo(source):
                return _from_texinfo(source, settings)
            if info.is_info(source):
                return _from_info(source, settings)
            return _from_csv(source, settings, named=False)
    else:
        what = f"looks like {what}"
    label = "" if labelled in ("", OCTET) else f" {labelled!r}"
    raise UnsupportedDocument(
        f"unsupported file type{label} ({what}); supported: PDF, DOCX, DOC, PPTX, ODT, ODP, RTF, EPUB, XLSX, XLS, ODS, "
        "HTML, Markdown, CSV and any text, each also gzipped"
    )


def _from_html(source: str, settings: ChunkingSettings) -> Document:
    page = html.convert(source)
    if not visible(page.markdown):
        raise ConversionError("HTML page has no visible text")
    return _from_structured(page, settings)


def _from_csv(source: str, settings: ChunkingSettings, named: bool) -> Document:
    """A CSV or TSV as one table, split by rows into parts that each repeat the header row; as text when it is not
    tabular after all (`tabular.dialect`)."""
    found = tabular.dialect(source, named)
    table = tabular.markdown(source, found) if found is not None else None
    if table is None:
        return _from_text(source, None)
    converted = markdown.split_large_tables(table, settings.table_max_tokens, settings.encoding)
    return Document(converted, markdown.blocks(converted))


def _split_tables(document: Document, settings: ChunkingSettings) -> Document:
    """A converter's Markdown with its tables over the size limit split by rows, each part under the header row."""
    converted = markdown.split_large_tables(document.markdown, settings.table_max_tokens, settings.encoding)
    return Document(converted, markdown.blocks(converted), title=document.title)


def _from_rst(source: str, settings: ChunkingSettings) -> Document:
    """reStructuredText through docutils (`rst.py`); as plain text where docutils fails on it, where it is too long
    to parse in reasonable time, or where the parsed document shows nothing (only comments, say)."""
    if len(source) > rst.MAX_CHARS:
        return _from_text(source, None)
    try:
        page = rst.convert(source)
    except rst.ReadError:
        return _from_text(source, None)
    if not visible(page.markdown):
        return _from_text(source, None)
    return _from_structured(page, settings)


def _from_docbook(data: bytes, kind: str, settings: ChunkingSettings) -> Document:
    """DocBook or Mallard XML through the HTML converter (`docbook.py`); as text where it shows nothing that way."""
    page = docbook.convert(data, kind)
    if not visible(page.markdown):
        return _from_text(decode(data), None)
    return _from_structured(page, settings)


def _from_structured(page: html.Page | rst.Page | docbook.Page | texinfo.Page, settings: ChunkingSettings) -> Document:
    """A converter's page (HTML, rST, DocBook, Texinfo: Markdown, title, definition-list entries) as a document: its
    tables over the size limit split by rows under their header, each entry one block, the title its own or its
    first top-level heading."""
    converted, entries = markdown.split_large_tables_moving(
        page.markdown, settings.table_max_tokens, settings.encoding, page.entries
    )
    blocks = markdown.blocks(converted)
    title = page.title or markdown.first_title(converted, blocks)
    return Document(converted, structure.join_entries(blocks, entries), title=title)


def _from_texinfo(source: str, settings: ChunkingSettings) -> Document:
    """A Texinfo manual's source through the HTML converter (`texinfo.py`); as text where that shows nothing."""
    page = texinfo.convert(source)
    if not visible(page.markdown):
        return _from_text(source, None)
    return _from_structured(page, settings)


def _from_word(data: bytes, settings: ChunkingSettings) -> Document:
    """A Word 97-2003 document as antiword's DocBook (`word.py`), through the DocBook converter."""
    page = docbook.convert(word.to_docbook(data), docbook.DOCBOOK)
    if not visible(page.markdown):
        raise ConversionError("Word document shows no text")
    return _from_structured(page, settings)


def _from_info(source: str, settings: ChunkingSettings) -> Document:
    """A GNU info manual as text without its node lines, tag table and (as a PDF's contents and index pages, unless
    `keep_navigation`) its menus and indexes; titled by its Top node (`info.py`)."""
    cleaned = info.clean(source, keep_menus=settings.keep_navigation)
    if not visible(cleaned):  # all apparatus (a split manual's main file holds little else)
        cleaned = source
    return _from_text(cleaned, None, title=info.title(source))


def _from_roff(source: str) -> Document:
    page = roff.convert(source)
    if not visible(page.markdown):
        raise ConversionError("man page shows no text (only roff requests and comments)")
    blocks = markdown.blocks(page.markdown)
    title = page.title or markdown.first_title(page.markdown, blocks)
    return Document(page.markdown, structure.join_entries(blocks, page.entries), title=title)


def _malformed(kind: str, read: Callable[[], notebook.Page | mail.Page]) -> notebook.Page | mail.Page:
    """`read()`, where a structure its reader did not expect is the document's fault, not a bug: a notebook whose
    `metadata` is a string, a `From: "` header the standard library's parser fails on. Raised as they were, each cost
    tries with backoff and a traceback before its document failed."""
    try:
        return read()
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        if isinstance(exc, ConversionError):
            raise
        raise ConversionError(f"not a readable {kind}: {type(exc).__name__}: {exc}") from exc


def _from_page(page: notebook.Page | mail.Page | svg.Page) -> Document:
    """A converter's Markdown and title; the title, when it gives none, the Markdown's first heading."""
    blocks = markdown.blocks(page.markdown)
    return Document(page.markdown, blocks, title=page.title or markdown.first_title(page.markdown, blocks))


def _from_pod(source: str) -> Document:
    page = pod.convert(source)
    if not visible(page.markdown):  # no POD in it (a `.pod` of Perl code only): its text as it is
        return _from_text(source, None)
    blocks = markdown.blocks(page.markdown)
    return Document(page.markdown, blocks, title=page.title or markdown.first_title(page.markdown, blocks))


def _from_text(source: str, dialect: str | None, title: str | None = None) -> Document:
    blocks = text.blocks(source, dialect)
    found = title or text.title(source, dialect)
    found = found or markdown.first_title(source, blocks) or markdown.sole_top_heading(blocks)
    return Document(source, blocks, title=found)
