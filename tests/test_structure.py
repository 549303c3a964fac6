"""Structure-aware conversion: one test per rule, on real fixture documents or hand-made ones."""

from __future__ import annotations

import pymupdf
import pytest

from connector import tokens
from connector.convert import convert, mime_for_path
from connector.convert.markdown import blocks, split_large_tables
from connector.convert.pdf import REPEAT_SHARE, Para, clean, remove_furniture
from connector.models import Block
from tests.conftest import FIXTURES
from tests.test_convert import CHUNKING, assert_tiles


def unit_texts(doc) -> list[str]:
    return [doc.markdown[u.start : u.end].strip() for u in doc.units]


def test_running_headers_and_footers_are_removed_from_a_real_pdf() -> None:
    data = (FIXTURES / "debian-policy-p28-35.pdf").read_bytes()
    doc = convert(data, "application/pdf", CHUNKING)
    assert_tiles(doc)
    assert len(doc.page_starts) == 8
    assert "Debian Policy Manual, Release 4.6.2.0" not in doc.markdown  # header line of every page
    assert "Chapter 4. Source packages" not in doc.markdown  # running footer of even pages
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        raw = "\n".join(page.get_text() for page in pdf)
    assert raw.count("Debian Policy Manual, Release 4.6.2.0") >= 7  # they were there
    # Section titles in the body survive (only their running-footer copies go).
    assert "4.4 Debian changelog: debian/changelog" in doc.markdown


def test_furniture_detection_by_position_and_by_repetition() -> None:
    def page(n: int, body: str) -> list[Para]:
        return [
            Para("Manual, Release 1.0", 36, 45),
            Para(body, 80, 400),
            Para(f"Section {n} title that changes", 742, 752),
            Para(str(n), 760, 770),
        ]

    bodies = ["Alpha text here.", "Beta words there.", "Gamma content.", "Delta sentence.", "Epsilon remark."]
    pages = [page(n, body) for n, body in enumerate(bodies, start=1)]

    def texts(result):
        return [[p.text for p in paragraphs] for paragraphs in result]

    assert texts(remove_furniture(pages, REPEAT_SHARE)) == [[body] for body in bodies]
    # Two pages are too few to call anything furniture, except bare page numbers.
    assert texts(remove_furniture(pages[:2], REPEAT_SHARE)) == [[p.text for p in pg[:3]] for pg in pages[:2]]


def test_hyphenation_and_ligatures_are_repaired() -> None:
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "The effect is well estab-\nlished in the literature, a non-\nNegotiable point.")
    doc = convert(pdf.tobytes(), "application/pdf", CHUNKING)
    flat = " ".join(doc.markdown.split())
    assert "well established in the literature" in flat
    assert "non-Negotiable" in flat, "a hyphen before a capital is a real hyphen (kept, the line joined)"
    # Ligature code points (as LaTeX PDFs yield them) are unfolded; the base-14 font above cannot draw them.
    assert clean("signi\ufb01cance of this e\ufb00ect, \ufb02ow") == "significance of this effect, flow"


def test_heading_is_bound_to_the_block_after_it() -> None:
    text = "# Title\n\n" + "Body sentence with several words. " * 40 + "\n\n## Next\n\n" + "More words here. " * 40
    doc = convert(text.encode(), "text/markdown", CHUNKING)
    assert [b.kind for b in doc.blocks] == ["heading", "paragraph", "heading", "paragraph"]
    assert len(doc.units) == 2 and unit_texts(doc)[0].startswith("# Title\n\nBody")


def test_list_is_kept_with_its_lead_in_and_footnote_with_its_paragraph() -> None:
    long = "This paragraph is long enough not to be grouped with its neighbours as a short one. " * 12
    lead_in = "You need the following:\n\n- a keyboard\n- a screen"
    text = f"{long}\n\n{lead_in}\n\n{long}[^1]\n\n[^1]: The footnote.\n\n{long}\n"
    doc = convert(text.encode(), "text/markdown", CHUNKING)
    kinds = [b.kind for b in doc.blocks]
    assert kinds == ["paragraph", "paragraph", "list", "paragraph", "footnote", "paragraph"]
    units = unit_texts(doc)
    assert lead_in in units
    assert any(u.endswith("[^1]: The footnote.") and u.startswith("This paragraph") for u in units)


def test_short_paragraphs_are_grouped_but_not_endlessly() -> None:
    text = "\n\n".join(f"Short line number {i}." for i in range(60))
    doc = convert(text.encode(), "text/plain", CHUNKING)
    assert len(doc.blocks) == 60
    sizes = [tokens.count(t, CHUNKING.encoding) for t in unit_texts(doc)]
    assert 1 < len(doc.units) < 60
    assert all(n < 2 * 100 for n in sizes)


def test_rst_underlined_headings_and_levels() -> None:
    doc = convert((FIXTURES / "debian-manifesto.txt").read_bytes(), mime_for_path("x.txt"), CHUNKING)
    assert_tiles(doc)
    headings = [b for b in doc.blocks if b.kind == "heading"]
    assert headings[0].section_path == ("Appendix The Debian Manifesto",)
    assert headings[1].section_path == ("Appendix The Debian Manifesto", "What is Debian Linux?")
    assert doc.section_path_at(doc.markdown.index("Debian Linux is a brand-new")) == headings[1].section_path


def test_html_keeps_headings_tables_and_visible_text_only() -> None:
    doc = convert((FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes(), "text/html", CHUNKING)
    assert_tiles(doc)
    assert "<" not in doc.markdown.replace("<=", "").replace("< ", "")[:2000]
    tables = [doc.markdown[b.start : b.end] for b in doc.blocks if b.kind == "table"]
    assert any("| Name | Storage Size | Description | Range |" in t for t in tables)
    assert "| `bigint` | 8 bytes | large-range integer |" in doc.markdown
    assert any(b.section_path == ("8.1. Numeric Types",) for b in doc.blocks if b.kind == "heading")
    assert "DOCTYPE" not in doc.markdown and "stylesheet" not in doc.markdown


def test_large_table_is_split_by_rows_repeating_header_and_caption() -> None:
    rows = "\n".join(f"| item {i} | a value described in several words {i} | note {i} |" for i in range(150))
    text = f"Intro.\n\nTable 3: Measured values.\n\n| name | value | note |\n|---|---|---|\n{rows}\n\nAfter.\n"
    out = split_large_tables(text, 1000, CHUNKING.encoding)
    parts = [b for b in blocks(out) if b.kind == "table"]
    assert len(parts) >= 3
    for part in parts:
        body = out[part.start : part.end]
        assert body.startswith("| name | value | note |\n|---|---|---|\n")
        assert tokens.count(body, CHUNKING.encoding) <= 1000
    captions = [out[b.start : b.end].strip() for b in blocks(out) if b.kind == "caption"]
    assert captions == ["Table 3: Measured values."] * len(parts)
    all_rows = [line for p in parts for line in out[p.start : p.end].splitlines()[2:] if line.strip()]
    assert all_rows == rows.splitlines(), "every row kept once, in order"
    assert split_large_tables("| a |\n|---|\n| 1 |\n", 1000, CHUNKING.encoding) == "| a |\n|---|\n| 1 |\n"


def test_units_are_what_block_integrity_scores() -> None:
    from connector.metrics.blocks import block_integrity
    from connector.models import Chunk

    text = "# Title\n\n" + "Words in the body. " * 60
    doc = convert(text.encode(), "text/markdown", CHUNKING)
    cut_after_heading = [Chunk(0, 9, "", 1), Chunk(9, len(text), "", 1)]
    # Between heading and body is a block boundary, but not a split point: the unit is broken.
    assert block_integrity(doc.blocks, cut_after_heading) == 1.0
    assert block_integrity(doc.units, cut_after_heading) == 0.0


@pytest.mark.parametrize("kind", ["heading", "paragraph", "table", "list", "code", "caption", "footnote"])
def test_block_kinds_are_the_documented_ones(kind: str) -> None:
    from connector.models import BLOCK_KINDS

    assert kind in BLOCK_KINDS and Block(0, 1, kind).kind == kind


def _typeset(pages: list[list[tuple[float, float, str]]]) -> bytes:
    """A PDF whose pages hold (y, font size, text) lines, set in Helvetica."""
    pdf = pymupdf.open()
    for lines in pages:
        page = pdf.new_page()
        for y, size, text in lines:
            page.insert_text((72, y), text, fontsize=size)
    return pdf.tobytes()


def test_pdf_headings_by_font_size_footnotes_and_escaping() -> None:
    body = "Body text set at the ordinary size of this document, long enough to count as the body.1"
    data = _typeset(
        [
            [
                (72, 22, "Main Title"),
                (110, 16, "1 Introduction"),
                (140, 11, body),
                (160, 11, "# this line starts with a hash but is text"),
                (700, 8, "1 The footnote that explains the body text."),
            ]
        ]
    )
    doc = convert(data, "application/pdf", CHUNKING)
    kinds = {doc.markdown[b.start : b.end].strip(): b.kind for b in doc.blocks}
    assert kinds["# Main Title"] == "heading"
    assert kinds["## 1 Introduction"] == "heading"
    assert kinds["[^1]: The footnote that explains the body text."] == "footnote"
    assert doc.section_path_at(doc.markdown.index("Body text")) == ("Main Title", "1 Introduction")
    assert "\\# this line starts with a hash" in doc.markdown
    assert not any(t.startswith("# this line") for t in kinds)
    footnote_unit = next(u for u in doc.units if "The footnote" in doc.markdown[u.start : u.end])
    assert "Body text" in doc.markdown[footnote_unit.start : footnote_unit.end], "bound to the text before it"


def test_long_pdfs_are_extracted_in_parallel_with_the_same_result() -> None:
    from connector.convert import pdf

    pages = [[(72, 11, f"Page {n} says something different: {'word ' * (n % 7 + 3)}")] for n in range(70)]
    data = _typeset(pages)
    assert len(pages) >= pdf.PARALLEL_MIN_PAGES
    extracted, said = pdf._extract(data, len(pages), False)
    assert extracted == pdf.extract_pages(data, 0, len(pages), False) and not any(said), said


def test_a_table_inside_a_definition_list_entry_keeps_its_header_for_its_chunks() -> None:
    """An entry's blocks are one `list` unit, but a table in it stays a table: joined into the entry, a 400-row
    table was one 15 KB unit, never split by rows, and a chunk cut out of it was embedded without its column names
    (`embed.table_header` reads `table` blocks only)."""
    from connector.embed import table_header

    rows = "".join(f"<tr><td>r{i}</td><td>value {i} with some words</td></tr>" for i in range(400))
    page = (
        "<html><body><h1>Options</h1><dl><dt>--format</dt><dd><p>The formats:</p>"
        f"<table><tr><th>key</th><th>val</th></tr>{rows}</table><p>After the table.</p></dd>"
        "<dt>--quiet</dt><dd><p>Say less.</p></dd></dl></body></html>"
    )
    doc = convert(page.encode(), "text/html", CHUNKING)
    assert_tiles(doc)
    kinds = [b.kind for b in doc.blocks]
    assert kinds[:2] == ["heading", "list"] and kinds.count("table") > 1, kinds  # split by rows
    assert kinds[-2:] == ["list", "list"], "after the table: the rest of the entry, then the next entry"
    assert table_header(doc, doc.markdown.index("| r300 ")) == "| key | val |\n| --- | --- |\n"
