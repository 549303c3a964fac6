"""Office documents lose no text and glue no words: content controls, tracked changes, fields, text boxes, nested
tables, footnotes and endnotes in DOCX; `text:s`, tabs, line breaks, notes, frames and cell paragraphs in ODT; soft
line breaks and fields in PPTX.

Each document is a real one from `fixtures/real` (see its SOURCES.md) whose body XML is replaced, here, by XML that
shows what Word, LibreOffice and PowerPoint write for these features: the package around it (styles, numbering,
relationships, note parts, metadata) stays the real one."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

from connector.convert import DOCX, ODT, PPTX, convert
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES
from tests.test_convert import assert_tiles

REAL = FIXTURES / "real"
CHUNKING = ChunkingSettings()


def _repack(path: Path, changes: dict[str, Callable[[str], str]]) -> bytes:
    """The package at `path` with the parts in `changes` replaced by `change(old_text)`'s result."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename in changes:
                data = changes[info.filename](data.decode()).encode()
            dst.writestr(info, data)
    return out.getvalue()


def _between(text: str, start: str, end: str, new: str) -> str:
    """`text` with what lies between the tag that begins with `start` and `end` replaced by `new`."""
    i = text.index(">", text.index(start)) + 1
    return text[:i] + new + text[text.index(end, i) :]


def _assert_once_in_order(markdown: str, phrases: list[str]) -> None:
    positions = []
    for phrase in phrases:
        assert markdown.count(phrase) == 1, (phrase, markdown)
        positions.append(markdown.index(phrase))
    assert positions == sorted(positions), "in document order"


# --- DOCX ---------------------------------------------------------------------------------------------------------

_A = 'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
_DRAWINGML = "http://schemas.microsoft.com/office/word/2010/wordprocessingShape"


def _run(text: str) -> str:
    return f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>'


def _p(*content: str, style: str = "") -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{props}{''.join(content)}</w:p>"


def _tc(text: str) -> str:
    return f"<w:tc>{_p(_run(text))}</w:tc>"


_CHANGE = 'w:author="Reviewer" w:date="2024-01-01T00:00:00Z"'
_TEXT_BOX = _p(_run("Text box sidebar.")).replace("<w:p>", "<w:txbxContent><w:p>") + "</w:txbxContent>"
_LIST_ITEM = '<w:pPr><w:pStyle w:val="Paragraphedeliste"/><w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr>'
DOCX_BODY = "".join(
    [
        _p(_run("Contract terms"), style="Titre1"),
        # a block content control (Word's "Rich Text Content Control" around two paragraphs)
        '<w:sdt><w:sdtPr><w:alias w:val="Clause"/></w:sdtPr><w:sdtContent>',
        _p(_run("Inside a block content control.")),
        _p(_run("Its second paragraph.")),
        "</w:sdtContent></w:sdt>",
        # tracked insertion and deletion, an inline control, a hyperlink, a simple and a complex field, a smart tag
        _p(
            _run("Paragraph with "),
            f'<w:ins w:id="1" {_CHANGE}>{_run("inserted text ")}</w:ins>',
            f'<w:del w:id="2" {_CHANGE}><w:r><w:delText xml:space="preserve">DELETEDTEXT </w:delText></w:r></w:del>',
            f"<w:sdt><w:sdtPr/><w:sdtContent>{_run('an inline control, ')}</w:sdtContent></w:sdt>",
            f'<w:hyperlink w:anchor="terms">{_run("a link")}</w:hyperlink>',
            _run(", page "),
            f'<w:fldSimple w:instr=" PAGE ">{_run("7")}</w:fldSimple>',
            _run(" of "),
            '<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> NUMPAGES '
            '</w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>9</w:t></w:r>'
            '<w:r><w:fldChar w:fldCharType="end"/></w:r>',
            f'<w:smartTag w:uri="urn:schemas-microsoft-com:office:smarttags" w:element="place">{_run(" in Paris")}'
            "</w:smartTag>",
            _run(" and end."),
        ),
        # a paragraph deleted as a whole while changes were tracked
        f'<w:p><w:pPr><w:rPr><w:del w:id="3" {_CHANGE}/></w:rPr></w:pPr><w:del w:id="4" {_CHANGE}><w:r>'
        "<w:delText>DELETEDPARAGRAPH</w:delText></w:r></w:del></w:p>",
        _p("<w:r><w:t>First line</w:t><w:br/><w:t>second line</w:t><w:tab/><w:t>after a tab</w:t></w:r>"),
        # a text box as Word 2010+ writes it: DrawingML in mc:Choice, the same box in VML in mc:Fallback
        _p(
            _run("Anchor paragraph."),
            f'<w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic {_A}>'
            f'<a:graphicData uri="{_DRAWINGML}"><wps:wsp><wps:txbx>{_TEXT_BOX}</wps:txbx></wps:wsp></a:graphicData>'
            f"</a:graphic></wp:anchor></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape><v:textbox>{_TEXT_BOX}"
            "</v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r>",
        ),
        # a table with two paragraphs and a table in one cell, and a row in a (repeating section) content control
        '<w:tbl><w:tblPr/><w:tblGrid><w:gridCol w:w="4000"/><w:gridCol w:w="4000"/></w:tblGrid>',
        f"<w:tr>{_tc('Item')}{_tc('Detail')}</w:tr>",
        f"<w:tr>{_tc('Outer')}",
        f"<w:tc>{_p(_run('Cell paragraph one'))}{_p(_run('cell paragraph two'))}",
        f"<w:tbl><w:tblPr/><w:tr>{_tc('inner a')}{_tc('inner b')}</w:tr><w:tr>{_tc('inner c')}{_tc('inner d')}</w:tr>",
        "</w:tbl><w:p/></w:tc>",
        "</w:tr>",
        f"<w:sdt><w:sdtPr/><w:sdtContent><w:tr>{_tc('Repeating')}{_tc('row in a control')}</w:tr></w:sdtContent>"
        "</w:sdt></w:tbl>",
        _p(
            _run("A claim"),
            '<w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr><w:footnoteReference w:id="1"/></w:r>',
            _run(" and another"),
            '<w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr><w:endnoteReference w:id="1"/></w:r>',
            _run("."),
        ),
        f'<w:p>{_LIST_ITEM}</w:pPr>{_run("First item")}<w:r><w:footnoteReference w:id="2"/></w:r></w:p>',
        f"<w:p>{_LIST_ITEM}</w:pPr>{_run('Second item')}</w:p>",
        _p(_run("The end.")),
    ]
)


def _note(kind: str, note_id: int, text: str) -> str:
    return f'<w:{kind} w:id="{note_id}"><w:p><w:r><w:{kind}Ref/></w:r>{_run(" " + text)}</w:p></w:{kind}>'


DOCX_MARKDOWN = """\
# Contract terms

Inside a block content control.

Its second paragraph.

Paragraph with inserted text an inline control, a link, page 7 of 9 in Paris and end.

First line
second line after a tab

Anchor paragraph.

Text box sidebar.

| Item | Detail |
|---|---|
| Outer | Cell paragraph one cell paragraph two inner a; inner b / inner c; inner d |
| Repeating | row in a control |

A claim[^1] and another[^2].

[^1]: The source, page 12.

[^2]: An endnote.

- First item[^3]
- Second item

[^3]: A note on the list.

The end.
"""


def word_document() -> bytes:
    footnotes = _note("footnote", 1, "The source, page 12.") + _note("footnote", 2, "A note on the list.")
    return _repack(
        REAL / "officer-example.docx",
        {
            "word/document.xml": lambda xml: _between(xml, "<w:body", "<w:sectPr", DOCX_BODY),
            "word/footnotes.xml": lambda xml: xml.replace("</w:footnotes>", footnotes + "</w:footnotes>"),
            "word/endnotes.xml": lambda xml: xml.replace(
                "</w:endnotes>", _note("endnote", 1, "An endnote.") + "</w:endnotes>"
            ),
        },
    )


def test_docx_reads_controls_tracked_changes_fields_text_boxes_nested_tables_and_notes() -> None:
    d = convert(word_document(), DOCX, CHUNKING)
    assert d.markdown == DOCX_MARKDOWN
    for gone in ("DELETED", "NUMPAGES", "PAGE "):
        assert gone not in d.markdown, "deleted text and field codes are no text"
    _assert_once_in_order(d.markdown, ["inserted text", "an inline control", "Text box sidebar.", "inner d",
                                       "row in a control", "[^1]: The source", "[^2]: An endnote"])  # fmt: skip
    assert_tiles(d)
    assert [b.kind for b in d.blocks] == ["heading", *["paragraph"] * 6, "table", "paragraph", "footnote", "footnote",
                                          "list", "footnote", "paragraph"]  # fmt: skip
    assert d.title == "document title" and d.section_path_at(d.markdown.index("The end.")) == ("Contract terms",)


# --- ODT ----------------------------------------------------------------------------------------------------------

ODT_BODY = """\
<text:tracked-changes><text:changed-region text:id="c1"><text:deletion><office:change-info>\
<dc:creator>Reviewer</dc:creator></office:change-info><text:p>DELETEDTEXT</text:p></text:deletion>\
</text:changed-region></text:tracked-changes>\
<text:h text:outline-level="1">Edge cases</text:h>\
<text:p>Word<text:s text:c="3"/>after three spaces<text:tab/>after a tab<text:line-break/>after a break\
<text:change text:change-id="c1"/>.</text:p>\
<text:p>Has a footnote<text:note text:id="ftn1" text:note-class="footnote"><text:note-citation>1</text:note-citation>\
<text:note-body><text:p>The footnote body.</text:p></text:note-body></text:note> and continues.</text:p>\
<text:p><draw:frame draw:name="Frame1" text:anchor-type="paragraph" svg:width="5cm"><draw:text-box>\
<text:p>Frame text.</text:p></draw:text-box></draw:frame>Paragraph holding a frame.</text:p>\
<text:p>A comment<office:annotation><dc:creator>Reviewer</dc:creator><dc:date>2024-01-01T00:00:00</dc:date>\
<text:p>COMMENTTEXT</text:p></office:annotation> is no text.</text:p>\
<table:table table:name="T1"><table:table-column table:number-columns-repeated="2"/>\
<table:table-row><table:table-cell><text:p>two</text:p><text:p>paragraphs</text:p></table:table-cell>\
<table:table-cell><table:table table:name="T2"><table:table-column table:number-columns-repeated="2"/>\
<table:table-row><table:table-cell><text:p>inner a</text:p></table:table-cell>\
<table:table-cell><text:p>inner b</text:p></table:table-cell></table:table-row></table:table></table:table-cell>\
</table:table-row>\
<table:table-row><table:table-cell><text:p>x<text:line-break/>y</text:p></table:table-cell>\
<table:table-cell><text:p>z</text:p></table:table-cell></table:table-row></table:table>\
<text:list><text:list-item><text:p>Item with a note<text:note text:id="edn1" text:note-class="endnote">\
<text:note-citation>i</text:note-citation><text:note-body><text:p>An endnote.</text:p></text:note-body></text:note>\
</text:p></text:list-item><text:list-item><text:p>Second item</text:p></text:list-item></text:list>\
<text:p>The end.</text:p>"""

ODT_MARKDOWN = """\
# Edge cases

Word after three spaces after a tab
after a break.

Has a footnote[^1] and continues.

[^1]: The footnote body.

Paragraph holding a frame.

Frame text.

A comment is no text.

| two paragraphs | inner a; inner b |
|---|---|
| x y | z |

- Item with a note[^2]
- Second item

[^2]: An endnote.

The end.
"""


def test_odt_spaces_tabs_breaks_notes_frames_and_cell_paragraphs_keep_words_apart() -> None:
    data = _repack(
        REAL / "live-manual-en.odt",
        {"content.xml": lambda xml: _between(xml, "<office:text", "</office:text>", ODT_BODY)},
    )
    d = convert(data, ODT, CHUNKING)
    assert d.markdown == ODT_MARKDOWN
    assert "DELETED" not in d.markdown and "COMMENT" not in d.markdown and "Reviewer" not in d.markdown
    assert not re.search(r"Wordafter|tabafter|footnote1|bodyand|textParagraph|twoparagraphs", d.markdown)
    assert_tiles(d)
    assert [b.kind for b in d.blocks] == ["heading", "paragraph", "paragraph", "footnote", "paragraph", "paragraph",
                                          "paragraph", "table", "list", "footnote", "paragraph"]  # fmt: skip
    assert d.title == "Edge cases", "no title in the real package's metadata: the first heading"


# --- PPTX ---------------------------------------------------------------------------------------------------------

_BREAK = '<a:br><a:rPr lang="fr-FR"/></a:br>'
_SLIDE_NUMBER = (
    '<a:fld id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}" type="slidenum"><a:rPr lang="fr-FR"/><a:t>1</a:t></a:fld>'
)


def test_pptx_soft_line_breaks_and_fields_are_text() -> None:
    def slide(xml: str) -> str:
        xml = xml.replace(
            "<a:t>A table </a:t></a:r>",
            f'<a:t>A table</a:t></a:r>{_BREAK}<a:r><a:rPr lang="fr-FR"/><a:t>with a soft break</a:t></a:r>',
        )
        return xml.replace(
            "<a:t>R logo</a:t></a:r>",
            f'<a:t>R</a:t></a:r>{_BREAK}<a:r><a:rPr lang="fr-FR"/><a:t>logo, slide </a:t></a:r>{_SLIDE_NUMBER}',
        )

    d: Document = convert(_repack(REAL / "officer-example.pptx", {"ppt/slides/slide1.xml": slide}), PPTX, CHUNKING)
    assert "- A table with a soft break\n- and some text\n" in d.markdown, "a list item stays on one line"
    assert "\n\nR\nlogo, slide 1\n\n" in d.markdown, "a paragraph keeps its line break; the slide number field"
    assert "tablewith" not in d.markdown and "Rlogo" not in d.markdown
    assert_tiles(d)
    assert len(d.page_starts) == 3 and d.page_at(d.markdown.index("logo, slide 1")) == 1


def test_docx_line_breaks_start_no_markdown_block_and_a_note_in_a_cell_follows_the_table() -> None:
    """A kept line break puts text at the start of a line, where Markdown would read a heading, a fence or an HTML
    comment that swallows what follows: those lines are escaped, and the paragraph stays one block."""
    lines = ["Intro", "# not a heading", "```python", "<!-- not a comment", "***", "1. not an item"]
    paragraph = _p(
        "<w:r>" + "<w:br/>".join(f'<w:t xml:space="preserve">{escape(line)}</w:t>' for line in lines) + "</w:r>"
    )
    cited = f'<w:tc><w:p>{_run("cited")}<w:r><w:footnoteReference w:id="1"/></w:r></w:p></w:tc>'
    table = f"<w:tbl><w:tblPr/><w:tr>{_tc('Head')}{_tc('Other')}</w:tr><w:tr>{cited}{_tc('cell')}</w:tr></w:tbl>"
    data = _repack(
        REAL / "officer-example.docx",
        {
            "word/document.xml": lambda xml: _between(
                xml, "<w:body", "<w:sectPr", paragraph + table + _p(_run("After."))
            ),
            "word/footnotes.xml": lambda xml: xml.replace(
                "</w:footnotes>", _note("footnote", 1, "Why it is cited.") + "</w:footnotes>"
            ),
        },
    )
    d = convert(data, DOCX, CHUNKING)
    expected = "Intro\n\\# not a heading\n\\```python\n\\<!-- not a comment\n\\***\n\\1. not an item\n\n"
    assert d.markdown.startswith(expected)
    assert d.markdown.endswith("| cited[^1] | cell |\n\n[^1]: Why it is cited.\n\nAfter.\n")
    assert_tiles(d)
    assert [b.kind for b in d.blocks] == ["paragraph", "table", "footnote", "paragraph"]
