"""HTML as pages really write it: end tags left out (as HTML allows), superscripts, tables with pipes, spans and
layout, code that holds a fence, headings that run on. Each converts to Markdown that keeps its structure and text."""

from __future__ import annotations

import time

from connector.convert import convert, html
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.test_convert import assert_tiles

SETTINGS = ChunkingSettings()


def page(body: str) -> Document:
    return convert(body.encode(), "text/html", SETTINGS)


def headings(d: Document) -> list[str]:
    return [b.section_path[-1] for b in d.blocks if b.kind == "heading" and b.section_path]


def test_paragraphs_without_end_tags_end_where_the_next_block_starts() -> None:
    """150 `<p>` without `</p>` nested 150 deep in html.parser's tree: the `<h2>` after them was no heading, and a
    `<title>` without `<head>` was the page's first paragraph."""
    paragraphs = "".join(f"<p>Paragraph {i} of a page that omits the optional end tag.\n" for i in range(1, 151))
    d = page(f"<!DOCTYPE html><title>Omitted p</title><h1>Essay</h1>\n{paragraphs}<h2>Conclusion</h2><p>Final.")
    assert_tiles(d)
    assert d.title == "Omitted p" and "Omitted p" not in d.markdown
    assert headings(d) == ["Essay", "Conclusion"]
    assert [b.kind for b in d.blocks].count("paragraph") == 151
    assert d.markdown.endswith("Paragraph 150 of a page that omits the optional end tag.\n\n## Conclusion\n\nFinal.\n")


def test_list_items_and_definitions_without_end_tags_are_one_a_line() -> None:
    items = "".join(f"<li>Item number {i} text\n" for i in range(1, 4))
    d = page(f"<html><body><h1>Shopping</h1><ul>\n{items}</ul><p>After list.</body></html>")
    assert d.markdown.splitlines() == [
        "# Shopping", "", "- Item number 1 text", "- Item number 2 text", "- Item number 3 text", "", "After list.",
    ]  # fmt: skip
    terms = "".join(f"<dt><b>TERM{i}</b><dd>Meaning of term {i}.\n" for i in range(1, 300))
    d = page(f"<html><body><h2>Terms</h2><dl>{terms}</dl><h2>After</h2><p>Text.</body></html>")
    assert headings(d) == ["Terms", "After"], "300 unclosed `<dd>`s were nested past the depth limit"
    assert "**TERM299**\n:   Meaning of term 299.\n" in d.markdown


def test_superscripts_and_subscripts_keep_their_numbers_apart() -> None:
    d = page(
        "<p>At most 2<sup>64</sup>-2 bytes, a ratio of 10<sup>-7</sup>, H<sub>2</sub>O, x<sub>i</sub>, "
        "2<sup>n+1</sup> and a<sub>i+1</sub>.</p>"
    )
    assert d.markdown == "At most 2^64-2 bytes, a ratio of 10^-7, H_2O, x_i, 2^(n+1) and a_(i+1).\n"


def test_a_pipe_in_a_table_cell_is_escaped() -> None:
    d = page("<table><tr><th>Op</th><th>Meaning</th></tr><tr><td><code>x | y</code></td><td>or</td></tr></table>")
    assert d.markdown == "| Op | Meaning |\n| --- | --- |\n| `x \\| y` | or |\n"


def test_a_row_under_a_rowspan_keeps_its_columns() -> None:
    d = page(
        "<table><tr><th>A</th><th>B</th><th>C</th></tr>"
        "<tr><td rowspan=2>spans</td><td>r1b</td><td>r1c</td></tr><tr><td>r2b</td><td>r2c</td></tr>"
        "<tr><td>r3a</td><td rowspan=3>to the end</td><td>r3c</td></tr><tr><td>r4a</td></tr></table>"
    )
    rows = d.markdown.splitlines()
    assert rows == [
        "| A | B | C |", "| --- | --- | --- |", "| spans | r1b | r1c |", "|  | r2b | r2c |",
        "| r3a | to the end | r3c |", "| r4a |  |  |",
    ]  # fmt: skip


def test_code_holding_a_fence_is_fenced_longer() -> None:
    d = page("<h1>Code</h1><pre>```\ncode containing a fence\n```</pre><p>After.</p>")
    assert d.markdown == "# Code\n\n````\n```\ncode containing a fence\n```\n````\n\nAfter.\n"
    assert [b.kind for b in d.blocks] == ["heading", "code", "paragraph"]


def test_a_layout_table_becomes_the_blocks_it_holds() -> None:
    """A page laid out with a table was one pipe-table row: headings lost, text glued."""
    sections = "".join(
        f"<h2>Section {i}</h2><p>Paragraph {i}.</p><ul><li>point a{i}</li><li>point b{i}</li></ul>" for i in (1, 2)
    )
    d = page(
        '<html><body><table width="100%"><tr><td width="20%"><a href="a.html">Nav one</a><br>'
        f'<a href="b.html">Nav two</a></td><td><h1>Layout Table Page</h1>{sections}</td></tr></table></body></html>'
    )
    assert headings(d) == ["Layout Table Page", "Section 1", "Section 2"]
    assert "|" not in d.markdown
    assert "\n## Section 2\n\nParagraph 2.\n\n- point a2\n- point b2\n" in d.markdown
    data = page("<table><tr><th><p>Name</p></th></tr><tr><td><p>one paragraph a cell</p></td></tr></table>")
    assert data.markdown == "| Name |\n| --- |\n| one paragraph a cell |\n", "Sphinx's cells stay a table"


def test_a_heading_ends_before_the_blocks_it_holds_and_a_long_one_is_a_paragraph() -> None:
    """sqlite's `<h2>Keyword Index</h1>`: the end tag does not match, so the heading held the whole index: one
    heading of 67,000 characters. A heading over `HEADING_MAX_CHARS` is a paragraph, as in PDFs."""
    d = page("<h2>Keyword Index</h1><ul><li><a href='a.html'>ACID</a><li>abs()</ul><p>After.</p>")
    assert d.markdown == "## Keyword Index\n\n- [ACID](a.html)\n- abs()\n\nAfter.\n"
    long = "word " * 40
    d = page(f"<h1>Title</h1><h2>{long}</h2><p>Body.</p>")
    assert headings(d) == ["Title"] and d.markdown == f"# Title\n\n{long.strip()}\n\nBody.\n"
    assert len(long.strip()) > html.HEADING_MAX_CHARS


def test_thousands_of_headings_that_run_on_convert_in_linear_time() -> None:
    entries = "".join(f"<h2>Entry {i}</h1><p>Text of entry {i}.</p>" for i in range(5000))
    started = time.perf_counter()
    d = page(f"<html><body>{entries}</body></html>")
    assert time.perf_counter() - started < 30  # moving each heading's rest out of it was quadratic: minutes
    assert headings(d) == [f"Entry {i}" for i in range(5000)]
    assert d.markdown.endswith("## Entry 4999\n\nText of entry 4999.\n")
