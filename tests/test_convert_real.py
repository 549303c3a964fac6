"""Conversion of the documents people actually drop in (issue 13), on real files from Debian packages
(`fixtures/real/SOURCES.md` says where each comes from and under which licence)."""

from __future__ import annotations

import gzip
import re
import subprocess
import zipfile
from pathlib import Path

import psycopg
import pymupdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.convert import convert, markdown, mime_for_path, pdf_layout, sniff, text
from connector.db.database import connect
from connector.db.store import Store
from connector.errors import ConversionError
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES, child_env, connector_cmd
from tests.test_convert import assert_tiles

REAL = FIXTURES / "real"
CHUNKING = ChunkingSettings()
FILES = sorted(p.name for p in REAL.iterdir() if p.is_file() and p.suffix not in (".md", ".tex"))


def doc(name: str, **changes) -> Document:
    path = REAL / name
    return convert(path.read_bytes(), mime_for_path(path), CHUNKING.model_copy(update=changes))


def headings(d: Document) -> list[str]:
    return [b.section_path[-1] for b in d.blocks if b.kind == "heading" and b.section_path]


_LEADER = re.compile(r"(?:\.\s?){4,}\s*\d")
_NUMBERS_AT_END = re.compile(r"(?:^|[\s,])(?:\d{1,4}|[ivxlc]{1,6})\s*$", re.IGNORECASE)


def mostly_navigation(text: str) -> bool:
    """A span most of whose lines are dot-leader entries, end in page numbers, or are bare numbers."""
    lines = [line for line in text.splitlines() if line.strip() and not set(line.strip()) <= set("|-: ")]
    if len(lines) < 3:
        return False
    nav = sum(bool(_LEADER.search(line) or _NUMBERS_AT_END.search(line.strip(" |"))) for line in lines)
    return nav > 0.5 * len(lines)


@pytest.mark.parametrize("name", FILES)
def test_every_real_document_converts_with_exact_offsets(name: str) -> None:
    d = doc(name)
    assert_tiles(d)
    # No metadata, no heading left.
    untitled = {"officer-table-complex.docx", "beamer-userguide-index-p226-p227.pdf",
                "doxygen-manual-p29-p105.pdf", "arphic-ARPHICPL-gb.txt", "jed-changelog-excerpt.txt",
                "mgp-sample-fr.mgp", "nkf.doc.gz"}  # fmt: skip
    untitled |= {"postgresql-common-dependencies.svg"}  # an SVG without a <title>
    untitled |= {"rustdoc-search-index-excerpt.js"}  # one line of JavaScript
    untitled |= {"ieeepes-doc-p4-p6.pdf"}  # its last pages: no metadata title, the title page not kept
    # tables: a CSV has no title, the workbooks have none in their properties (a sheet's name is not the file's)
    untitled |= {"penguins.csv", "readxl-datasets.xlsx", "readxl-deaths.xlsx", "penguins-by-species.ods"}
    untitled |= {"readxl-datasets.xls", "readxl-deaths.xls"}  # xlrd reads no document properties
    untitled |= {"olefile-test-ole-file.doc"}  # one paragraph; its properties name an author only
    untitled |= {"bc.info.gz"}  # its Top node has no heading, only a menu
    untitled |= {"groff.info-2-excerpt.gz"}  # a split manual's second part: no Top node
    # prose, then several headings of one level: none names the whole (ikiwiki titles the page by its file name)
    untitled |= {"ikiwiki-directive-template.mdwn", "emacs-TUTORIAL.ja-excerpt"}
    untitled |= {"gworkspace-help-recycler.rtf"}  # no \info title, and its "The Recycler" is only set large
    assert d.title or name in untitled, "the others say what they are called"
    if d.page_starts:
        assert list(d.page_starts) == sorted(d.page_starts) and d.page_starts[-1] <= len(d.markdown)
        assert all(b.page is not None and 1 <= b.page <= len(d.page_starts) for b in d.blocks)
    assert not [p for b in d.blocks for p in b.section_path if "¶" in p], "no permalink anchors in section paths"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", d.markdown), "no control character (nor an internal marker)"


def test_two_column_paper_reads_column_by_column() -> None:
    d = doc("dtc-paper-twocol.pdf")
    numbers = [m.group(0) for h in headings(d) if (m := re.match(r"\d+(?:\.\d+)*", h))]
    assert numbers == ["1", "1.1", "1.2", "2", "2.1", "2.2", "2.3", "3", "3.1", "3.2", "3.3", "4", "4.1", "4.2"]
    text = d.markdown
    assert text.index("We present a method") < text.index("1 Introduction"), "the abstract stays before section 1"
    assert d.page_at(text.index("## 2 The Flattened Tree")) == 2
    assert d.title == "Device trees everywhere", "no metadata title: the first top-level heading"


def test_single_column_pages_keep_their_order() -> None:
    """Column detection leaves a one-column manual's pages as PyMuPDF orders them (tables and lists included)."""
    data = (FIXTURES / "debian-policy-p28-35.pdf").read_bytes()
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        for page in pdf:
            blocks = [b for b in page.get_text("dict", sort=True)["blocks"] if b["type"] == 0]
            assert pdf_layout.reading_order(blocks, page.rect.width, page.rect.height) == blocks


@pytest.mark.parametrize(
    "name",
    ["beamer-userguide-toc-p3-p10.pdf", "listings-manual-toc-p1-p2-index-p61-p63.pdf",
     "beamer-userguide-index-p226-p227.pdf"],
)  # fmt: skip
def test_contents_and_index_pages_are_not_content(name: str) -> None:
    kept = doc(name, keep_navigation=True)
    assert any(mostly_navigation(kept.markdown[b.start : b.end]) for b in kept.blocks), "the fixture has them"
    d = doc(name)
    offenders = [d.markdown[b.start : b.end][:80] for b in d.blocks if mostly_navigation(d.markdown[b.start : b.end])]
    assert not offenders
    assert len(d.markdown) < 0.6 * len(kept.markdown)


def test_the_body_after_a_table_of_contents_is_kept() -> None:
    d = doc("beamer-userguide-toc-p3-p10.pdf")
    assert {"1 Introduction", "1.1 Main Features", "1.2 History"} <= set(headings(d))
    assert all(d.page_at(d.markdown.index(h)) >= 6 for h in ("1.1 Main Features", "1.2 History"))
    listings = doc("listings-manual-toc-p1-p2-index-p61-p63.pdf")
    assert listings.title == "The Listings Package"  # PDF metadata


def test_a_chapter_heading_above_the_chapters_own_contents_list_is_kept() -> None:
    """doxygen's manual opens each chapter with "Chapter N", its title and a list of its sections with dot leaders:
    the list goes, the heading stays, and the chapter's sections are filed under it (not under the chapter before)."""
    d = doc("doxygen-manual-p29-p105.pdf")
    assert {"Chapter 3", "Getting started", "Chapter 18", "Frequently Asked Questions"} <= set(headings(d))
    assert d.section_path_at(d.markdown.index("You should use the \\mainpage command")) == (
        "Frequently Asked Questions",
        "18.1 How to get information on the index page in HTML?",
    )
    assert "Step 1: Creating a configuration file" not in d.markdown, "the chapter's contents list is navigation"
    assert not [b for b in d.blocks if mostly_navigation(d.markdown[b.start : b.end])]


def test_arabic_and_farsi_words_are_stored_as_the_letters_a_keyboard_types() -> None:
    """The PDF writes the shaped glyphs' codes (Arabic Presentation Forms): "عربي" came out as "ﻋﺮﺑﻲ", which no
    query typed with ordinary letters matches."""
    d = doc("arabi-user-guide-p12.pdf")
    assert "عربي" in d.markdown and "فارسی" in d.markdown and "مقدمة" in headings(d)[0]
    assert not re.search(r"[\uFB50-\uFDFD\uFE70-\uFEFE]", d.markdown), "no presentation form is left"


def test_a_manual_page_set_by_groff_has_its_sections_title_and_options_as_typed() -> None:
    """groff sets a man page's section names in bold at body size, left of the indented text, and every option's dash
    as U+2212 MINUS SIGN: no heading, no title, and `--debugger` was not found."""
    d = doc("bash-manual-groff-p1-p4-p7.pdf")
    assert headings(d)[:5] == ["NAME", "SYNOPSIS", "COPYRIGHT", "DESCRIPTION", "OPTIONS"]
    assert d.title == "bash \u2212 GNU Bourne-Again SHell"  # its NAME line, as the page writes it
    assert d.section_path_at(d.markdown.index("A pipeline is a sequence")) == ("SHELL GRAMMAR", "Pipelines")
    assert "--debugger" in d.markdown and "-c" in d.markdown and not re.search("\u2212[a-z]", d.markdown)
    # an option in bold over its description is text of its section, not a heading
    assert "--debugger" not in headings(d)
    assert d.section_path_at(d.markdown.index("--debugger")) == ("OPTIONS",)


def test_a_word_in_capitals_broken_across_lines_is_joined_and_a_dash_clause_is_no_list_item() -> None:
    """bash.pdf breaks "COPROC" as "CO-" / "PROC" (the page writes COPROC 18 times); the lme4 paper starts a line
    inside a paragraph with an en dash ("– that is, by simulating data"), which became a list item."""
    bash = doc("bash-manual-groff-p1-p4-p7.pdf").markdown
    assert "default name is COPROC." in bash and "CO-" not in bash
    d = doc("lme4-lmer-jss-p28.pdf")
    assert "bootstrapping\n\u2013 that is, by simulating data" in d.markdown
    assert not [b for b in d.blocks if b.kind == "list"]


def test_sphinx_page_keeps_its_content_and_drops_the_site_around_it() -> None:
    d = doc("sphinx-jinja2-sandbox.html")
    assert headings(d) == ["Sandbox", "Security Considerations", "API", "Operator Intercepting"]
    assert d.title == "Sandbox — Jinja Documentation (3.1.x)"
    for chrome in ("¶", "Quick search", "Navigation", "Created using", "Permalink", "previous |", "modules |"):
        assert chrome not in d.markdown, chrome
    assert "SandboxedEnvironment" in d.markdown and "```" in d.markdown, "code kept"
    postgres = convert((FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes(), "text/html", CHUNKING)
    assert "[Prev]" not in postgres.markdown and "[Next]" not in postgres.markdown, "DocBook navheader/navfooter"
    assert "| Name | Storage Size | Description | Range |" in postgres.markdown, "tables kept"


def test_beamer_deck_frame_titles_are_headings_and_overlays_collapse() -> None:
    d = doc("beamer-conference-talk.pdf")
    titles = headings(d)
    for frame in ("Outline", "What is haplotyping and why is it important?", "Our formalization of haplotyping.",
                  "The formal computational problem.", "Summary"):  # fmt: skip
        assert frame in titles, frame
    assert titles.count("How blocks help in perfect phylogeny haplotyping.") <= 2, "4 overlay steps, not 4 copies"
    assert d.markdown.count("Partition the site set into overlapping contiguous blocks.") == 1
    assert len(d.page_starts) == 31, "the page map keeps every page"
    item = d.markdown.index("Partition the site set")
    assert d.block_at(item).kind == "list" and "| 1 | Partition" not in d.markdown, "a numbered list, not a table"
    assert d.title.startswith("On the Complexity of SNP Block Partitioning")
    assert "Bad News: Hardness Results | Good News" not in d.markdown, "the navigation headline is furniture"


def test_pptx_slides_are_pages_with_titles_lists_and_tables() -> None:
    d = doc("officer-example.pptx")
    assert headings(d) == ["Title", "Hi", "Slide 3"]
    assert len(d.page_starts) == 3 and d.page_at(d.markdown.index("## Hi")) == 2
    assert d.title == "document title"
    assert "| Header 1 | Header 2 | Header 3 |" in d.markdown
    assert d.block_at(d.markdown.index("This is an ordered")).kind == "list"


def test_docx_headings_lists_tables_and_core_title() -> None:
    d = doc("officer-example.docx")
    assert d.title == "document title"
    assert headings(d) == ["Title 1", "Title 2", "Sub title 1", "Sub title 2"]
    assert [b.section_path for b in d.blocks if b.kind == "heading"][2] == ("Title 2", "Sub title 1")
    assert "| Petals | Internode | Sepal | Bract |" in d.markdown
    assert d.block_at(d.markdown.index("Quisque tristique")).kind == "list"
    assert doc("officer-table-complex.docx").title is None, "an empty core title is none (the file name: pipeline)"


def test_odt_paragraphs_in_a_fixed_pitch_style_are_code_blocks_with_their_indentation() -> None:
    """ODT code listings are paragraphs in a monospaced style (the live manual's `P_code`, odfpy's `Example` in
    Courier): each came out a Markdown paragraph of its own, escaped (61 root prompts `# lb build` written
    `\\# lb build`), and `text:s` runs collapsed to one space, so a Python loop lost its indentation."""
    live = doc("live-manual-en.odt")
    assert "```\n# lb build\n```" in live.markdown
    assert "\\#" not in live.markdown
    assert live.block_at(live.markdown.index("$ mkdir live-default && cd live-default")).kind == "code"
    api = doc("odfpy-api.odt")
    loop = "for paragraph in doc.getElementsByType(text.P):\n    print paragraph.getAttribute('stylename')\n```"
    assert loop in api.markdown
    example = api.markdown.index("from odf.opendocument import OpenDocumentText")
    block = api.block_at(example)
    assert block.kind == "code" and block.section_path[-1] == "Example"
    lines = api.markdown[block.start : block.end].strip().splitlines()
    assert len(lines) == 26 and lines[4] == "", "one block of 24 lines between its fences, its blank line kept"
    assert len([b for b in api.blocks if b.kind == "code"]) == 15
    assert "Unlike other more convenient APIs" in api.markdown


def test_an_underlined_title_with_its_text_right_below_is_a_heading() -> None:
    """git's manuals are AsciiDoc shipped as `.txt`: `NAME` / `----` / `git-rebase - …` with no blank line between,
    which reStructuredText allows too. NAME, SYNOPSIS, DESCRIPTION and OPTIONS were no headings (22 of 24 found),
    their text under the page title; and three listings whose `----` rules are as long as the command
    (`$ git rebase -i HEAD~5`) were headings."""
    d = doc("git-rebase-asciidoc.txt")
    assert headings(d) == GIT_REBASE_HEADINGS
    assert d.title == "git-rebase(1)"
    name = d.markdown.index("git-rebase - Reapply commits on top of another base tip")
    assert d.block_at(name).kind == "paragraph" and d.section_path_at(name) == ("git-rebase(1)", "NAME")
    assert d.section_path_at(d.markdown.index("--onto <newbase>::")) == ("git-rebase(1)", "OPTIONS")
    listing = d.block_at(d.markdown.index("$ git rebase -i HEAD~5"))
    assert listing.kind == "paragraph" and listing.section_path == ("git-rebase(1)", "INTERACTIVE MODE")
    assert not [h for h in headings(d) if h.startswith(("[", "$"))], "no block label, attribute or command"


GIT_REBASE_HEADINGS = [
    "git-rebase(1)", "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "INCOMPATIBLE OPTIONS", "BEHAVIORAL DIFFERENCES",
    "Empty commits", "Directory rename detection", "Context", "Labelling of conflicts markers", "Hooks",
    "Interruptability", "Commit Rewording", "Miscellaneous differences", "NOTES", "INTERACTIVE MODE",
    "SPLITTING COMMITS", "RECOVERING FROM UPSTREAM REBASE", "The easy case", "The hard case", "REBASING MERGES",
    "CONFIGURATION", "GIT",
]  # fmt: skip


def test_epub_odt_rmd_asciidoc_and_org_have_headings_and_titles() -> None:
    epub = doc("debian-history-en.epub")
    assert epub.title == "A Brief History of Debian"
    assert {"Chapter 2. Leadership", "4.1. The 0.x Releases"} <= set(headings(epub))
    odt = doc("live-manual-en.odt")
    assert odt.title == "Live Systems Manual" and {"About this manual", "Installation"} <= set(headings(odt))
    rmd = doc("knitr-knit_print.Rmd")
    assert rmd.title == "Custom Print Methods"
    assert headings(rmd) == [
        "Customize Printing",
        "A Low-level Explanation",
        "The render option",  # `render` in the source: section paths hold text, not its markup
        "Metadata",
        "For package authors",
    ]  # fmt: skip  (no `#` comment of an R chunk among them)
    adoc = doc("asciidoctor-syntax.adoc")
    assert adoc.title == "AsciiDoc Syntax"
    assert {"Paragraphs", "Text Formatting", "Unordered", "Ordered"} <= set(headings(adoc))
    assert not [h for h in headings(adoc) if set(h) <= set("=")], "==== delimits a block, it is no heading"
    assert doc("rdiff-backup-FAQ.adoc").title == "rdiff-backup: F.A.Q.", "attribute references resolved"
    org = doc("postmodern-simple-date.org")
    assert org.title == "Simple-Date" and {"Date type", "class date"} <= set(headings(org))
    assert [b.section_path for b in org.blocks if b.section_path[-1:] == ("class date",)][0] == (
        "Date type", "class date")  # fmt: skip


def test_latin1_tex_is_read_in_the_charset_it_declares() -> None:
    """It failed as "not valid UTF-8 text (byte 0xa1 at offset 309)"; then its charset was guessed, the comment's
    `¡` read as Windows-1250's `ˇ`. Its `\\usepackage[latin1]{inputenc}` says Latin-1: the same text, headings
    and names as its UTF-8 copy."""
    latex = (REAL / "beamer-conference-talk.tex").read_bytes().decode("latin-1").encode()
    d = convert(latex, "text/x-tex", CHUNKING)
    assert {"Introduction", "The Model and the Problem"} <= set(headings(d))
    declared = doc("beamer-conference-talk.tex")
    assert declared.markdown == d.markdown and "TALKS¡!!" in d.markdown and "Universität Tübingen" in d.markdown


def test_iso_2022_jp_text_is_read_as_the_japanese_its_escapes_announce() -> None:
    """Emacs's Japanese tutorial was stored as its 7-bit bytes: every chunk full of `ESC $ B` sequences (shown raw
    by `connector search`: escape sequences sent to the terminal), its title `\x1b$B!v...`."""
    d = doc("emacs-TUTORIAL.ja-excerpt")
    assert d.markdown.startswith("Emacs 入門ガイド.  本ファイルの著作権については最後を御覧下さい。")
    assert {"＊カーソル移動の基本", "＊著作権表示"} <= set(headings(d))
    assert "\x1b" not in d.markdown and "Copyright (C) 1985, 1996, 1998, 2001-2022 Free Software" in d.markdown


def test_pdf_bullets_without_a_unicode_mapping_are_list_items_and_no_control_character_is_kept() -> None:
    """gnuplot's manual sets its bullets in a font whose glyph comes out as U+0088: they were kept as that control
    character (in the chunks, and between them where no chunk covered it) and the items were not a list."""
    d = doc("gnuplot-p23-p306.pdf")
    assert_tiles(d)
    assert not sniff.CONTROLS.search(d.markdown)
    items = [d.markdown[b.start : b.end] for b in d.blocks if b.kind == "list"]
    assert any("- All evaluation of expressions and functions uses 64-integer arithmetic" in i for i in items)
    assert any("- set vgrid $gridname size N creates an NxNxN grid of voxels." in i for i in items)
    assert d.markdown.count("\n- ") >= 10, "each of the page's ten bullets starts an item"


def test_an_index_whose_entries_list_several_pages_is_not_content() -> None:
    """gnuplot's index (`errorbars, 65–67, 70, 119, 148`): an entry with several pages was taken for a row of a
    numeric table, so most of its blocks fell short of an index's share of entries and were kept, and searched."""
    kept = doc("gnuplot-p23-p306.pdf", keep_navigation=True)
    assert "errorbars, 65–67, 70, 119, 148" in kept.markdown and "fenceplots, 26, 85, 86" in kept.markdown
    d = doc("gnuplot-p23-p306.pdf")
    assert "errorbars" not in d.markdown and "fenceplots" not in d.markdown and "harmean" not in d.markdown
    # Only its running head is left (two pages are too few to see it repeat as the whole manual does).
    assert d.markdown[d.page_starts[1] :].strip() == "306 gnuplot 5.4 INDEX"


# --- reading order invariants -----------------------------------------------------------------------------------


def _line(x0: float, y0: float, x1: float, text: str) -> dict:
    span = {"text": text, "size": 10.0, "flags": 0, "font": "Times"}
    return {"bbox": (x0, y0, x1, y0 + 10), "spans": [span]}


@st.composite
def pages(draw):
    """Random pages: blocks of lines placed in one, two or three columns, some spanning the page."""
    columns = draw(st.sampled_from([1, 2, 3]))
    width, margin, gap = 612.0, 72.0, 18.0
    col_width = (width - 2 * margin - (columns - 1) * gap) / columns
    blocks, y = [], [72.0] * columns
    for n in range(draw(st.integers(1, 25))):
        wide = draw(st.booleans()) and draw(st.booleans())
        col = draw(st.integers(0, columns - 1))
        x0 = margin if wide else margin + col * (col_width + gap)
        x1 = width - margin if wide else x0 + col_width * draw(st.floats(0.3, 1.0))
        top = max(y) if wide else y[col]
        lines = [_line(x0, top + 12 * i, x1, f"block {n} line {i}") for i in range(draw(st.integers(1, 6)))]
        blocks.append({"type": 0, "bbox": (x0, top, x1, top + 12 * len(lines)), "lines": lines})
        for c in range(columns) if wide else [col]:
            y[c] = top + 12 * len(lines) + 6
    blocks.sort(key=lambda b: (b["bbox"][1], b["bbox"][0]))  # what PyMuPDF's sort=True gives
    return blocks, width


@settings(max_examples=150, deadline=None)
@given(pages())
def test_reading_order_loses_and_repeats_no_line(page) -> None:
    blocks, width = page
    out = pdf_layout.reading_order(blocks, width, 792.0)

    def texts(bs):
        return sorted(s["text"] for b in bs for line in b["lines"] for s in line["spans"])

    assert texts(out) == texts(blocks)
    for b in out:  # each block's lines keep their order
        tops = [line["bbox"][1] for line in b["lines"]]
        assert tops == sorted(tops)


# --- through the pipeline, into Postgres ----------------------------------------------------------------------


def test_real_documents_ingest_with_their_own_titles_and_no_navigation_chunks(tmp_path: Path, migrated_dsn) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    names = ["dtc-paper-twocol.pdf", "listings-manual-toc-p1-p2-index-p61-p63.pdf", "officer-example.docx",
             "officer-table-complex.docx", "debian-history-en.epub", "knitr-knit_print.Rmd",
             "sphinx-jinja2-sandbox.html", "postmodern-simple-date.org"]  # fmt: skip
    for name in names:
        (folder / name).write_bytes((REAL / name).read_bytes())
    (folder / "cover.png").write_bytes(pymupdf.open(REAL / "dtc-paper-twocol.pdf")[0].get_pixmap(dpi=10).tobytes())
    command = connector_cmd("ingest", str(folder), "--dsn", migrated_dsn, "--embedder", "fake")
    result = subprocess.run(command, cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr  # the picture failed, everything else is done
    with psycopg.connect(migrated_dsn) as conn:
        rows = {k: (s, t, e) for k, s, t, e in conn.execute(
            "SELECT source_key, status, title, last_error FROM connector.documents")}  # fmt: skip
        chunks = conn.execute(
            "SELECT d.source_key, c.text, c.section_path FROM connector.chunks c "
            "JOIN connector.documents d ON d.id = c.document_id"
        ).fetchall()
    assert rows["cover.png"][0] == "failed" and "looks like a PNG image" in rows["cover.png"][2]
    assert {k: s for k, (s, _, _) in rows.items() if k != "cover.png"} == dict.fromkeys(names, "done")
    assert rows["dtc-paper-twocol.pdf"][1] == "Device trees everywhere"
    assert rows["listings-manual-toc-p1-p2-index-p61-p63.pdf"][1] == "The Listings Package"
    assert rows["officer-example.docx"][1] == "document title"
    assert rows["officer-table-complex.docx"][1] == "officer-table-complex.docx", "no title of its own: its name"
    assert rows["debian-history-en.epub"][1] == "A Brief History of Debian"
    assert rows["knitr-knit_print.Rmd"][1] == "Custom Print Methods"
    assert not [(k, t[:60]) for k, t, _ in chunks if mostly_navigation(t)]
    assert not [p for _, _, path in chunks for p in path if "¶" in p]

    # A renamed file keeps the title it gave itself; one titled by its name takes the new name.
    with connect(migrated_dsn) as conn:
        store = Store(conn)
        store.rename_folder_documents(folder, "officer-example.docx", "renamed.docx")
        store.rename_folder_documents(folder, "officer-table-complex.docx", "table.docx")
        titles = dict(conn.execute("SELECT source_key, title FROM connector.documents").fetchall())
    assert titles["renamed.docx"] == "document title" and titles["table.docx"] == "table.docx"


# --- OCR (Tesseract is installed by .ci/run and the Dockerfile) ---------------------------------------------------


def test_a_scanned_page_is_read_by_ocr_and_fails_clearly_without_it() -> None:
    """`scanned-lppl-p1.pdf`: page 1 of the LPPL rendered to a grey image, the only thing in the PDF."""
    from connector.convert import ocr
    from connector.errors import ConversionError

    assert ocr.available(), "Tesseract is part of the test environment (.ci/run installs tesseract-ocr)"
    d = doc("scanned-lppl-p1.pdf")
    assert "Everyone is allowed to distribute verbatim copies" in " ".join(d.markdown.split())
    assert "Preamble" in headings(d) and d.page_starts == (0,)
    with pytest.raises(ConversionError, match="1 scanned, OCR is off: CONNECTOR_CHUNK_OCR=true reads them"):
        doc("scanned-lppl-p1.pdf", ocr=False)
    with pytest.raises(ConversionError, match="OCR failed"):
        doc("scanned-lppl-p1.pdf", ocr_language="xx-not-installed")


# --- HTML that omits end tags, sqlite.org and Sphinx pages, gzipped files (/usr/share/doc) ----------------------------

BASH_HEADINGS = [
    "BASH", "NAME", "SYNOPSIS", "COPYRIGHT", "DESCRIPTION", "OPTIONS", "ARGUMENTS", "INVOCATION", "DEFINITIONS",
    "RESERVED WORDS", "SHELL GRAMMAR", "Simple Commands", "Pipelines", "Lists", "Compound Commands", "Coprocesses",
    "Shell Function Definitions", "COMMENTS", "QUOTING", "PARAMETERS", "Positional Parameters", "Special Parameters",
    "Shell Variables", "Arrays", "EXPANSION", "Brace Expansion", "Tilde Expansion", "Parameter Expansion",
    "Command Substitution", "Arithmetic Expansion", "Process Substitution", "Word Splitting", "Pathname Expansion",
    "Quote Removal", "REDIRECTION", "Redirecting Input", "Redirecting Output", "Appending Redirected Output",
    "Redirecting Standard Output and Standard Error", "Appending Standard Output and Standard Error",
    "Here Documents", "Here Strings", "Duplicating File Descriptors", "Moving File Descriptors",
    "Opening File Descriptors for Reading and Writing", "ALIASES", "FUNCTIONS", "ARITHMETIC EVALUATION",
    "CONDITIONAL EXPRESSIONS", "SIMPLE COMMAND EXPANSION", "COMMAND EXECUTION", "COMMAND EXECUTION ENVIRONMENT",
    "ENVIRONMENT", "EXIT STATUS", "SIGNALS", "JOB CONTROL", "PROMPTING", "READLINE", "Readline Notation",
    "Readline Initialization", "Readline Key Bindings", "Readline Variables", "Readline Conditional Constructs",
    "Searching", "Readline Command Names", "Commands for Moving", "Commands for Manipulating the History",
    "Commands for Changing Text", "Killing and Yanking", "Numeric Arguments", "Completing", "Keyboard Macros",
    "Miscellaneous", "Programmable Completion", "HISTORY", "HISTORY EXPANSION", "Event Designators",
    "Word Designators", "Modifiers", "SHELL BUILTIN COMMANDS", "SHELL COMPATIBILITY MODE", "RESTRICTED SHELL",
    "SEE ALSO", "FILES", "AUTHORS", "BUG REPORTS", "BUGS", "Index",
]  # fmt: skip


def test_a_man2html_page_that_omits_end_tags_keeps_every_heading_and_its_markup() -> None:
    """man2html never writes `</dt>` or `</dd>`: Python's html.parser nested the page 546 levels deep, and past
    `MAX_DEPTH` it came out flat: 29 of its 88 headings, none after "Command Substitution", no bold, no links, and
    "Shell Variables" one line of 17,931 characters. Its CGI header and `<title>` were its first paragraphs."""
    page = gzip.decompress((REAL / "bash.html.gz").read_bytes())
    d = convert(page, "text/html", CHUNKING)
    assert headings(d) == BASH_HEADINGS
    assert d.title == "Man page of BASH"
    assert d.markdown.startswith("# BASH\n\nSection: User Commands (1)")  # no "Content-type:", no title
    assert max(map(len, d.markdown.splitlines())) < 200
    variables = d.markdown[d.markdown.index("### Shell Variables") : d.markdown.index("### Arrays")]
    assert "\n**BASHPID**\n" in variables and "\n**BASH_VERSINFO**\n" in variables, "each variable a bold term"
    assert "[Command Substitution](#lbBC)" in d.markdown, "links kept"


def test_gzipped_files_read_as_what_they_hold_named_by_the_name_inside() -> None:
    """Most of /usr/share/doc is gzipped (`changelog.html.gz`, info manuals, man pages): all failed as "a gzip
    file". The name without `.gz` says what the content is, its bytes what they say, as for any file."""
    assert mime_for_path("sqlite-changelog.html.gz") == "text/html"
    assert mime_for_path("bash.info.gz") == "application/octet-stream"
    bash = doc("bash.html.gz")
    assert headings(bash) == BASH_HEADINGS
    assert bash == convert(gzip.decompress((REAL / "bash.html.gz").read_bytes()), "text/html", CHUNKING)
    info = doc("bash.info.gz")  # texinfo's `\0\b[index\0\b]` marks: ten NULs in 570 KB of text
    assert info.markdown.startswith("This text is a brief description of the features that are present in the\n")
    assert "\x00" not in info.markdown and "\b" not in info.markdown and "[index]" not in info.markdown
    assert {"1 Introduction", "3.5.4 Command Substitution", "D.5 Concept Index"} <= set(headings(info))
    # titled by its Top node's heading, not by its file name: every chapter is underlined as that heading is
    assert info.title == "Bash Features"


def test_an_info_manual_in_latin_1_with_index_markers_is_text() -> None:
    """groff.info-2 is Latin-1 with texinfo's `\\0\\b[index\\0\\b]` markers: it failed as binary data, as stray NULs
    were let through in UTF-8 text only."""
    info = doc("groff.info-2-excerpt.gz")
    assert "Copyright © 1994-2018 Free Software Foundation, Inc." in info.markdown
    assert "Appendix B Request Index" in headings(info)
    assert "\x00" not in info.markdown and "\b" not in info.markdown and "[index]" not in info.markdown


_INFO_APPARATUS = re.compile(
    r"^(?:File: [^\n]*Node: |\* Menu:|Tag Table:|End Tag Table|Local Variables:|INFO-DIR-SECTION|START-INFO-DIR-ENTRY"
    r"|This is \S+\.info, produced by makeinfo)",
    re.MULTILINE,
)


@pytest.mark.parametrize("name", ["bash.info.gz", "bc.info.gz"])
def test_an_info_manual_keeps_its_text_and_headings_without_node_lines_menus_or_tag_table(name: str) -> None:
    """Read as text, an info manual kept its `File: bash.info,  Node: …,  Next: …` line above all 132 nodes, its
    menus of node links (`* Menu:`, 32 of them, the indexes too) and its tag table: paragraphs in every chunk naming
    sections and answering nothing. They are gone; every line left is one of the file's lines, in order, every
    paragraph of prose is still there, and the headings and section paths are those of the file read whole."""
    raw = sniff.decode(gzip.decompress((REAL / name).read_bytes()))
    d = doc(name)
    assert_tiles(d)
    assert not _INFO_APPARATUS.search(d.markdown)
    assert not re.search(r"^\* [^\n]*::", d.markdown, re.MULTILINE), "no menu entry"
    lines = iter(raw.splitlines())
    assert all(any(line == other for other in lines) for line in d.markdown.splitlines()), "the file's lines, in order"
    prose = [p for p in re.split(r"\n\s*\n", raw) if p.startswith("   ") and not re.search(r"^\* ", p, re.MULTILINE)]
    assert len(prose) > 40 and all(p in d.markdown for p in prose), "no paragraph of text lost"
    whole = [(d.markdown[b.start : b.end].split("\n")[0], b.section_path) for b in d.blocks if b.kind == "heading"]
    read_whole = text.blocks(raw)
    assert whole == [(raw[b.start : b.end].split("\n")[0], b.section_path) for b in read_whole if b.kind == "heading"]
    kept = doc(name, keep_navigation=True)  # as a PDF's contents pages: the menus stay when asked for
    assert "\n* Menu:\n" in kept.markdown and not re.search(r"^File: ", kept.markdown, re.MULTILINE)


def test_text_after_an_info_menu_is_kept_and_a_described_menu_goes() -> None:
    """A menu runs to its last entry, not to the node's end: bc's "Statements" node lists its one subnode first and
    then explains statements; bash's menus describe each entry ("An introduction to the shell.") in words its
    nodes say again under their headings."""
    bc = doc("bc.info.gz")
    statements = bc.markdown.index("Statements (as in most algebraic languages) provide the sequencing of\n")
    assert bc.section_path_at(statements) == ("4 Statements",)
    assert bc.markdown.startswith("1 Introduction\n**************\n\n1.1 Description\n"), "Top holds only a menu"
    bash = doc("bash.info.gz")
    assert "An introduction to the shell." not in bash.markdown
    assert bash.markdown.count("What is Bash?") == 1, "its heading, not the Introduction's menu entry"
    assert doc("bash.info.gz", keep_navigation=True).markdown.count("What is Bash?") == 2


def test_an_html_list_without_end_tags_is_one_item_a_line() -> None:
    """sqlite.org writes `<li>` without `</li>`: every item ran on into the next, each release's notes one line."""
    d = doc("sqlite-changelog.html.gz")
    assert d.title == "Release History Of SQLite"
    found = headings(d)
    assert len(found) == 357 and found[:3] == ["Release History", "2022-12-28 (3.40.1)", "2022-11-16 (3.40.0)"]
    assert found[-1] == "2000-05-29"
    lines = d.markdown.splitlines()
    assert "2. Fix a potential infinite loop in the [memsys5](malloc.html#memsys5) alternative memory allocator. " \
        "This" in lines  # fmt: skip
    assert "3. Various other obscure fixes." in lines
    assert max(map(len, lines)) < 250


SQLITE_CHROME = ("Small. Fast. Reliable.", "Choose any three.", "[Home](index.html)", "[Purchase](prosupport.html)",
                 "Search Documentation", "sqlite370_banner.gif", "Other Documentation Indexes")  # fmt: skip


def test_sqlite_pages_keep_their_text_without_the_site_and_superscripts_stay_numbers() -> None:
    """sqlite.org's banner ("Small. Fast. Reliable. Choose any three."), menus (class `menu`) and sidebar were
    indexed with every page; `2<sup>31</sup>-1` came out as "231-1", another number."""
    limits = doc("sqlite-limits.html")
    assert limits.markdown.startswith("## Limits In SQLite\n")
    assert "length up to 2^31-1 or 2147483647" in limits.markdown
    assert "\n    2^64 (18446744073709551616" in limits.markdown
    assert "231-1" not in limits.markdown
    index = doc("sqlite-keyword_index.html.gz")
    assert headings(index) == ["Keyword Index"], "`<h2>Keyword Index</h1>` ends before the list it ran into"
    assert "- [ACID](transactional.html)" in index.markdown.splitlines()
    assert max(map(len, index.markdown.splitlines())) < 200
    for page in (limits, index, doc("sqlite-changelog.html.gz")):
        for chrome in SQLITE_CHROME:
            assert chrome not in page.markdown, chrome


def test_texi2html_examples_stay_code_blocks_with_their_lines() -> None:
    """texi2html (GNU manuals built before Texinfo 5) indents each example with a table, an empty cell beside a
    `<pre>`: as a pipe table's cell, all 301 examples of the gettext manual ran onto one line each ("``` white-space
    #  translator-comments #. extracted-comments … ```"), a PO entry no longer a PO entry."""
    d = doc("texi2html-gettext-po-format.html")
    assert headings(d) == ["3. The Format of PO Files"]
    entry = '```\n#: lib/error.c:116\nmsgid "Unknown system error"\nmsgstr "Error desconegut del sistema"\n```'
    assert entry in d.markdown
    assert "#. extracted-comments\n#: reference…\n" in d.markdown
    codes = [d.markdown[b.start : b.end] for b in d.blocks if b.kind == "code"]
    assert len(codes) == 6 and all(c.count("\n") >= 3 for c in codes)
    assert not any("```" in line for line in _table_rows(d.markdown)), "no code block inside a table row"


def test_texinfo_node_navigation_is_no_text_and_a_leading_rule_no_front_matter() -> None:
    """makeinfo puts "Next: …, Previous: …, Up: … [Contents][Index]" above every node (`div.header`, links with `rel`):
    36 such lines in one chapter of R's manual, 140 in the whole, each the first line of a chunk; and an empty "Table
    of Contents" heading stayed where the contents were removed. texi2html's bar of bracketed links was a pipe table
    of 11 columns; once it was gone, the page started with its `<hr>` as `---`, and the Markdown reader took
    everything down to the next rule for YAML front matter: one code block, no heading."""
    r = doc("makeinfo-R-intro-ch1.html")
    assert not re.search(r"Next: |Previous: |Up: |\[Contents\]", r.markdown)
    assert "Table of Contents" not in headings(r)
    assert headings(r)[2:5] == ["Preface", "Suggestions to the reader", "1 Introduction and preliminaries"]
    assert "This introduction to R is derived from an original set of notes" in r.markdown
    assert r.section_path_at(r.markdown.index("> help(solve)")) == (
        "An Introduction to R",
        "1 Introduction and preliminaries",
        "1.7 Getting help with functions and features",
    )
    gettext = doc("texi2html-gettext-po-format.html")
    assert "[ [<<]" not in gettext.markdown and "[[Contents]" not in gettext.markdown
    assert headings(gettext) == ["3. The Format of PO Files"]
    assert gettext.blocks[0].kind != "code" and sum(b.kind == "code" for b in gettext.blocks) == 6
    assert "This document was generated by" in gettext.markdown, "the colophon is text, not a link bar"


def _table_rows(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if line.strip().startswith("|")]


def test_sphinx_tables_escape_pipes_and_keep_a_cell_under_a_rowspan() -> None:
    """Python's docs: `a | b` in a cell made an extra column; the row below a `rowspan` cell lost its first column."""
    rows = _table_rows(doc("python-operator.html").markdown)
    assert "| Bitwise Or | `a \\| b` | `or_(a, b)` |" in rows
    assert {len(re.findall(r"(?<!\\)\|", row)) for row in rows} == {4}, "three columns in every row"
    rows = _table_rows(doc("python-c-api-apiabiversion.html").markdown)
    assert rows[-2:] == ["| 4 | 25-28 | `PY_RELEASE_LEVEL` | `0xA` |", "|  | 29-32 | `PY_RELEASE_SERIAL` | `0x2` |"]
    assert {row.count("|") for row in rows} == {5}


def test_a_hyphen_that_ends_a_line_stays_where_the_document_writes_the_word_with_it() -> None:
    """ "Debian-specific" broken after its hyphen became "Debianspecific" (bash's manual: "shell-backwardword",
    Octave's: "octfile"); words that only the line broke still join."""
    from connector.convert.pdf import clean, dehyphenate

    data = (FIXTURES / "debian-policy-p28-35.pdf").read_bytes()
    markdown = convert(data, "application/pdf", CHUNKING).markdown
    assert re.findall(r"\w*debian-?specific\w*", markdown, re.IGNORECASE) == ["Debian-specific"] * 4
    pages = [[clean("moves with shell-backward-\nword or the docu-\nment's oct-\nfile, an inter-\nesting case")],
             ["shell-backward-word, an oct-file, another oct-file; octfile once"]]  # fmt: skip
    assert dehyphenate(pages)[0] == ["moves with shell-backward-word or the document's oct-file, an interesting case"]


def test_a_restructuredtext_title_between_two_rules_of_any_character_is_the_title() -> None:
    """reStructuredText levels come from the order rule styles appear in, not from their character: Python's
    chapters are over- and underlined with `*` and had no title (the file name stood in)."""
    chapter = "\n.. _expressions:\n\n***********\nExpressions\n***********\n\nIntro.\n\nAtoms\n=====\n\nText.\n"
    d = convert(chapter.encode(), "text/x-rst", CHUNKING)
    assert d.title == "Expressions" and d.section_path_at(d.markdown.index("Text.")) == ("Expressions", "Atoms")


# --- Man pages: roff (man(7), mdoc(7)), gzipped as installed -----------------------------------------------------

ROFF_LEFT = re.compile(r"\\f[BIRP(\[]|\\-|\\\(..|\\\*|\\&|^[.'][A-Za-z\\]", re.MULTILINE)


def test_a_man_page_is_read_as_its_sections_not_its_roff_source() -> None:
    """ls.1 (manpages-fr) was stored as roff: one block, no heading, no title, `\\fB\\-\\-all\\fP` where a search
    looks for `--all`, `.TP`/`.PP`/`.\\"` lines in the text."""
    assert mime_for_path("ls.fr.1.gz") == mime_for_path("GET.1p") == mime_for_path("ls.man") == "text/troff"
    d = doc("ls.fr.1.gz")
    assert d.title == "ls - Afficher le contenu de répertoires", "the NAME section's line"
    assert headings(d)[:4] == ["LS(1)", "NOM", "SYNOPSIS", "DESCRIPTION"]
    assert {"VOIR AUSSI", "TRADUCTION", "État de fin d'exécution :"} <= set(headings(d))
    assert not ROFF_LEFT.search(d.markdown), ROFF_LEFT.search(d.markdown)
    option = next(b for b in d.blocks if d.markdown[b.start : b.end].startswith("-a, --all"))
    assert d.markdown[option.start : option.end].strip() == "-a, --all\ninclure les entrées débutant par « . »"
    assert option.section_path == ("LS(1)", "DESCRIPTION")
    assert "ls [OPTION]... [FICHIER]..." in d.markdown


def test_a_chinese_man_page_keeps_its_headings_and_synopsis_lines() -> None:
    d = doc("cp.zh_TW.1.gz")
    assert d.title == "cp - 複製檔案和目錄"
    assert headings(d) == ["CP(1)", "名稱", "概述", "描述", "作者", "報告錯誤", "版權", "參見", "跋"]
    assert "cp [選項]... [-T] 來源 目標\ncp [選項]... 來源... 目錄\n" in d.markdown, "`.br` keeps the lines apart"
    assert "-a, --archive\n與 -dR --preserve=all 相同。" in d.markdown
    assert not ROFF_LEFT.search(d.markdown)


def test_an_mdoc_man_page_shows_its_words_not_its_macros() -> None:
    """OpenSSH writes mdoc(7): `.Sh`, `.It Fl L Xo`, `.Sm off`, `.Op`, `.Xr`, `.Bd -literal`."""
    d = doc("ssh.1.gz")
    assert d.title == "ssh - OpenSSH remote login client"
    assert headings(d)[:4] == ["SSH(1)", "NAME", "SYNOPSIS", "DESCRIPTION"]
    assert {"AUTHENTICATION", "ESCAPE CHARACTERS", "SEE ALSO", "AUTHORS"} <= set(headings(d))
    text = d.markdown
    assert "-L [bind_address:]port:host:hostport\n" in text
    assert "specified as either [user@]hostname or a URI of the form ssh://[user@]hostname[:port]. The" in text
    assert "such as ssh-agent(1)." in text and "UNIX-domain socket" in text
    assert "```\n# ssh -f -w 0:1 192.168.1.15 true\n# ifconfig tun0" in text, "a literal display is code"
    assert not re.search(r"(?:^|\s)(?:Fl|Ar|Op|Xr|Nm|Sm|Xo|Xc|Ns)\s", text), "no mdoc macro left"
    assert not ROFF_LEFT.search(text)


# --- Perl POD ----------------------------------------------------------------------------------------------------

POD_LEFT = re.compile(r"(?:^|\s)=(?:head\d|item|over|back|cut|for|begin|end)\b|\b[BICLEFSXZ]<", re.MULTILINE)


def prose(markdown: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^(`{3,})\n.*?^\1$", "", markdown, flags=re.MULTILINE | re.DOTALL)


def test_perl_pod_is_read_as_its_headings_and_items() -> None:
    """perlfunc.pod was plain text: no heading (12 `=head`, 512 `=item`), no title, `C<...>`/`L<...>` left."""
    d = doc("perlfunc-p1-abs-alarm.pod")
    assert d.title == "perlfunc - Perl builtin functions", "the line under =head1 NAME"
    found = headings(d)
    assert found[:3] == ["NAME", "DESCRIPTION", "Perl Functions by Category"]
    assert {"Functions for SCALARs or strings", "Alphabetical Listing of Perl Functions", "abs VALUE"} <= set(found)
    abs_text = next(b for b in d.blocks if "Returns the absolute value" in d.markdown[b.start : b.end])
    assert abs_text.section_path == ("DESCRIPTION", "Alphabetical Listing of Perl Functions", "abs"), "named items"
    assert "Portability issues: alarm in perlport." in d.markdown, "L<perlport/alarm>"
    assert "```\n    -r  File is readable by effective uid/gid." in d.markdown, "verbatim paragraphs are code"
    assert not POD_LEFT.search(prose(d.markdown)), POD_LEFT.search(prose(d.markdown))
    assert "X<" not in d.markdown and "\nfunction\n" not in d.markdown, "index entries (X<function>) are dropped"


def test_pod_formatting_codes_and_lists_become_text() -> None:
    d = doc("perlpod.pod")
    assert d.title == "perlpod - the Plain Old Documentation format"
    assert {"Ordinary Paragraph", "Verbatim Paragraph", "Command Paragraph", "Formatting Codes"} <= set(headings(d))
    text = d.markdown
    assert "Pod markup consists of three basic kinds of paragraphs: ordinary, verbatim, and command.\n" in text
    assert "B<text> -- bold text" in headings(d), "C<< B<text> >>: a code shown as written"
    assert "This document is in Pod format" not in text, "=for comment is dropped"


# --- Jupyter notebooks, e-mail, SVG ------------------------------------------------------------------------------

BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{60,}")


def test_a_notebook_is_read_as_its_cells_without_image_data() -> None:
    """code-cells.ipynb was its raw JSON: one block, most of it base64 PNG (`"image/png": "iVBORw0…"`), no title,
    Markdown cells as JSON string arrays with `\\n` escapes."""
    d = doc("nbsphinx-code-cells-excerpt.ipynb")
    assert d.title == "Code Cells", "the first heading of the first Markdown cell"
    assert {"Code Cells", "Code, Output, Streams", "ANSI Colors"} <= set(headings(d))
    text = d.markdown
    assert "```python\n6 * 7\n```\n\n```text\n42\n```" in text, "a code cell, then its result"
    assert "```python\nprint('Hello, world!')\n```\n\n```text\nHello, world!\n```" in text
    assert not BASE64_RUN.search(text), "no image data"
    assert '"cell_type"' not in text and "\\n" not in prose(text), "no JSON"
    assert "BEWARE: ugly colors!" in text, "a stream's ANSI colour codes are dropped"


def test_an_email_is_its_subject_headers_and_text_with_attachments_named() -> None:
    """msg_07 (CPython's e-mail tests) was 90 % base64 GIF."""
    d = doc("python-email-msg_07.eml")
    assert d.title == "Here is your dingus fish"
    text = d.markdown
    assert "From: Barry <barry@digicool.com>\n" in text and "Date: Fri, 20 Apr 2001 19:35:02 -0400" in text
    assert "Hi there,\n\nThis is the dingus fish." in text
    assert "- dingusfish.gif (image/gif)" in text and not BASE64_RUN.search(text)


def test_an_svg_image_is_its_text_not_its_path_data() -> None:
    d = doc("postgresql-common-dependencies.svg")
    assert "postgresql-client-common:all M-A:foreign" in d.markdown and "libpq5:amd64 M-A:same" in d.markdown
    assert "<rect" not in d.markdown and "fill:" not in d.markdown and "<text" not in d.markdown


def test_ligatures_a_font_gives_as_control_codes_are_letters_again() -> None:
    """R's Sweave vignettes (LaTeX, T1 encoding, no Unicode map for the ligatures) give "fi", "ffi" as the font codes
    28 and 30: dropped as control characters, "defined" was "dened" and "coefficient" "coecient", which no search
    for the word finds."""
    d = doc("survival-concordance-p1.pdf")
    assert "The concordance C is defined as the fraction of concordant pairs" in d.markdown
    assert "coefficient" in d.markdown
    assert "dened" not in d.markdown and "coecient" not in d.markdown


def test_api_references_keep_their_text_and_headings() -> None:
    """Three generators of API references, as Debian ships them. Doxygen's page body sits in `<div
    class="contents">`, which was dropped as a table of contents: SDL_render.h's reference kept 183 characters.
    The JDK 17 doclet puts every section and its heading in list items: HashMap's page was one heading and a list
    block of 21,491 characters. rustdoc's headings are links: 1,258 section path entries held Markdown link syntax."""
    sdl = doc("doxygen-sdl-render-h.html.gz")
    assert len(sdl.markdown) > 100_000 and sdl.title == "SDL: SDL_render.h File Reference"
    assert {"Functions", "Function Documentation", "SDL_CreateRenderer()"} <= set(headings(sdl))
    # An underscore inside a word is not escaped: the stored text is what the page says (`SDL\_CreateRenderer`).
    assert "[SDL_CreateRenderer](" in sdl.markdown and "\\_" not in sdl.markdown
    java = doc("javadoc-HashMap.html.gz")
    names = headings(java)
    assert len(names) >= 25 and "Method Summary" in names and "Constructor Summary" in names
    assert max(b.end - b.start for b in java.blocks) < 5_000, "no page-long list block"
    rust = doc("rustdoc-trait-Iterator.html.gz")
    paths = [p for b in rust.blocks for p in b.section_path]
    assert paths and not any("](" in p or "`" in p for p in paths), [p for p in paths if "](" in p][:3]
    assert "Trait std::iter::Iterator" in headings(rust)
    assert "Notable traits" not in rust.markdown


def test_a_definitions_later_paragraphs_lists_and_code_are_not_indented_code() -> None:
    """Sphinx writes each function's description as a `<dd>`; its paragraphs after the first, its lists and its
    examples were indented four spaces under the `:` marker, which CommonMark reads as code blocks: "New in version
    3.5." was code, and each example's fenced code sat inside one, fences and all."""
    d = doc("python-operator.html")
    # As CommonMark reads the text (the document's blocks join each definition into one entry: see below).
    kinds = {d.markdown[b.start : b.end].strip(): b.kind for b in markdown.blocks(d.markdown)}
    assert kinds["New in version 3.5."] == "paragraph"
    listed = [t for t, k in kinds.items() if t.startswith("- After `f = attrgetter('name')`")]
    assert listed and kinds[listed[0]] == "list"
    examples = [t for t, k in kinds.items() if k == "code" and "def attrgetter(*items):" in t]
    assert examples and examples[0].startswith("```"), "the example is a fenced code block of its own"


def test_an_epub_whose_manifest_lists_section_anchors_reads_every_chapter_once_in_spine_order() -> None:
    """SiSU's live-manual EPUB lists `about-manual.xhtml#o8` and the like as manifest items (and spine entries):
    EbookLib looked for a zip member of that name and the whole book failed with a KeyError."""
    d = doc("live-manual-en-ch1-3.epub")
    assert_tiles(d)
    assert d.title == "Live Systems Manual"
    chapters = ["1. About this manual", "2. About the Live Systems Project", "3. Installation"]
    positions = [headings(d).index(chapter) for chapter in chapters]
    assert positions == sorted(positions)
    for sentence in (  # one from each chapter's file, each read once though the spine names its file 7-10 times
        "This manual serves as a single access point to all documentation related to the Live Systems Project",
        "When Live Systems Project was initiated, there were already several Debian based live systems available",
        "Building live system images has very few system requirements:",
    ):
        assert " ".join(d.markdown.split()).count(sentence) == 1, sentence


def test_an_epub_that_lacks_a_file_its_manifest_names_fails_as_the_documents_fault(tmp_path: Path) -> None:
    broken = tmp_path / "broken.epub"
    with zipfile.ZipFile(REAL / "live-manual-en-ch1-3.epub") as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            if info.filename != "OEBPS/about-project.xhtml":
                dst.writestr(info, src.read(info))
    with pytest.raises(ConversionError, match=r"EPUB.*KeyError.*about-project\.xhtml"):
        convert(broken.read_bytes(), "application/epub+zip", CHUNKING)


def test_a_running_header_with_chapter_and_section_numbers_is_furniture() -> None:
    """dblatex's header ("CHAPTER 6. THE DEBIAN ARCHIVES 6.3. WHAT ABOUT ”SID”?") changes its words with every
    section and carries no page number (that is in the footer), so the band rule kept it: 42 in the FAQ, one cutting
    the Toy Story codename list between hamm and slink."""
    d = doc("debian-faq-p27-p31.pdf")
    assert_tiles(d)
    assert not re.search(r"^CHAPTER \d", d.markdown, re.MULTILINE)
    assert re.search(r"- hamm \(Debian 2\.0\) was the piggy bank,\n\n- slink \(Debian 2\.1\)", d.markdown)
    for kept in ("## Chapter 6", "### 6.3 What about ”sid”?", "### 6.4 What does the stable directory contain?"):
        assert kept in d.markdown


def test_a_paragraph_that_runs_into_a_table_is_no_header_row_and_a_report_has_its_title_page_title() -> None:
    """GMPL's manual: "... may be used in numeric expres-" / "sions:" right above a borderless table made "sions:"
    its header row (`| sions: |  |`), the word left broken; and its title (20.7 pt) is smaller than its chapter
    titles (24.8 pt), so the document had no title."""
    d = doc("glpk-gmpl-p1-p9-p14.pdf")
    assert_tiles(d)
    table = "| abs(x) | \\|x\\|, absolute value of x |\n|---|---|"
    assert f"which may be used in numeric expressions:\n\n{table}" in d.markdown
    assert "sions:" not in d.markdown.replace("expressions:", "")
    assert d.title == "Modeling Language GNU MathProg"


def test_a_section_heading_that_opens_a_page_where_others_do_is_no_running_header() -> None:
    """ieeepes's documentation opens pages 4, 5 and 6 with a section heading at the same height (y=125): the band
    rule took "8 Figures and Tables", "10 Footnotes" and "15 Discussions" for a running header (short, numbered, in
    a band most pages share) and removed them, their text filed under the section before."""
    d = doc("ieeepes-doc-p4-p6.pdf")
    assert_tiles(d)
    expected = ["8 Figures and Tables", "9 Equations", "10 Footnotes", "11 Referencing", "15 Discussions"]
    assert [h for h in headings(d) if h in expected] == expected


def test_a_code_paragraph_that_opens_with_a_root_prompt_is_no_heading() -> None:
    """SiSU sets each code line as a paragraph, `<p class="code"># apt-get install live-build<br/></p>`: each root
    prompt was an ATX heading, the section of everything after it."""
    d = doc("live-manual-en-ch1-3.epub")
    assert not [h for h in headings(d) if h.startswith(("apt-get", "dpkg", "make"))]
    assert headings(d)[-1] == "3. Installation"
    assert "\\# apt-get install live-build" in d.markdown and "\\# make install" in d.markdown


# --- definition lists: a man page's options, a Sphinx page's keys --------------------------------------------------


def unit_at(d: Document, text: str) -> tuple[int, int]:
    """The (start, end) of the unit holding the first occurrence of `text`."""
    at = d.markdown.index(text)
    return next((u.start, u.end) for u in d.units if u.start <= at < u.end)


def test_each_option_of_a_man_page_is_one_unit_with_all_its_paragraphs() -> None:
    """rsync(1) writes an option as `.IP "--verbose, -v"`, then `.IP` paragraphs and `.RS` examples under it. The
    Markdown keeps no indentation, so its blocks were paragraphs, and the short ones were grouped across options
    (`--partial`'s paragraph with `--partial-dir`'s first): Block Integrity charged a cut between two options, and
    none inside one. Each option is now one unit, from its tag to the next."""
    d = doc("rsync-options-excerpt.1")
    assert_tiles(d)
    tags = ["--help\n", "--version, -V\n", "--verbose, -v\n", "--info=FLAGS\n", "--debug=FLAGS\n",
            "--stderr=errors|all|client\n", "--quiet, -q\n", "--no-motd\n", "--ignore-times, -I\n", "--size-only\n",
            "--modify-window=NUM, -@\n", "--checksum, -c\n"]  # fmt: skip
    starts = [d.markdown.index(t) for t in tags]
    assert [u.start for u in d.units if u.start >= starts[0]] == starts, "a unit starts at every option, only there"
    assert all(u.kind == "list" for u in d.units if u.start >= starts[0])
    verbose = unit_at(d, "--verbose, -v\n")
    assert unit_at(d, 'However, do keep in mind that a daemon\'s "max verbosity"') == verbose, "its 4th paragraph"
    assert unit_at(d, "rsync -avv --info=stats2,misc1,flist0") == unit_at(d, "--info=FLAGS\n"), "its example"
    assert unit_at(d, "This option was added to 3.1.0") == unit_at(d, "--info=FLAGS\n")
    assert unit_at(d, "- client - causes all rsync messages") == unit_at(d, "--stderr=errors"), "its nested list"
    assert unit_at(d, "--quiet, -q\n") != unit_at(d, "--no-motd\n"), "two short options are two units"
    assert unit_at(d, "## OPTIONS") != unit_at(d, "--help\n"), "the section's own paragraphs are not an option's"


def test_an_mdoc_tag_list_gives_an_entry_per_item_and_one_for_tags_sharing_a_description() -> None:
    """ssh(1)'s `.Bl -tag` / `.It Fl L Xo`: four `-L` forms share one description, which is one unit with them."""
    d = doc("ssh.1.gz")
    assert_tiles(d)
    assert unit_at(d, "-K\nEnables GSSAPI") != unit_at(d, "-k\nDisables forwarding")
    forward = unit_at(d, "-L [bind_address:]port:host:hostport\n")
    assert unit_at(d, "-L local_socket:remote_socket\nSpecifies that connections") == forward
    assert unit_at(d, "-l login_name\n") != forward


def test_each_entry_of_an_html_definition_list_is_one_unit() -> None:
    """Sphinx writes each API object (each configuration key, on Flask's page) as a `<dl>` whose `<dd>` holds several
    paragraphs and fields; the definition's paragraphs are one unit with its term, each object its own."""
    d = doc("sphinx-jinja2-sandbox.html")
    assert_tiles(d)
    unsafe = unit_at(d, "jinja2.sandbox.unsafe(*f*)\n")
    assert unit_at(d, "Marks a function or method as unsafe.") == unsafe
    internal = unit_at(d, "jinja2.sandbox.is_internal_attribute(*obj*, *attr*)\n")
    assert internal != unsafe and internal[0] == d.markdown.index("jinja2.sandbox.is_internal_attribute(")
    assert unit_at(d, "jinja2.sandbox.modifies_known_mutable(") != internal
    assert "\ue000" not in d.markdown and "\ue001" not in d.markdown, "the entry marks are taken out"
    # A page holding the marks' characters itself (in a link's URL or title, written into the text) keeps them:
    # they were taken out as marks.
    page = (FIXTURES / "real" / "sphinx-jinja2-sandbox.html").read_text()
    page = page.replace("<p>", '<p><a href="#x\ue001" title="t\ue000">t</a> ', 1)
    own = convert(page.encode(), "text/html", CHUNKING)
    assert_tiles(own)
    assert '[t](#x\ue001 "t\ue000")' in own.markdown, own.markdown[:300]


def test_a_definition_list_with_a_table_too_large_keeps_its_entries_in_place() -> None:
    """Python's operator page: entries (`<dl class="py function">`) before and after its table of operators. Split
    by rows, the table grows; the entries after it move with it."""
    whole, split = doc("python-operator.html"), doc("python-operator.html", table_max_tokens=200)
    assert len(split.markdown) > len(whole.markdown), "the table was split"
    assert_tiles(split)

    def entries(d: Document) -> list[str]:
        return [d.markdown[u.start : u.end].split("\n", 1)[0] for u in d.units if u.kind == "list"]

    assert len(entries(whole)) > 40 and entries(split) == entries(whole), "every entry starts at its term"
    assert "operator.iadd(*a*, *b*)" in entries(split)


def test_markdown_under_another_name_is_read_as_markdown() -> None:
    """ikiwiki's pages (Debian's wiki engine) are Markdown named `.mdwn`: read as plain text, their `## Example`
    headings were paragraphs and nothing had a section path."""
    d = doc("ikiwiki-directive-template.mdwn")
    assert_tiles(d)
    assert d.markdown == (REAL / "ikiwiki-directive-template.mdwn").read_text()  # Markdown is kept as written
    assert headings(d) == ["Example", "Using a template", "Creating a template"]
    code = next(b for b in d.blocks if 'id=note text="""Here is the text' in d.markdown[b.start : b.end])
    assert code.kind == "code" and code.section_path == ("Example",)
    assert all(mime_for_path(f"page{suffix}") == "text/markdown" for suffix in (".mdwn", ".mkd", ".mdown", ".mdx"))


def test_a_markdown_page_is_titled_by_its_meta_directive_or_front_matter_not_by_a_section_heading() -> None:
    """A page whose highest headings were `##` took the first as its title: ikiwiki's template page, three paragraphs
    and then `## Example`, `## Using a template`, was called "Example", and its formatting page "# h1" (an example
    of a heading, halfway down). A heading names the page when it opens it or is alone at its level; ikiwiki's
    `[[!meta title="…"]]` and TOML front matter (Hugo, Zola: `+++`, `title = "…"`) name it before any heading."""
    assert doc("ikiwiki-directive-template.mdwn").title is None
    page = doc("ikiwiki-formatting.mdwn")
    assert page.title == "Formatting wiki pages"
    assert page.markdown == (REAL / "ikiwiki-formatting.mdwn").read_text()
    assert headings(page)[0] == "# h1", "the example headings stay headings"
    docker = FIXTURES / "dockerfile-reference.md"  # YAML front matter's title, before its `## Usage`
    assert convert(docker.read_bytes(), "text/markdown", CHUNKING).title == "Dockerfile reference"
    # No Debian package found ships a Hugo or Zola page; this one is written as Hugo's documentation shows them.
    hugo = '+++\ntitle = "Install Hugo"\ndate = 2023-03-16\ndraft = false\n+++\n\nHugo is a static site generator.\n'
    d = convert(hugo.encode(), "text/markdown", CHUNKING)
    assert d.title == "Install Hugo" and d.markdown == hugo
    first_lines = [(b.kind, d.markdown[b.start : b.end].split("\n")[0]) for b in d.blocks]
    assert first_lines == [("code", "+++"), ("paragraph", "Hugo is a static site generator.")], "metadata, one block"


def test_a_word_97_2003_document_is_read_with_its_title_headings_lists_and_tables() -> None:
    """A `.doc` (the OLE2 Word binary) failed as "a Word 97-2003 document (.doc); save it as DOCX or ODT". Debian's
    antiword reads it as DocBook, which the DocBook converter reads like any other; a `.doc` under another name too."""
    d = doc("officer-example.doc")
    assert_tiles(d)
    assert d.title == "document title"
    assert headings(d)[:3] == ["document title", "Title 1", "Title 2"]
    lorem = d.markdown.index("Lorem ipsum dolor sit amet, consectetur adipiscing elit.")
    assert d.section_path_at(lorem) == ("document title", "Title 1")
    assert "1. Quisque tristique\n2. Augue nisi, et convallis\n" in d.markdown, "a numbered list"
    assert any(b.kind == "table" and "Merged cell" in d.markdown[b.start : b.end] for b in d.blocks)
    data = (REAL / "officer-example.doc").read_bytes()
    assert convert(data, "application/octet-stream", CHUNKING) == d, "its bytes say what it is"
    word = doc("olefile-test-ole-file.doc")  # saved by Word itself
    assert word.markdown == "Test OLE file, saved as Word 97-2003 Document.\n"


def test_a_damaged_encrypted_or_unreadable_word_document_fails_saying_why(monkeypatch) -> None:
    """antiword runs as a child process on a temporary copy, under a time and an address-space limit; what it says
    of a file it cannot read is the document's error. Without antiword the error names the package to install."""
    from connector.convert import word

    data = (REAL / "officer-example.doc").read_bytes()
    with pytest.raises(ConversionError, match="is not a Word Document"):
        convert(data[:12000], "application/msword", CHUNKING)  # cut short: its streams end early
    fib = next(i for i in range(512, len(data), 512) if data[i : i + 2] == b"\xec\xa5")  # the FIB's magic
    encrypted = bytearray(data)
    encrypted[fib + 0x0B] |= 0x01  # fEncrypted, as Word sets it for a password-protected document
    with pytest.raises(ConversionError, match="Encrypted documents are not supported"):
        convert(bytes(encrypted), "application/msword", CHUNKING)
    monkeypatch.setattr(word, "MEMORY_BYTES", 2 << 20)  # the limit holds: under it antiword cannot even start
    with pytest.raises(ConversionError, match="cannot be read by antiword"):
        convert(data, "application/msword", CHUNKING)
    monkeypatch.undo()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConversionError, match=r"antiword, which is not installed \(Debian: apt-get install antiword\)"):
        convert(data, "application/msword", CHUNKING)
