"""RTF documents, and ODP presentations at the end, through the real pipeline (tests/fixtures/real/SOURCES.md):
officer's example.docx saved as RTF by LibreOffice (a stylesheet, headings, lists, a table with merged cells, a
document title), a GNUstep help page written by Cocoa's RTF writer (Mac Roman code page, `\\uc0`, pictures as
`\\NeXTGraphic`), officer's example.pptx saved as ODP. Other code pages and hostile files are made from them in the
tests."""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest

from connector.convert import convert, mime_for_path
from connector.errors import ConversionError
from connector.models import Document
from connector.settings import ChunkingSettings

REAL = Path(__file__).parent / "fixtures" / "real"
SETTINGS = ChunkingSettings()
OFFICER = (REAL / "officer-example.rtf").read_bytes()
RECYCLER = (REAL / "gworkspace-help-recycler.rtf").read_bytes()
CONTROL_WORD = re.compile(r"\\[a-zA-Z]+-?\d*|[{}]")


def _tiles(doc: Document) -> None:
    assert doc.blocks[0].start == 0 and doc.blocks[-1].end == len(doc.markdown)
    assert all(a.end == b.start for a, b in zip(doc.blocks, doc.blocks[1:], strict=False))
    assert all(doc.markdown[b.start : b.end] for b in doc.blocks)


def _headings(doc: Document) -> list[str]:
    return [doc.markdown[b.start : b.end].strip() for b in doc.blocks if b.kind == "heading"]


@pytest.mark.parametrize("name", ["example.rtf", "example.doc", "example"])
def test_an_rtf_reads_with_its_headings_lists_and_table(name: str) -> None:
    """RTF failed as "unsupported file type (looks like an RTF document)". Its bytes say what it is under any name
    (Word saves RTF as `.doc` on request); its headings are its stylesheet's, as the DOCX it was saved from has them."""
    doc = convert(OFFICER, mime_for_path(name), SETTINGS)
    _tiles(doc)
    assert doc.title == "document title"  # {\info{\title ...}}
    assert _headings(doc) == ["# Title 1", "# Title 2", "## Sub title 1", "## Sub title 2"]
    docx = convert((REAL / "officer-example.docx").read_bytes(), mime_for_path("example.docx"), SETTINGS)
    assert _headings(doc) == _headings(docx)
    assert "- Quisque tristique\n- Augue nisi, et convallis\n- Sapien mollis nec.\n" in doc.markdown
    assert "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n" in doc.markdown
    (table,) = [doc.markdown[b.start : b.end].strip().split("\n") for b in doc.blocks if b.kind == "table"]
    assert table[0] == "| Petals | Internode | Sepal | Bract |" and len(table) == 14
    # a cell merged across two columns: its text under the first it spans, as in the DOCX
    assert table[2] == "| 5,621498349 |  | 2,462106579 18,2034091 |  |"
    assert "| 5,645575295 | Merged cell | 2,278691288 |  |" in table
    assert not CONTROL_WORD.search(doc.markdown), "no RTF left in the text"
    assert "Times New Roman" not in doc.markdown and "ArData" not in doc.markdown  # fonts, document info


def test_a_cocoa_rtf_in_mac_roman_keeps_its_text_and_drops_its_pictures() -> None:
    """GNUstep's help: `\\ansicpg10000`, `\\uc0\\u-4` (U+FFFC, where a picture sits) and `{\\NeXTGraphic name}`."""
    doc = convert(RECYCLER, mime_for_path("TXT.rtf"), SETTINGS)
    _tiles(doc)
    paragraphs = [doc.markdown[b.start : b.end].strip() for b in doc.blocks]
    assert paragraphs[:2] == [
        "The Recycler",
        "The Recycler is part of the Dock. The bottom icon on the Dock is always the Recycler.",
    ]
    assert "Another way is to select the file and press ALT-d (or the Backspace key) on your keyboard." in paragraphs
    assert ".tiff" not in doc.markdown and "\ufffc" not in doc.markdown and not CONTROL_WORD.search(doc.markdown)


def _officer_with(text: bytes, header: bytes = b"") -> Document:
    """The officer RTF with its first paragraph's text replaced (and its header's `\\ansi` followed by `header`)."""
    data = OFFICER.replace(b"Lorem ipsum dolor sit amet, ", text, 1)
    data = data.replace(b"\\rtf1\\ansi", b"\\rtf1\\ansi" + header, 1)
    return convert(data, mime_for_path("x.rtf"), SETTINGS)


def test_code_pages_and_unicode_escapes_are_decoded() -> None:
    """`\\'xx` in the document's code page (`\\ansicpg`) or, in a font of another charset, in that font's (the
    fixture's font 8 is `\\fcharset128`, Shift-JIS: a character is two bytes); `\\uN` with its fallback skipped,
    negative for units over 32767, two for a character beyond the BMP."""
    doc = _officer_with(rb"Gr\'fc\'dfe, {\f8 \'82\'b1\'82\'f1} \u8364?, \u-10179?\u-8704? and \uc2\u233\'65\'3f t ")
    assert doc.markdown.split("\n")[2] == "Grüße, こん €, \U0001f600 and é t consectetur adipiscing elit."
    cyrillic = _officer_with(rb"\'cf\'f0\'e8\'e2\'e5\'f2 ", header=rb"\ansicpg1251")
    assert cyrillic.markdown.split("\n")[2] == "Привет consectetur adipiscing elit."
    mac = RECYCLER.replace(b"The Recycler\\par", b"Gr\\'9f\\'a7e\\par", 1)  # Mac Roman: 0x9F is ü, 0xA7 ß
    assert convert(mac, "text/rtf", SETTINGS).markdown.startswith("Grüße\n")


def test_hostile_rtf_fails_or_reads_fast_and_small() -> None:
    """Groups nested a million deep fail saying so (each level held state), without the memory; a `\\binN` that
    claims more bytes than the file has skips to its end; a file cut short reads what it holds."""
    nested = b"{\\rtf1\\ansi " + b"{" * 1_000_000 + b"deep" + b"}" * 1_000_000 + b"}"
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(ConversionError, match=r"^RTF groups are nested more than 1,000 deep"):
            convert(nested, mime_for_path("deep.rtf"), SETTINGS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB for a {len(nested) / 2**20:.0f} MiB file"
    print(f"deep nesting refused in {time.monotonic() - started:.3f} s")
    binary = _officer_with(b"Before the picture. {\\pict\\bin99999999999 " + bytes(range(256)) * 4)
    assert binary.markdown.startswith("# Title 1\n\nBefore the picture.")
    cut = convert(OFFICER[: len(OFFICER) // 2], mime_for_path("cut.rtf"), SETTINGS)
    full = convert(OFFICER, mime_for_path("full.rtf"), SETTINGS)
    assert _headings(cut) == _headings(full) and not CONTROL_WORD.search(cut.markdown)
    assert "| 4,994616997 | AA |" in cut.markdown and "Merged cell" not in cut.markdown  # the rows it holds
    with pytest.raises(ConversionError, match="^RTF document has no text"):
        convert(OFFICER[:3000], mime_for_path("header-only.rtf"), SETTINGS)


def _long_rtf(paragraphs: int) -> bytes:
    head = b"{\\rtf1\\ansi\\ansicpg1252{\\stylesheet{\\s0 Normal;}{\\s1 heading 1;}}"
    unit = (
        b"{\\pard\\s1 Chapter\\par}\\pard Caf\\'e9 and \\u8364? euros{\\footnote A note.}.\\par"
        b"\\trowd\\cellx2000\\cellx4000\\pard\\intbl A\\cell B\\cell\\row\\pard\n"
    )
    return head + unit * paragraphs + b"}"


def test_a_long_rtf_reads_in_linear_work_and_each_footnote_once() -> None:
    """Each paragraph counted the footnotes placed so far: a 5 MB RTF of short paragraphs took 150 s. An empty
    footnote before a real one placed that one again after every later paragraph."""
    from connector.convert import rtf
    from tests.conftest import assert_linear

    def read(paragraphs: int) -> None:  # the reader alone: Markdown's own parse of the result would hide it
        rtf._Reader((b"{\\rtf1\\ansi " + b"\\pard Word.\\par\n" * paragraphs + b"}").decode("latin-1")).read()

    assert_linear(read, 500, "RTF paragraphs")  # 3.07 times the work with each paragraph counting the notes
    doc = convert(_long_rtf(3), "text/rtf", SETTINGS)
    assert doc.markdown.count("# Chapter") == 3 and doc.markdown.count("Café and € euros") == 3
    assert [line for line in doc.markdown.splitlines() if line.startswith("[^")] == [
        f"[^{n}]: A note." for n in (1, 2, 3)
    ]
    empty_first = b"{\\rtf1\\ansi \\pard One{\\footnote }.\\par\\pard Two{\\footnote Real.}.\\par\\pard Three.\\par"
    text = convert(empty_first + b"\\pard Four.\\par}", "text/rtf", SETTINGS).markdown
    assert text.count("[^2]: Real.") == 1, text


def test_an_odp_reads_one_section_per_slide_as_the_pptx_it_was_saved_from() -> None:
    """ODP failed as "an ODP presentation; save it as PPTX or PDF": now each slide is a page under its title (or
    "Slide N"), its frames' paragraphs, lists and tables below it, as for the PPTX."""
    data = (REAL / "officer-example.odp").read_bytes()
    pptx = convert((REAL / "officer-example.pptx").read_bytes(), mime_for_path("example.pptx"), SETTINGS)
    for label in (mime_for_path("example.odp"), "application/octet-stream"):
        doc = convert(data, label, SETTINGS)
        _tiles(doc)
        assert doc.title == "document title" and len(doc.page_starts) == 3
        assert _headings(doc) == _headings(pptx) == ["## Title", "## Hi", "## Slide 3"]
        assert doc.page_at(doc.markdown.index("## Hi")) == 2
        assert "- and some list (1)\n- and some list (2)\n" in doc.markdown
        assert "| Header 1 | Header 2 | Header 3 |\n|---|---|---|\n| A | 12.23 | blah blah |" in doc.markdown


def _rezip(data: bytes, edit) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item, edit(item.filename, src.read(item.filename)))
    return out.getvalue()


def test_a_deck_with_no_title_anywhere_is_not_titled_slide_1() -> None:
    """With no `dc:title` and no title frame on its first slide, the made-up heading "Slide 1" became the deck's
    title, and so the title in every chunk's embedding text; it now has none (the file name stands in)."""

    def untitled(name: str, content: bytes) -> bytes:
        if name == "meta.xml":
            return re.sub(rb"<dc:title>[^<]*</dc:title>", b"", content)
        if name == "content.xml":
            return content.replace(b'presentation:class="title"', b'presentation:class="outline"', 1)
        return content

    data = _rezip((REAL / "officer-example.odp").read_bytes(), untitled)
    doc = convert(data, mime_for_path("deck.odp"), SETTINGS)
    assert _headings(doc)[0] == "## Slide 1" and doc.title is None
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank: no title placeholder
    slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "Quarterly figures"
    buffer = __import__("io").BytesIO()
    deck.save(buffer)
    doc = convert(buffer.getvalue(), mime_for_path("deck.pptx"), SETTINGS)
    assert _headings(doc) == ["## Slide 1"] and "Quarterly figures" in doc.markdown and doc.title is None
