"""Hostile inputs built from real fixture documents: a file whose bytes are not what its name says, text in UTF-16
or UTF-32 or behind a byte-order mark, markup nested far deeper than any page needs. Each converts to the real text
or fails as a `ConversionError` that says why; none escapes as an internal error."""

from __future__ import annotations

import codecs
import contextlib
import html
import io
import json
import logging
import re
import signal
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pymupdf
import pytest

from connector import logs
from connector.convert import convert, mime_for_path
from connector.errors import ConversionError, DocumentError, UnsupportedDocument
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES
from tests.test_convert import assert_tiles

SETTINGS = ChunkingSettings()
HTML_PAGE = (FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes()
TEXT = (FIXTURES / "apache-2.0.txt").read_text(encoding="utf-8")
MARKDOWN = (FIXTURES / "dockerfile-reference.md").read_text(encoding="utf-8")
PDF = (FIXTURES / "lppl-1.3c.pdf").read_bytes()


def _zip(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def _png() -> bytes:
    pdf = pymupdf.open(stream=PDF, filetype="pdf")
    with pdf:
        return pdf[0].get_pixmap(dpi=20).tobytes("png")


# --- a file named .pdf whose bytes are something else ---------------------------------------------------------------


def test_html_named_pdf_converts_as_html() -> None:
    doc = convert(HTML_PAGE, "application/pdf", SETTINGS)
    assert doc == convert(HTML_PAGE, "text/html", SETTINGS)
    assert doc.page_starts == ()
    assert "| `bigint` | 8 bytes | large-range integer |" in doc.markdown
    assert_tiles(doc)


def test_html_without_xml_declaration_named_pdf_converts_as_html() -> None:
    page = HTML_PAGE.split(b"?>", 1)[1].lstrip()  # starts with <!DOCTYPE html ...
    assert convert(page, "application/pdf", SETTINGS).markdown == convert(page, "text/html", SETTINGS).markdown


def test_plain_text_named_pdf_converts_as_text() -> None:
    doc = convert(TEXT.encode(), "application/pdf", SETTINGS)
    assert doc.markdown == TEXT
    assert doc.page_starts == ()
    assert_tiles(doc)


def test_pdf_with_junk_before_its_header_still_opens_as_pdf() -> None:
    # Readers accept "%PDF-" anywhere in the first 1024 bytes (a mail or HTTP header glued in front, say).
    doc = convert(b"X-Mailer: something\r\n" * 20 + PDF, "application/pdf", SETTINGS)
    assert len(doc.page_starts) == 8


@pytest.mark.parametrize(
    ("data", "looks_like"),
    [
        (_zip("word/document.xml", HTML_PAGE), "a ZIP archive"),
        (_png(), "a PNG image"),
        (b"", "empty"),
        (codecs.BOM_UTF8 + TEXT.encode("latin-1", errors="replace").replace(b"and", b"\xe9t\xe9"), "not valid UTF-8"),
    ],
    ids=["zip", "png", "empty", "latin-1-behind-a-utf-8-mark"],
)
def test_other_bytes_named_pdf_fail_saying_what_they_look_like(data: bytes, looks_like: str) -> None:
    with pytest.raises(ConversionError, match="not a PDF") as caught:
        convert(data, "application/pdf", SETTINGS)
    assert looks_like in str(caught.value)


INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u202e\ufe0f\u3164\U000e0041"  # zero-width, BOM, soft hyphen, ...


@pytest.mark.parametrize(
    ("data", "mime", "says"),
    [
        ((INVISIBLE * 50).encode(), "text/plain", "no visible text"),
        (("\n\u00a0 \u3000\t" + INVISIBLE + "\n").encode(), "text/markdown", "no visible text"),
        (codecs.BOM_UTF16_LE + (INVISIBLE + "\n").encode("utf-16-le"), "application/octet-stream", "no visible text"),
        (f"<html><body><p>{INVISIBLE}</p><p>&#8203;&zwj;&shy;</p></body></html>".encode(), "text/html", "no visible"),
        (f"= {INVISIBLE}\n\n{INVISIBLE}\n".encode(), "text/asciidoc", "="),  # the heading marks show: not empty
        ("\u00a0\u2003\u3000\n".encode(), "text/plain", "empty"),
    ],
    ids=["text", "markdown", "utf-16-unlabelled", "html", "asciidoc-marks", "unicode-spaces"],
)
def test_a_text_of_invisible_characters_fails_like_an_empty_one(data: bytes, mime: str, says: str) -> None:
    """Zero-width spaces, joiners, BOMs and the like show nothing: a document of them alone would be `done` with a
    chunk that says nothing and embeds as noise."""
    if says == "=":
        assert convert(data, mime, SETTINGS).markdown.startswith("= ")
        return
    with pytest.raises(ConversionError, match=says):
        convert(data, mime, SETTINGS)


@pytest.mark.parametrize(
    ("page", "kept"),
    [
        ("<html><body><main>&#8203;</main><div>Real visible text.</div></body></html>", "Real visible text."),
        ("<html><body><article>&zwnj;</article><p>Chapter two text.</p></body></html>", "Chapter two text."),
        ("<html><body><div role=main>&shy;</div><p>Shown.</p></body></html>", "Shown."),
        ("<html><body><nav>Home About Contact</nav><p>&#8203;</p></body></html>", "Home About Contact"),
    ],
    ids=["main", "article", "role-main", "only-navigation"],
)
def test_a_main_part_of_invisible_characters_is_no_main_part(page: str, kept: str) -> None:
    """A `<main>` holding only a zero-width space would be the page's content, the rest dropped as chrome, and the
    page would fail as empty: it is skipped as an empty one is."""
    assert kept in convert(page.encode(), "text/html", SETTINGS).markdown


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        ("# \u200b\n\nBody text here.\n", "text/markdown"),
        ("<html><head><title>&#8203;</title></head><body><h1>&zwj;</h1><p>Body text.</p></body></html>", "text/html"),
        ("= \u2060\n\nBody text.\n", "text/asciidoc"),
    ],
    ids=["markdown", "html", "asciidoc"],
)
def test_a_title_of_invisible_characters_is_no_title(data: str, mime: str) -> None:
    """Else it would win over the file's name as the document's title, and lead every chunk's embedded text."""
    assert convert(data.encode(), mime, SETTINGS).title is None


def test_headings_of_invisible_characters_are_left_out_of_the_embedded_heading() -> None:
    from connector.embed import heading_prefix

    template = "{heading}\n\n{text}"
    assert heading_prefix(template, None, ("\u200b",)) == ""
    assert heading_prefix(template, "Guide", ("\u200b", "Install")) == "Guide › Install\n\n"


def test_invisible_characters_inside_real_text_are_kept() -> None:
    text = "Word\u200bjoined and soft\u00adhyphen\u2060here.\n"
    assert convert(text.encode(), "text/plain", SETTINGS).markdown == text


# --- UTF-16, UTF-32 and byte-order marks ----------------------------------------------------------------------------

ENCODED = [
    ("utf-8-sig", lambda s: codecs.BOM_UTF8 + s.encode("utf-8")),
    ("utf-16-le-bom", lambda s: codecs.BOM_UTF16_LE + s.encode("utf-16-le")),
    ("utf-16-be-bom", lambda s: codecs.BOM_UTF16_BE + s.encode("utf-16-be")),
    ("utf-32-le-bom", lambda s: codecs.BOM_UTF32_LE + s.encode("utf-32-le")),
    ("utf-32-be-bom", lambda s: codecs.BOM_UTF32_BE + s.encode("utf-32-be")),
    ("utf-16-le", lambda s: s.encode("utf-16-le")),
    ("utf-16-be", lambda s: s.encode("utf-16-be")),
]


@pytest.mark.parametrize("encode", [e for _, e in ENCODED], ids=[n for n, _ in ENCODED])
def test_text_in_unicode_encodings_converts_to_the_same_text(encode) -> None:
    doc = convert(encode(TEXT), "text/plain", SETTINGS)
    assert doc.markdown == TEXT
    assert doc == convert(TEXT.encode(), "text/plain", SETTINGS)
    assert_tiles(doc)


@pytest.mark.parametrize("encode", [e for _, e in ENCODED], ids=[n for n, _ in ENCODED])
def test_markdown_in_unicode_encodings_converts_to_the_same_text(encode) -> None:
    doc = convert(encode(MARKDOWN), "text/markdown", SETTINGS)
    assert doc.markdown == MARKDOWN
    assert doc == convert(MARKDOWN.encode(), "text/markdown", SETTINGS)


@pytest.mark.parametrize("encode", [e for _, e in ENCODED], ids=[n for n, _ in ENCODED])
def test_html_in_unicode_encodings_converts_to_the_same_text(encode) -> None:
    page = HTML_PAGE.decode("utf-8")
    doc = convert(encode(page), "text/html", SETTINGS)
    assert doc == convert(HTML_PAGE, "text/html", SETTINGS)


def test_non_latin_text_in_utf16_converts() -> None:
    # Mixed scripts: the NUL bytes of UTF-16 are then far from every other byte, but still on one side.
    text = TEXT[:3000] + "\n\nЛицензия Apache, версия 2.0. Ελληνικά κείμενα. 中文文本。\n"
    assert convert(text.encode("utf-16-le"), "text/plain", SETTINGS).markdown == text
    assert convert(codecs.BOM_UTF16_BE + text.encode("utf-16-be"), "text/plain", SETTINGS).markdown == text


PG_PAGE = (FIXTURES / "postgresql-15-datatype-numeric.html").read_text()


@pytest.mark.parametrize("charset", ["ISO-8859-1", "windows-1252", "latin1", "cp1252"])
@pytest.mark.parametrize("mime", ["text/html", "application/octet-stream"])
def test_an_html_page_in_the_charset_it_declares_converts_to_the_same_text(charset: str, mime: str) -> None:
    """An HTML page of the 2000s in ISO-8859-1, saying so in its `<meta>` (and XML declaration), failed as "not valid
    UTF-8". Read as WHATWG reads those labels (Windows-1252: its curly quotes are bytes 0x93 and 0x94)."""
    page = PG_PAGE.replace('encoding="UTF-8"', f'encoding="{charset}"').replace("charset=UTF-8", f"charset={charset}")
    data = page.encode("cp1252")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    assert "\u201c" in PG_PAGE and "\xa0" in PG_PAGE
    assert convert(data, mime, SETTINGS) == convert(page.encode(), mime, SETTINGS)


def test_a_declared_charset_does_not_override_utf8_and_without_one_the_charset_is_guessed(caplog) -> None:
    """A page in Windows-1252 that declares no charset, or one Python does not know, failed as "not valid UTF-8";
    it is read in the charset guessed (`charset.py`), as browsers do, and the log says so."""
    page = PG_PAGE.replace("charset=UTF-8", "charset=ISO-8859-1").replace('encoding="UTF-8"', 'encoding="latin1"')
    utf8 = convert(PG_PAGE.encode(), "text/html", SETTINGS)
    assert convert(page.encode(), "text/html", SETTINGS) == utf8
    assert not caplog.records, "a declaration is no guess"
    undeclared = PG_PAGE.replace("charset=UTF-8", "").replace(' encoding="UTF-8"', "").encode("cp1252")
    assert convert(undeclared, "text/html", SETTINGS).markdown == utf8.markdown
    unknown = PG_PAGE.replace("charset=UTF-8", "charset=x-klingon").replace('encoding="UTF-8"', "")
    assert convert(unknown.encode("cp1252"), "text/html", SETTINGS).markdown == utf8.markdown
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["read as windows-1252"] * 2
    shift_jis = PG_PAGE.replace("charset=UTF-8", "charset=Shift_JIS").replace('encoding="UTF-8"', "")
    shift_jis = shift_jis.replace("Numeric Types", "数値型").replace("\xa0", " ").replace("\u201c", '"')
    assert "数値型" in convert(shift_jis.replace("\u201d", '"').encode("shift_jis"), "text/html", SETTINGS).markdown


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (codecs.BOM_UTF8 + TEXT.encode("latin-1", errors="replace").replace(b"and", b"\xe9t\xe9"), "not valid UTF-8"),
        (_png(), "NUL bytes"),
        (_zip("a.txt", TEXT.encode()), "NUL bytes"),
        (codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le")[:-1], "not valid UTF-16"),
        (TEXT.encode("utf-16-le")[:2000] + PDF[:2000], "NUL bytes"),
    ],
    ids=["latin-1-behind-a-utf-8-mark", "png", "zip", "truncated-utf-16", "utf-16-then-binary"],
)
def test_binary_and_unknown_encodings_still_fail_clearly(data: bytes, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert(data, "text/plain", SETTINGS)


def test_what_the_bytes_say_wins_over_the_label() -> None:
    """A PDF saved as `.txt`, or a DOCX that lost its suffix, converts as what it is; unknown binary fails saying
    what it looks like, and unknown text is read as text."""
    as_text = convert(PDF, "text/plain", SETTINGS)
    assert as_text.page_starts and "LaTeX Project Public License" in as_text.markdown
    docx = (FIXTURES / "real" / "officer-example.docx").read_bytes()
    assert convert(docx, "application/octet-stream", SETTINGS).title == "document title"
    with pytest.raises(UnsupportedDocument, match=r"unsupported file type \(looks like a PNG image\)"):
        convert(_png(), "application/octet-stream", SETTINGS)
    with pytest.raises(UnsupportedDocument, match="unsupported file type 'image/png' .*not text"):
        convert(b"\x89PNG", "image/png", SETTINGS)
    assert convert(TEXT.encode(), "application/octet-stream", SETTINGS).markdown == TEXT


# --- deep nesting ---------------------------------------------------------------------------------------------------

PARAGRAPHS = [" ".join(p.split()) for p in TEXT.split("\n\n") if p.strip()][:12]


def _nested(depth: int) -> bytes:
    body = "".join(f"<div><p>{html.escape(p)}</p></div>" for p in PARAGRAPHS)
    return f"<html><body>{'<div>' * depth}{body}{'</div>' * depth}</body></html>".encode()


def test_100k_nested_divs_convert_with_every_paragraph() -> None:
    doc = convert(_nested(100_000), "text/html", SETTINGS)
    assert_tiles(doc)
    flat = convert(_nested(0), "text/html", SETTINGS)
    assert doc.markdown == flat.markdown, "the same paragraphs, in order, each its own block"


def test_nesting_below_the_limit_keeps_its_markup() -> None:
    inner = (
        "<ul><li>first <b>bold</b> item</li><li>second</li></ul><table><tr><th>a</th></tr><tr><td>1</td></tr></table>"
    )
    page = f"<html><body>{'<div>' * 50}{inner}{'</div>' * 50}</body></html>".encode()
    doc = convert(page, "text/html", SETTINGS)
    assert "- first **bold** item" in doc.markdown
    assert "| a |" in doc.markdown


def test_deep_markup_beyond_the_limit_keeps_its_text_and_paragraphs() -> None:
    tail = "".join(f"<blockquote><p>{html.escape(p)}</p>" for p in PARAGRAPHS) + "</blockquote>" * len(PARAGRAPHS)
    page = f"<html><body>{'<section>' * 5000}{tail}{'</section>' * 5000}</body></html>".encode()
    doc = convert(page, "text/html", SETTINGS)
    flat = " ".join(doc.markdown.replace(">", " ").replace("\\", "").split())
    for p in PARAGRAPHS:
        assert p in flat


def test_a_recursion_error_in_any_converter_is_a_conversion_error() -> None:
    # A real RecursionError, not a simulated one: the conversion starts with the stack almost used up.
    page = _nested(60)

    def depth() -> int:
        frame, n = sys._getframe(), 0
        while frame is not None:
            frame, n = frame.f_back, n + 1
        return n

    def descend(n: int):
        return convert(page, "text/html", SETTINGS) if n == 0 else descend(n - 1)

    with pytest.raises(ConversionError, match="nested too deeply"):
        descend(sys.getrecursionlimit() - depth() - 40)


# --- office archives and HTML chrome (issue 13) ---------------------------------------------------------------------


def _archive(entries: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


ODT_MIME = b"application/vnd.oasis.opendocument.text"
ODT_BODY = b'<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" ' \
    b'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>%s' \
    b"</office:text></office:body></office:document-content>"  # fmt: skip


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_archive({"mimetype": ODT_MIME, "content.xml": b"<a>" + b" " * 30_000_000 + b"</a>"}), "zip bomb"),
        (_archive({"mimetype": ODT_MIME, "content.xml": ODT_BODY % b'<text:h text:outline-level="x">T</text:h>'}),
         "cannot read ODT: ValueError"),
        (_archive({"mimetype": ODT_MIME, "content.xml": ODT_BODY % b"", "meta.xml": b"<bad"}), "cannot read ODT"),
        (_archive({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"not xml"}), "DOCX"),
        (_archive({"mimetype": b"application/epub+zip", "META-INF/container.xml": b"<x/>"}), "EPUB"),
    ],
    ids=["odt-zip-bomb", "odt-bad-level", "odt-bad-meta", "docx-not-xml", "epub-no-package"],
)  # fmt: skip
def test_broken_office_files_fail_as_conversion_errors(data: bytes, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert(data, "application/octet-stream", SETTINGS)


def test_html_keeps_section_headers_notes_and_section_signs() -> None:
    page = (
        "<html><body><nav>Home | Docs</nav><header><p>Site banner</p></header>"
        "<section><header><h1>Chapter One</h1></header><p>See § 5 of the act, and the note.</p>"
        '<aside epub:type="footnote"><p>The footnote text.</p></aside>'
        '<aside class="sidebar"><p>Related links</p></aside></section>'
        "<footer>Copyright</footer></body></html>"
    )
    md = convert(page.encode(), "text/html", SETTINGS).markdown
    assert "# Chapter One" in md and "See § 5 of the act" in md and "The footnote text." in md
    for chrome in ("Home | Docs", "Site banner", "Related links", "Copyright"):
        assert chrome not in md
    only_chrome = "<html><body><div class='navbar'><p>Everything here sits in a nav-like class.</p></div></body></html>"
    assert "Everything here" in convert(only_chrome.encode(), "text/html", SETTINGS).markdown, "converted whole"


@pytest.mark.parametrize("charset", ["base64", "hex", "rot13", "zip", "unicode_escape", "undefined", "x-klingon"])
def test_a_declared_charset_that_is_no_text_encoding_is_ignored_and_the_charset_guessed(charset: str) -> None:
    page = PG_PAGE.replace("charset=UTF-8", f"charset={charset}").replace('encoding="UTF-8"', "")
    utf8 = convert(page.encode(), "text/html", SETTINGS)
    assert convert(page.encode("cp1252"), "text/html", SETTINGS).markdown == utf8.markdown


def test_escape_sequences_go_whole_and_nothing_after_an_unended_one() -> None:
    from connector.convert import pdf, sniff

    text = "red \x1b[31mALERT\x1b[0m, a title \x1b]0;pwned\x07 set, \x1b(Bcharset, \x1b]2;no end\nnext line\n"
    assert sniff.drop_controls(text) == "red ALERT, a title  set, charset, \nnext line\n"
    # In a PDF, such a byte is a glyph's code (0x1A: OT1's æ in old TeX fonts): only it goes, not the letters after
    # it. (0x1B-0x1F beside a letter are T1's ligatures: see test_convert_real.)
    assert pdf.clean("c\x1aur and x\x1a the") == "cur and x the"


def _damaged(pdf: bytes) -> bytes:
    """The PDF with every third compressed stream's bytes zeroed part way in: what a bad copy leaves."""
    data = bytearray(pdf)
    for n, m in enumerate(re.finditer(rb"/FlateDecode[^>]*>>\s*stream\r?\n", pdf), 1):
        if n % 3 == 0:
            data[m.end() + 20 : m.end() + 60] = bytes(40)
    return bytes(data)


def test_a_damaged_pdf_is_one_warning_about_its_document_not_mupdfs_lines_on_stderr(capfd) -> None:
    """MuPDF printed each problem of a damaged PDF on stderr itself (108 lines for one Debian manual): outside the
    log's format, a JSON log broken, and no word of which document."""
    out = logs.handler("json")  # the sidecar's handler, on this test's captured stderr
    logger = logging.getLogger("connector.convert.pdf")
    logger.addHandler(out)
    try:
        with logs.about(7, "manuals/lppl.pdf"):
            doc = convert(_damaged(PDF), "application/pdf", SETTINGS)
    finally:
        logger.removeHandler(out)
    assert "LaTeX Project Public License" in doc.markdown, "what could be read is kept"
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    entry = json.loads(lines[0])
    assert entry["level"] == "WARNING" and entry["message"].startswith("PDF is damaged: MuPDF reported")
    assert (entry["document_id"], entry["source_key"]) == (7, "manuals/lppl.pdf")
    convert(PDF, "application/pdf", SETTINGS)
    assert capfd.readouterr().err == "", "an intact PDF after it: nothing left over to report"


@pytest.mark.parametrize("name", ["listings-manual-toc-p1-p2-index-p61-p63.pdf", "lme4-lmer-jss-p28.pdf"])
def test_a_fonts_odd_ascent_and_descent_is_no_damage_but_a_broken_stream_still_is(name: str, capfd) -> None:
    """MuPDF notes `bogus font ascent/descent values (0 / 0)` (772 / -2959 in lme4's) for many intact TeX PDFs: each
    was logged as "PDF is damaged ... text may be missing", every time it was converted, though no text is lost."""
    pdf = (FIXTURES / "real" / name).read_bytes()
    out = logs.handler("json")
    logger = logging.getLogger("connector.convert.pdf")
    logger.addHandler(out)
    try:
        convert(pdf, "application/pdf", SETTINGS)
        assert capfd.readouterr().err == ""
        convert(_damaged(pdf), "application/pdf", SETTINGS)
        entries = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    finally:
        logger.removeHandler(out)
    assert [e["message"].startswith("PDF is damaged: MuPDF reported") for e in entries] == [True]
    assert "ascent/descent" not in entries[0]["message"], "the first problem named is a real one"


HANG_GUARD_S = 120
"""How long a hostile input may run before the test gives up on it: a guard against a hang stalling the suite, not a
measure. Each input below ends in well under 2 s on a loaded two-core machine; with its backtracking pattern back,
each would run for half an hour to days (from the times measured when they were found, scaled by the input's size)."""


@contextlib.contextmanager
def _ends(what: str) -> Iterator[None]:
    """Fail, rather than hang, if the block is still running after HANG_GUARD_S. A regular expression's match can
    be interrupted: the engine checks for signals as it backtracks."""

    def hang(signum, frame):
        raise AssertionError(f"{what}: still running after {HANG_GUARD_S} s (a pattern backtracking on it)")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, HANG_GUARD_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("no-suffix", b"<!---->" * 40 + b"<x"),  # SVG sniffing: n comments matched 2^n ways (22: 4 s, each more x2)
        (
            "page.pod",
            b"=head1 NAME\n\n" + b" " * 1_000_000,
        ),  # POD: a line of spaces, quadratic (100 K: 46 s)
        ("page.1", b".TH X 1\n.SH NAME\n" + b"\\[" * 500_000 + b"\n"),  # roff: unclosed escapes (50 K: 21 s)
        ("page.adoc", b"= " + b"_a " * 200_000 + b"\n\ntext\n"),  # a title's unclosed marks, quadratic (10 K: 5.6 s)
    ],
    ids=["svg-comments", "pod-spaces", "roff-escapes", "asciidoc-title"],
)
def test_hostile_input_to_the_newer_readers_ends(name: str, data: bytes) -> None:
    """Patterns that backtracked on hostile input: each of these took minutes or forever in a CPU pool process,
    its lease renewed all along. Each input is big enough that the pattern, back, would not end for half an hour or
    more (`HANG_GUARD_S`)."""
    with _ends(name), contextlib.suppress(DocumentError):
        convert(data, mime_for_path(name), SETTINGS)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a.ipynb", b'{"nbformat": 4, "metadata": {"kernelspec": "py"}, "cells": []}'),
        ("b.ipynb", b'{"nbformat": 3, "worksheets": [1]}'),
        ("c.ipynb", b'{"nbformat": 4, "cells": [{"cell_type": "code", "source": "x", "outputs": 5}]}'),
        ("d.eml", b'From: "\nSubject: x\n\nbody\n'),
    ],
)
def test_a_malformed_notebook_or_mail_fails_as_its_documents_fault(name: str, data: bytes) -> None:
    """They raised AttributeError, TypeError, IndexError: taken for bugs, each cost tries and a traceback."""
    with pytest.raises(ConversionError, match="not a readable"):
        convert(data, mime_for_path(name), SETTINGS)


def test_a_binary_file_named_like_a_man_page_says_what_it_is() -> None:
    """`lib.so.6`, `clip.3gp`: named like a man page (`.6`, `.3gp`), they failed as "contains NUL bytes"."""
    with pytest.raises(UnsupportedDocument, match="looks like an executable"):
        convert(Path(sys.executable).read_bytes()[:65536], mime_for_path("libc.so.6"), SETTINGS)


def test_hostile_pdf_text_is_cleaned_and_judged() -> None:
    """A run of minus signs no letter follows (each sign tried again: 200,000 took 500 s), a row of dots (a table of
    contents' leader, quadratic over a whole row: 8,000 took 2 s). The same guard against a hang as above: with either
    pattern back, a million would take hours."""
    from connector.convert import pdf, pdf_layout

    with _ends("a million minus signs"):
        assert pdf.clean("\u2212" * 1_000_000 + " x").endswith("\u2212 x")
    assert pdf.clean("a \u2212\u2212login, 1\u2212p, \u2212 x") == "a --login, 1-p, \u2212 x"
    with _ends("a row of a million dots"):
        assert pdf_layout._leader("." * 1_000_000) is None and pdf_layout._leader(". " * 500_000 + "29") is not None
