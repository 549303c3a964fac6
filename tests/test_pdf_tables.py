"""PDF tables rebuilt as Markdown pipe tables, on pages of real documents: ruled, booktabs (horizontal rules only)
and rule-free tables, a table split by rows, captions bound to their table, code listings left alone."""

from __future__ import annotations

import pymupdf

from connector import tokens
from connector.convert import convert
from connector.models import Document
from tests.conftest import FIXTURES
from tests.test_convert import CHUNKING


def _convert(name: str) -> Document:
    return convert((FIXTURES / name).read_bytes(), "application/pdf", CHUNKING)


def _tables(doc: Document, page: int | None = None) -> list[str]:
    return [doc.markdown[b.start : b.end] for b in doc.blocks if b.kind == "table" and page in (None, b.page)]


def _rules(name: str, page: int) -> tuple[int, int]:
    """(vertical, horizontal) ruling line segments drawn on a page, to keep each test honest about its table."""
    vertical = horizontal = 0
    with pymupdf.open(FIXTURES / name) as pdf:
        for drawing in pdf[page - 1].get_drawings():
            for item in drawing["items"]:
                if item[0] == "l":
                    a, b = item[1], item[2]
                    vertical += abs(a.x - b.x) < 1 and abs(a.y - b.y) > 5
                    horizontal += abs(a.y - b.y) < 1 and abs(a.x - b.x) > 5
                elif item[0] == "re":
                    r = item[1]
                    vertical += r.width < 2 and r.height > 5
                    horizontal += r.height < 2 and r.width > 5
    return vertical, horizontal


def test_a_table_without_any_ruling_line() -> None:
    assert _rules("R-intro-p42.pdf", 1) == (0, 0)
    doc = _convert("R-intro-p42.pdf")
    (table,) = _tables(doc)
    lines = table.strip().split("\n")
    assert lines[:4] == [
        "| Distribution | R name | additional arguments |",
        "|---|---|---|",
        "| beta | beta | shape1, shape2, ncp |",
        "| binomial | binom | size, prob |",
    ]
    assert len(lines) == 2 + 19  # header, delimiter and the 19 distributions of R-intro §8.1
    assert lines[-1] == "| Wilcoxon | wilcox | m, n |"


def test_wrapped_cells_stay_in_their_row_and_the_caption_below_is_bound_to_the_table() -> None:
    assert _rules("lme4-lmer-jss-p3-p5.pdf", 2)[0] == 0  # booktabs: horizontal rules only
    doc = _convert("lme4-lmer-jss-p3-p5.pdf")
    (table,) = _tables(doc, page=2)
    lines = table.strip().split("\n")
    assert lines[0] == "| Module |  | R function | Description |"
    assert lines[1] == "|---|---|---|---|"
    assert len(lines) == 6  # one row per module
    assert lines[-1] == (
        "| Output module | (Section 5) | mkMerMod "
        "| Accepts an optimized deviance function and packages the results into a useful object. |"
    )
    # The caption under the table belongs to the same unit: no chunk boundary between them.
    start = doc.markdown.index("| Module |")
    caption = doc.markdown.index("Table 1: The high-level modular structure of lmer.")
    assert any(u.start <= start and caption < u.end for u in doc.units)


def test_cells_centred_in_their_row_keep_their_lines_in_that_row() -> None:
    """dblatex centres each cell vertically: a two-line description starts above its row's other cells, a one-line
    command sits between the two lines of its description. Each description stays in its own row."""
    doc = _convert("real/debian-reference-de-p33-p54.pdf")
    rows = [line for table in _tables(doc) for line in table.strip().split("\n")]
    assert "| sudo | V:638, I:823 | 5990 | Ein Programm, das Benutzern eingeschränkte root-Privilegien einräumt |" in (
        rows
    )
    assert (
        "| vim | V:97, I:390 | 3570 | Unix Texteditor Vi IMproved, ein Texteditor für Programmierer (Standardversion) |"
    ) in rows
    assert "| w3m | V:14, I:190 | 2828 | Textmodus-WWW-Browser |" in rows
    assert "| gpm | V:11, I:14 | 521 | Unix-ähnliches Kopieren-und-Einfügen auf der Textkonsole (Daemon) |" in rows
    # p. 54, two columns: the one-line command beside the middle of its two-line description
    assert "| whoami | derzeitigen Benutzernamen anzeigen |" in rows
    assert (
        "| id | derzeitige Benutzeridentität anzeigen (Name, uid (Benutzer-ID), gid (Gruppen-ID) und zugehörige "
        "Gruppen) |"
    ) in rows
    assert "| rmdir foo | das Verzeichnis foo im derzeitigen Verzeichnis löschen |" in rows


def test_a_code_listing_in_columns_is_not_a_table() -> None:
    doc = _convert("lme4-lmer-jss-p3-p5.pdf")
    (block,) = [b for b in doc.blocks if "'data.frame':" in doc.markdown[b.start : b.end]]
    assert block.kind != "table"
    assert "180 obs. of" in doc.markdown[block.start : block.end]


def test_a_fully_ruled_table_and_a_booktabs_table() -> None:
    vertical, horizontal = _rules("booktabs-p2.pdf", 1)
    assert vertical > 0 and horizontal > 0
    doc = _convert("booktabs-p2.pdf")
    tables = _tables(doc)
    assert "| gnu | stuffed | 92.50 |" in tables[0]  # the boxed \hline|\vline table
    assert tables[1].startswith("| Animal | Description | Price ($) |\n|---|---|---|\n| Gnat | per gram | 13.65 |")


def test_a_table_with_horizontal_rules_only() -> None:
    vertical, horizontal = _rules("xcolor-p10-p37.pdf", 1)
    assert vertical == 0 and horizontal > 0
    doc = _convert("xcolor-p10-p37.pdf")
    models = next(t for t in _tables(doc, page=1) if t.startswith("| Name |"))
    assert "| cmyk | cyan, magenta, yellow, black | [0, 1]4 |  |" in models
    assert "| RGB | Red, Green, Blue | {0, 1, . . . , L}3 | L = 255 |" in models


def test_a_table_over_1000_tokens_is_split_by_rows_and_each_part_repeats_header_and_caption() -> None:
    doc = _convert("xcolor-p10-p37.pdf")
    blocks = [b for b in doc.blocks if b.page == 2]
    parts = [doc.markdown[b.start : b.end].strip() for b in blocks if b.kind == "table"]
    header = "| color | rgb |  | cmyk | hsb |  | Hsb |  | tHsb |\n|---|---|---|---|---|---|---|---|---|"
    split = [p for p in parts if p.startswith(header)]
    assert len(split) >= 2
    for part in parts:
        assert tokens.count(part, CHUNKING.encoding) <= 1000
    # Every row is in exactly one part, in order: nothing lost or repeated but the header.
    rows = [row for part in split for row in part.split("\n")[2:]]
    assert len(rows) == len(set(rows))
    assert rows[0].startswith("| [Hsb]0,1,1 |") and any(r.startswith("| [Hsb]210,1,1 |") for r in rows)
    # Each part is one block, and each is preceded by the caption.
    captions = [b for b in blocks if b.kind == "caption"]
    assert len(captions) == len(split)
    assert {doc.markdown[c.start : c.end].strip() for c in captions} == {"Figure 11: Hsb and tHsb: hue◦in 15◦steps"}
