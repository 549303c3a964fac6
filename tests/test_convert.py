"""Conversion of real fixture documents, and the readable errors of documents that cannot be converted."""

from __future__ import annotations

import pymupdf
import pytest

from connector.convert import convert, mime_for_path
from connector.errors import ConversionError, UnsupportedDocument
from tests.conftest import FIXTURES


def test_pdf_has_a_page_map_that_matches_the_pages() -> None:
    data = (FIXTURES / "lppl-1.3c.pdf").read_bytes()
    doc = convert(data, "application/pdf")
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        assert len(doc.page_starts) == pdf.page_count == 8
        for number, page in enumerate(pdf, start=1):
            # The last text line of each page must be found, in the Markdown, on that page.
            last_line = page.get_text().strip().splitlines()[-1].strip()
            offset = doc.markdown.rfind(last_line, 0, doc.page_starts[number] if number < 8 else None)
            assert offset >= 0 and doc.page_at(offset) == number, (number, last_line)
    assert doc.page_at(0) == 1 and doc.page_at(len(doc.markdown) - 1) == 8


def test_text_passes_through_unchanged_with_paragraph_blocks() -> None:
    raw = (FIXTURES / "apache-2.0.txt").read_bytes()
    doc = convert(raw, "text/plain")
    assert doc.markdown == raw.decode()
    assert doc.blocks and all(
        doc.markdown[b.start : b.end].strip() == doc.markdown[b.start : b.end] for b in doc.blocks
    )
    assert all(a.end <= b.start for a, b in zip(doc.blocks, doc.blocks[1:], strict=False))


def test_markdown_headings_give_section_paths_but_not_inside_code_fences() -> None:
    text = "# Top\n\nintro\n\n## Sub\n\n```\n# not a heading\n```\n\nbody\n"
    doc = convert(text.encode(), "text/markdown")
    assert [h[2] for h in doc.headings] == ["Top", "Sub"]
    assert doc.section_path_at(text.index("body")) == ("Top", "Sub")
    assert doc.section_path_at(text.index("intro")) == ("Top",)


def test_real_markdown_fixture_has_headings() -> None:
    doc = convert((FIXTURES / "dockerfile-reference.md").read_bytes(), mime_for_path("x.md"))
    assert len(doc.headings) > 20


def _pdf_bytes(builder) -> bytes:
    pdf = pymupdf.open()
    builder(pdf)
    return pdf.tobytes()


def test_corrupt_pdf_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match="cannot open PDF"):
        convert(b"%PDF-1.7\n" + bytes(range(256)) * 4, "application/pdf")


def test_encrypted_pdf_is_a_conversion_error() -> None:
    def build(pdf):
        pdf.new_page().insert_text((72, 72), "secret text")

    pdf = pymupdf.open()
    build(pdf)
    data = pdf.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="owner")
    with pytest.raises(ConversionError, match="encrypted"):
        convert(data, "application/pdf")


def test_pdf_without_text_is_a_conversion_error() -> None:
    data = _pdf_bytes(lambda pdf: pdf.new_page().draw_rect(pymupdf.Rect(50, 50, 200, 200)))
    with pytest.raises(ConversionError, match="no extractable text"):
        convert(data, "application/pdf")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"  \n\n ", "empty"),
        (b"caf\xe9 au lait", "not valid UTF-8"),
        (b"\x7fELF\x02\x01\x01\x00\x00", "NUL bytes"),
    ],
)
def test_bad_text_is_a_conversion_error(data: bytes, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert(data, "text/plain")


def test_unsupported_type() -> None:
    with pytest.raises(UnsupportedDocument, match="image/png"):
        convert(b"\x89PNG", "image/png")
