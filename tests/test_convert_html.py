"""HTML as pages really write it: end tags left out (as HTML allows), superscripts, tables with pipes, spans and
layout, code that holds a fence, headings that run on. Each converts to Markdown that keeps its structure and text."""

from __future__ import annotations

from connector.convert import convert, html
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import assert_linear
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


def test_thousands_of_headings_that_run_on_convert_in_linear_work() -> None:
    """Moving each heading's rest out of it was quadratic: minutes for 5,000. Counted, not timed: twice the headings,
    twice the work (a walk of the page for each heading, the shape that bug had, made it 3.1 times)."""

    def entries(n: int) -> Document:
        return page("<html><body>" + "".join(f"<h2>Entry {i}</h1><p>Text of entry {i}.</p>" for i in range(n)))

    d = entries(5000)
    assert headings(d) == [f"Entry {i}" for i in range(5000)]
    assert d.markdown.endswith("## Entry 4999\n\nText of entry 4999.\n")
    assert_linear(entries, 300, "headings that run on")


def test_a_contents_class_is_removed_only_when_it_holds_a_table_of_contents() -> None:
    """Doxygen wraps the whole page body in `<div class="contents">`: removed as a table of contents by its class, a
    302 KB header's reference page kept 183 characters. A table of contents is what is mostly links, and not the
    whole page; doxygen's own `div.toc` inside its `div.contents` still goes."""
    prose = "Creates a 2D rendering context for a window, which draws with the given flags. " * 3
    d = page(
        '<html><title>SDL: SDL_render.h File Reference</title><body><div id="titlearea"><table><tr><td>SDL 2.0'
        '</td></tr></table></div><div class="header"><div class="headertitle"><div class="title">SDL_render.h File '
        'Reference</div></div></div><div class="contents"><div class="toc"><h3>Table of Contents</h3><ul>'
        '<li><a href="#f">Functions</a></li><li><a href="#d">Function Documentation</a></li></ul></div>'
        '<table class="memberdecls"><tr class="heading"><td colspan="2"><h2 class="groupheader">Functions</h2>'
        '</td></tr><tr><td class="memItemLeft">int&#160;</td><td class="memItemRight">'
        '<a href="#a1">SDL_GetNumRenderDrivers</a> (void)</td></tr></table>'
        '<h2 class="groupheader">Function Documentation</h2><h2 class="memtitle"><span class="permalink">'
        f'<a href="#a2">&#9670;&#160;</a></span>SDL_CreateRenderer()</h2><div class="memdoc"><p>{prose}</p>'
        '<div class="fragment"><div class="line"><a id="l00001"></a><span class="lineno">    1</span>'
        '<span class="keyword">if</span> (!renderer) {</div><div class="line"><span class="lineno">    2</span>'
        '    <a href="#e">SDL_GetError</a>();</div><div class="line"><span class="lineno">    3</span>}</div>'
        '<div class="ttc" id="t1"><div class="ttname"><a href="#e">SDL_GetError</a></div></div></div>'
        "</div></div></body></html>"
    )
    assert_tiles(d)
    assert prose.strip() in d.markdown, "the page body is kept"
    assert "Table of Contents" not in d.markdown and "SDL 2.0" not in d.markdown and "◆" not in d.markdown
    assert [b.section_path for b in d.blocks if b.kind == "heading"] == [
        ("SDL_render.h File Reference",),
        ("SDL_render.h File Reference", "Functions"),
        ("SDL_render.h File Reference", "Function Documentation"),
        ("SDL_render.h File Reference", "Function Documentation", "SDL_CreateRenderer()"),
    ]
    assert "\nint [SDL_GetNumRenderDrivers](#a1) (void)\n" in d.markdown, "a declaration is one line"
    assert "```\nif (!renderer) {\n    SDL_GetError();\n}\n```" in d.markdown, "a listing is code, no line numbers"
    texinfo = page(
        '<div class="contents"><h2 class="contents-heading">Table of Contents</h2><ul><li><a href="#i">1 '
        'Introduction</a></li><li><a href="#u">2 Usage</a></li></ul></div><h2 id="i">1 Introduction</h2>'
        f"<p>{prose}</p>"
    )
    assert "Table of Contents" not in texinfo.markdown and headings(texinfo) == ["1 Introduction"]
    index = page('<h1>Files</h1><div class="contents"><ul><li><a href="a.html">a.h</a> Audio</li><li>'
                 '<a href="v.html">video.h</a> Video</li></ul></div>')  # fmt: skip
    assert "[video.h](v.html) Video" in index.markdown, "a list of links that is the whole page is its content"


def test_lists_whose_items_hold_sections_are_structure_not_lists() -> None:
    """The javadoc doclet (JDK 9 and later) puts each section and each method's `<h3>` in `<ul><li><section>`:
    `- ## Method Details`, `  - ### charAt` came out as one list block of the whole page, without a heading."""
    methods = "".join(
        f'<li><section class="detail" id="m{i}"><h3>method{i}</h3><div class="member-signature">public int '
        f'method{i}()</div><div class="block">Returns the value number {i}.</div><dl class="notes"><dt>Returns:'
        f"</dt><dd>the value</dd></dl></section></li>"
        for i in range(3)
    )
    d = page(
        '<main role="main"><h1 class="title">Class String</h1><section class="details"><ul class="details-list">'
        '<li><section class="method-details"><h2>Method Details</h2><ul class="member-list">'
        f"{methods}</ul></section></li></ul></section><ul><li>An ordinary list</li><li>stays a list</li></ul></main>"
    )
    assert_tiles(d)
    assert [b.section_path for b in d.blocks if b.kind == "heading"] == [
        ("Class String",), ("Class String", "Method Details"),
        *[("Class String", "Method Details", f"method{i}") for i in range(3)],
    ]  # fmt: skip
    assert "\n### method2\n\npublic int method2()\n\nReturns the value number 2.\n" in d.markdown
    lists = [d.markdown[b.start : b.end].split("\n", 1)[0] for b in d.blocks if b.kind == "list"]
    assert lists == ["Returns:"] * 3 + ["- An ordinary list"], "the ordinary list, and each `<dl>` entry"
    assert "- An ordinary list\n- stays a list\n" in d.markdown


def test_section_paths_hold_a_headings_text_not_its_markdown() -> None:
    """rustdoc's headings are links: section_path held `Struct [std](../index.html)::[vec](index.html)::[Vec](#)`,
    and each method's heading rustdoc's hidden "Notable traits" tooltip. The Markdown source is unchanged."""
    d = page(
        '<h1 class="fqn">Struct <a href="../index.html">std</a>::<a href="index.html">vec</a>::<a href="#">Vec'
        '</a></h1><h4 class="code-header">pub fn <a href="#method.new" class="fnname">with_capacity</a>(capacity: '
        '<a href="../primitive.usize.html">usize</a>) -&gt; Vec&lt;T&gt;<span class="notable-traits"><span '
        'class="notable-traits-tooltip">ⓘ<span class="notable">Notable traits for Vec</span></span></span></h4>'
        '<h5 id="examples"><a href="#examples">Examples</a></h5><pre class="rust">let v = Vec::new();</pre>'
        '<a class="test-arrow" href="https://play.rust-lang.org/?code=let%20v">Run</a>'
        '<h5>Array of <a href="a.html">[</a>T<a href="a.html">; N]</a></h5>'
    )
    assert_tiles(d)
    assert [b.section_path for b in d.blocks if b.kind == "heading"][2] == (
        "Struct std::vec::Vec", "pub fn with_capacity(capacity: usize) -> Vec<T>", "Examples")  # fmt: skip
    assert headings(d)[-1] == "Array of [T; N]"
    assert "# Struct [std](../index.html)::[vec](index.html)::[Vec](#)\n" in d.markdown
    assert "Notable traits" not in d.markdown and "play.rust-lang.org" not in d.markdown
    md = convert(
        b'# The `WITH` *Clause* &amp; [links](https://x.org "t")\n\n## ![](logo.png)\n\n'
        b"## impl<T> Vec<T> <a name='x'></a>\n",
        "text/markdown",
        SETTINGS,
    )
    assert md.title == "The WITH Clause & links"
    assert [b.section_path[-1] for b in md.blocks if b.kind == "heading"] == [
        "The WITH Clause & links", "![](logo.png)", "impl<T> Vec<T>"]  # fmt: skip
    rst = convert(b"Using ``-dNEWPDF``\n==================\n\nText.\n\nThe `Sphinx <https://x.org>`_ *tool*\n"
                  b"------------------------------------\n\nMore.\n", "text/x-rst", SETTINGS)  # fmt: skip
    assert [b.section_path for b in rst.blocks if b.kind == "heading"] == [
        ("Using -dNEWPDF",), ("Using -dNEWPDF", "The Sphinx tool")]  # fmt: skip


def test_line_number_gutters_and_book_site_navigation_are_dropped() -> None:
    """rustdoc's source pages put `<pre class="line-numbers">` beside the code: a code block of 3,007 bare numbers
    opened the page. Publican (the Debian handbook) keeps its ebook banner, logos and prev/next `ul.docnav` on every
    page."""
    numbers = "\n".join(f'<span id="{i}">{i}</span>' for i in range(1, 40))
    code = "\n".join(f"let x{i} = {i};" for i in range(1, 40))
    d = page(f'<div class="example-wrap"><pre class="line-numbers">{numbers}</pre><pre class="rust">{code}</pre></div>')
    assert d.markdown == f"```\n{code}\n```\n"
    pygments = page(
        '<table class="highlighttable"><tr><td class="linenos"><div class="linenodiv"><pre>1\n2</pre></div></td>'
        '<td class="code"><div class="highlight"><pre>a = 1\nb = 2</pre></div></td></tr></table>'
    )
    assert pygments.markdown == "```\na = 1\nb = 2\n```\n"
    book = page(
        '<body><div id="banner"><a href="http://x/get/"><span class="text">Download the ebook</span></a></div>'
        '<p id="title"><a class="left" href="http://www.debian.org"><img alt="Product Site" src="l.png"></a></p>'
        '<ul class="docnav top"><li class="previous"><a href="p.html"><strong>Prev</strong></a></li></ul>'
        '<div class="chapter"><h1 class="title">Chapter 6. APT</h1><div class="para">Text of the chapter.</div>'
        '</div><ul class="docnav"><li class="next"><a href="n.html"><strong>Next</strong>6.2. aptitude</a></li>'
        "</ul></body>"
    )
    assert book.markdown == "# Chapter 6. APT\n\nText of the chapter.\n"
