"""DocBook and Mallard XML (`connector/convert/docbook.py`), on real sources from Debian packages: KDE's KCalc
handbook and a page of GNOME Calculator's help (`fixtures/real/SOURCES.md`)."""

from __future__ import annotations

import re

import pytest
from lxml import etree

from connector.convert import convert, docbook, mime_for_path
from connector.errors import ConversionError
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES
from tests.test_convert import assert_tiles
from tests.test_convert_hostile import _ends

REAL = FIXTURES / "real"
CHUNKING = ChunkingSettings()
_TAG = re.compile(r"</?[a-z][\w:.-]*[ />]|&[\w.-]+;")


def doc(name: str) -> Document:
    path = REAL / name
    return convert(path.read_bytes(), mime_for_path(path), CHUNKING)


def block_with(d: Document, text: str):
    return next(b for b in d.blocks if text in d.markdown[b.start : b.end])


def test_a_kde_handbook_is_read_as_docbook_not_kept_as_tags() -> None:
    d = doc("kcalc-handbook-index.docbook")
    assert_tiles(d)
    assert d.title == "The kcalc Handbook"  # `<bookinfo><title>The &kcalc; Handbook`: the entity's name, no DTD here
    assert not _TAG.findall(d.markdown), _TAG.findall(d.markdown)[:5]
    heading = block_with(d, "General Usage")
    assert heading.kind == "heading"
    assert heading.section_path == ("The kcalc Handbook", "Usage", "General Usage")
    assert block_with(d, "## Introduction").kind == "heading"
    # the abstract is text; authors, copyright and the legal notice (metadata) are not
    assert "kcalc is a calculator for your desktop environment." in d.markdown
    assert "FDLNotice" not in d.markdown and "2016-07-25" not in d.markdown and "Applications 16.08" not in d.markdown
    assert "Bernd Johannes Wuebben 1996-2000" in d.markdown  # the credits chapter: an author entity, in words
    # a CALS table is a table, its header row the `<thead>`
    table = block_with(d, "| Hyp | Enter Hyperbolic sub mode.")
    assert table.kind == "table"
    assert d.markdown[table.start :].startswith("| Buttons | Function |\n| --- | --- |\n")
    # a `variablelist` entry is one list block, term and text; key combinations and menus as the stylesheets write them
    entry = block_with(d, "Result Stack")
    assert entry.kind == "list" and "written to kcalc's result stack" in d.markdown[entry.start : entry.end]
    assert "Ctrl+Z" in d.markdown and "Ctrl+Shift+Z" in d.markdown
    assert "Settings → Configure kcalc..." in d.markdown
    assert "[Infix\nnotation](https://en.wikipedia.org/wiki/Calculator_input_methods#Infix_notation)" in d.markdown
    assert "`22 Mod 8 =`" in d.markdown  # `<userinput>`
    # `<!ENTITY commands SYSTEM "commands.docbook">` names a file beside it: not read, and no word of it shown
    assert "commands" not in d.markdown.split("## Questions and Answers")[-1]


def test_a_chapter_file_of_a_handbook_is_docbook_by_its_name() -> None:
    """KDE's `commands.docbook` is a bare `<chapter>` (no doctype: the handbook pulls it in as an entity)."""
    data = (REAL / "kcalc-handbook-index.docbook").read_bytes()
    chapter = data[data.index(b'<chapter id="usage">') : data.index(b"</chapter>", data.index(b'"usage"')) + 10]
    d = convert(chapter, mime_for_path("commands.docbook"), CHUNKING)
    assert d.title == "Usage" and d.markdown.startswith("# Usage\n\n## General Usage\n")
    # the same bytes named `.xml` say nothing of DocBook: text, as any XML
    assert convert(chapter, mime_for_path("usage.xml"), CHUNKING).markdown == chapter.decode()


def test_a_mallard_help_page_is_read_with_its_title_and_table() -> None:
    d = doc("gnome-calculator-keyboard.page")
    assert_tiles(d)
    assert d.title == "Using the Keyboard"
    assert d.markdown.startswith("# Using the Keyboard\n\nAll mathematical equations can be entered using the keyboard")
    assert not _TAG.findall(d.markdown), _TAG.findall(d.markdown)[:5]
    assert block_with(d, "| √ | Ctrl+R |").kind == "table"  # `<keyseq><key>Ctrl</key><key>R</key></keyseq>`
    assert "Ctrl+number" in d.markdown and "Alt+number" in d.markdown
    assert "pranali21293" not in d.markdown and "3.38.0" not in d.markdown  # its `<info>`: editors, revision


def test_docbook_reads_no_file_and_expands_no_entity() -> None:
    hostile = (
        b'<?xml version="1.0"?>\n<!DOCTYPE article PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" '
        b'"http://www.oasis-open.org/docbook/xml/4.5/docbookx.dtd" [\n'
        b'<!ENTITY secret SYSTEM "file:///etc/hostname">\n<!ENTITY a "lol">\n'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n]>\n'
        b"<article><title>T</title><para>x &secret; y &a; z &b; w &mdash; v &eg;</para></article>\n"
    )
    d = convert(hostile, "application/xml", CHUNKING)
    assert d.title == "T"
    assert "x y lol z b w \u2014 v eg" in d.markdown  # `&b;` would expand to entities: its name


def test_a_code_block_in_a_mallard_step_stays_a_code_block() -> None:
    """`<item><p>…</p><code>` (a file to create, inside a step): a block, not inline code run into one line."""
    d = doc("gnome-admin-guide-mime-types-custom-user.page")
    assert_tiles(d)
    assert d.title == "Add a custom MIME type for individual users"
    steps = block_with(d, "1. Create the `~/.local/share/mime/packages/application-x-newtype.xml`")
    assert steps.kind == "list"
    assert (
        '   ```\n   <?xml version="1.0" encoding="UTF-8"?>\n'
        '   <mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">\n'
        '     <mime-type type="application/x-newtype">\n'
    ) in d.markdown[steps.start : steps.end]
    assert "   ```\n   $ update-mime-database ~/.local/share/mime\n   ```" in d.markdown


def test_a_listing_inside_a_paragraph_is_a_code_block() -> None:
    """`<para>…<programlisting>` (konsole's handbook writes its key binding syntax so): HTML ends a `<p>` at a block,
    and the listing's lines ran together as inline code."""
    source = (
        b'<?xml version="1.0"?>\n<!DOCTYPE article PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" "docbookx.dtd">\n'
        b"<article><title>Keys</title><para>The syntax is:\n<programlisting>Key (+|-) Modes\nUp+Shift</programlisting>"
        b"\nand so on.</para></article>\n"
    )
    d = convert(source, "application/xml", CHUNKING)
    assert "```\nKey (+|-) Modes\nUp+Shift\n```" in d.markdown
    assert block_with(d, "Up+Shift").kind == "code" and "and so on." in d.markdown


def test_docbook_that_shows_nothing_as_docbook_is_read_as_text_in_its_charset() -> None:
    """The fallback to plain text called a function this session's charset change had removed (AttributeError on
    any such file). A DocBook file of only a comment, with words after its root and a Latin-1 byte, is text."""
    data = (
        b'<?xml version="1.0" encoding="ISO-8859-1"?>\n<!DOCTYPE book PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" '
        b'"docbookx.dtd">\n<book><!-- caf\xe9 --></book>\nwords after the root\n'
    )
    d = convert(data, mime_for_path("empty.docbook"), CHUNKING)
    assert_tiles(d)
    assert d.markdown == data.decode("cp1252")


@pytest.mark.parametrize(
    "unit",
    [b"w &kde; ", b"<sect1/>\n"],
    ids=["entities-in-a-paragraph", "sections-in-a-book"],
)
def test_many_entities_or_children_are_written_in_linear_time(unit: bytes) -> None:
    """Each entity's text was added to its paragraph's whole text inside lxml (100,000 `&kde;`, 0.8 MB: 89 s), and
    each tail looked for the last child with lxml's `len()`, which counts every child (40,000 paragraphs in a
    chapter, 3.5 MB: 118 s). Both copies happen in C, where `work` counts nothing, so the HTML tree is built under
    the hang guard: 400,000 take a few seconds now, and with either step back they ran past it."""
    data = b'<!DOCTYPE book PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" "x"><book>' + unit * 400_000 + b"</book>"
    root = etree.fromstring(data, etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True))
    writer = docbook._Writer(root, docbook._DOCBOOK, docbook.DOCBOOK)
    body = etree.Element("body")
    with _ends(f"a book of 400,000 {unit!r}"):
        writer.element(root, body, 0)
        writer.flush()
    assert "".join(body.itertext()).count("kde") == (400_000 if b"kde" in unit else 0)


def test_docbook_nested_past_the_parsers_depth_limit_fails_saying_so() -> None:
    """libxml2's recovering parser stops at depth 256 and keeps nothing after it: 300 nested sections converted
    "OK" with the text past that depth, and all that followed, silently gone."""
    data = (
        b'<!DOCTYPE book PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" "x"><book>'
        + b"<section><para>deep</para>" * 300
        + b"</section>" * 300
        + b"<para>the text after it</para></book>"
    )
    with pytest.raises(ConversionError, match="nested over 256 deep"):
        convert(data, mime_for_path("deep.docbook"), CHUNKING)
    shallow = data.replace(b"<section><para>deep</para>" * 300, b"<section><para>deep</para>" * 200)
    shallow = shallow.replace(b"</section>" * 300, b"</section>" * 200)
    assert "the text after it" in convert(shallow, mime_for_path("deep.docbook"), CHUNKING).markdown
