"""Conversion of real fixture documents, and the readable errors of documents that cannot be converted."""

from __future__ import annotations

import codecs

import pymupdf
import pytest

from connector.convert import convert, mime_for_path
from connector.errors import ConversionError, UnsupportedDocument
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES

CHUNKING = ChunkingSettings()  # the configured defaults: encoding and thresholds come from settings only


def test_pdf_has_a_page_map_that_matches_the_pages() -> None:
    data = (FIXTURES / "lppl-1.3c.pdf").read_bytes()
    doc = convert(data, "application/pdf", CHUNKING)
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        assert len(doc.page_starts) == pdf.page_count == 8
        for number, page in enumerate(pdf, start=1):
            # The first line of the page's longest paragraph must be found, in the Markdown, on that page.
            longest = max((b[4] for b in page.get_text("blocks") if b[6] == 0), key=len)
            line = longest.strip().splitlines()[0].strip()
            offset = doc.markdown.find(line)
            assert offset >= 0 and doc.page_at(offset) == number, (number, line)
            assert doc.block_at(offset).page == number
    assert doc.page_at(0) == 1 and doc.page_at(len(doc.markdown) - 1) == 8


def assert_tiles(doc) -> None:
    blocks = doc.blocks
    assert blocks[0].start == 0 and blocks[-1].end == len(doc.markdown)
    assert all(a.end == b.start for a, b in zip(blocks, blocks[1:], strict=False)), "blocks tile the text"
    units = doc.units
    assert units[0].start == 0 and units[-1].end == len(doc.markdown)
    assert all(a.end == b.start for a, b in zip(units, units[1:], strict=False)), "units tile the text"
    assert {u.start for u in units} <= {b.start for b in blocks}, "units are unions of blocks"


def test_text_passes_through_unchanged_with_paragraph_blocks() -> None:
    raw = (FIXTURES / "apache-2.0.txt").read_bytes()
    doc = convert(raw, "text/plain", CHUNKING)
    assert doc.markdown == raw.decode()
    assert_tiles(doc)
    assert all(b.kind in ("paragraph", "list", "heading") for b in doc.blocks)


def test_markdown_headings_give_section_paths_but_not_inside_code_fences() -> None:
    text = "# Top\n\nintro\n\n## Sub\n\n```\n# not a heading\n```\n\nbody\n"
    doc = convert(text.encode(), "text/markdown", CHUNKING)
    assert_tiles(doc)
    assert [text[b.start : b.end].strip() for b in doc.blocks if b.kind == "heading"] == ["# Top", "## Sub"]
    assert doc.section_path_at(text.index("body")) == ("Top", "Sub")
    assert doc.section_path_at(text.index("intro")) == ("Top",)
    assert [b.kind for b in doc.blocks] == ["heading", "paragraph", "heading", "code", "paragraph"]


def test_markdown_fixture_is_unchanged_and_fully_tiled() -> None:
    raw = (FIXTURES / "dockerfile-reference.md").read_bytes()
    doc = convert(raw, mime_for_path("x.md"), CHUNKING)
    assert doc.markdown == raw.decode()
    assert_tiles(doc)
    kinds = {b.kind for b in doc.blocks}
    assert {"heading", "paragraph", "code", "list", "table"} <= kinds
    assert sum(b.kind == "heading" for b in doc.blocks) > 20
    assert doc.blocks[0].kind == "code" and doc.markdown[: doc.blocks[0].end].startswith("---\ntitle:")


def _pdf_bytes(builder) -> bytes:
    pdf = pymupdf.open()
    builder(pdf)
    return pdf.tobytes()


def test_corrupt_pdf_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match="cannot open PDF"):
        convert(b"%PDF-1.7\n" + bytes(range(256)) * 4, "application/pdf", CHUNKING)


def test_encrypted_pdf_is_a_conversion_error() -> None:
    def build(pdf):
        pdf.new_page().insert_text((72, 72), "secret text")

    pdf = pymupdf.open()
    build(pdf)
    data = pdf.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="owner")
    with pytest.raises(ConversionError, match="encrypted"):
        convert(data, "application/pdf", CHUNKING)


def test_pdf_without_text_is_a_conversion_error() -> None:
    data = _pdf_bytes(lambda pdf: pdf.new_page().draw_rect(pymupdf.Rect(50, 50, 200, 200)))
    with pytest.raises(ConversionError, match="no extractable text"):
        convert(data, "application/pdf", CHUNKING)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"  \n\n ", "empty"),
        (codecs.BOM_UTF8 + b"caf\xe9 au lait", "not valid UTF-8"),  # a UTF-8 mark: no charset is guessed
        (b"\x7fELF\x02\x01\x01\x00\x00", "NUL bytes"),
    ],
)
def test_bad_text_is_a_conversion_error(data: bytes, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert(data, "text/plain", CHUNKING)


def test_unsupported_type() -> None:
    with pytest.raises(UnsupportedDocument, match="image/png"):
        convert(b"\x89PNG", "image/png", CHUNKING)


def test_the_configured_encoding_and_table_limit_reach_conversion() -> None:
    from connector.convert import structure

    raw = (FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes()
    o200k = convert(raw, "text/html", ChunkingSettings(encoding="o200k_base"))
    cl100k = convert(raw, "text/html", ChunkingSettings(encoding="cl100k_base"))
    assert o200k.markdown == cl100k.markdown
    # Short paragraphs are grouped into units by their token counts: the two encodings group this page differently.
    assert cl100k.units == structure.units(cl100k.markdown, cl100k.blocks, "cl100k_base")
    assert o200k.units == structure.units(o200k.markdown, o200k.blocks, "o200k_base")
    assert cl100k.units != o200k.units

    def tables(doc) -> int:
        return sum(b.kind == "table" for b in doc.blocks)

    small = convert(raw, "text/html", ChunkingSettings(table_max_tokens=150))
    assert tables(small) > tables(o200k)


def test_a_listing_between_two_short_rules_is_no_overlined_title() -> None:
    """git's AsciiDoc guides (shipped as .txt) put commands between `----` lines: the text reader took the commands
    for a title with an overline and an underline, and `$ git clone https://github.com/git/git git` became the
    document's title. A title between rules fits them (reStructuredText's rule), one or two lines."""
    listing = "Clone it:\n\n----\n$ git clone https://github.com/git/git git\n$ cd git\n----\n\nMore text.\n"
    d = convert(listing.encode(), "text/plain", ChunkingSettings())
    assert [b.kind for b in d.blocks] == ["paragraph"] * 3 and d.title is None
    titled = "********************\nAppendix\nThe Debian Manifesto\n********************\n\nText.\n"
    assert convert(titled.encode(), "text/plain", ChunkingSettings()).title == "Appendix The Debian Manifesto"
