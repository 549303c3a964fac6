"""CSV, TSV, XLSX, XLS and ODS as Markdown tables, on real files (tests/fixtures/real/SOURCES.md): palmerpenguins'
`penguins.csv`, readxl's `datasets.xlsx` and `deaths.xlsx` and the same workbooks saved as `.xls`, an ODS made from
`penguins.csv`."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from pathlib import Path

import openpyxl
import psycopg
import pytest

from connector import candidates
from connector.chunkers import build
from connector.convert import convert, mime_for_path, spreadsheet
from connector.db import embeddings
from connector.embed import embedding_text, table_header, winner_texts
from connector.errors import ConversionError
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import child_env, connector_cmd

REAL = Path(__file__).parent / "fixtures" / "real"
SETTINGS = ChunkingSettings()
PENGUINS = (REAL / "penguins.csv").read_bytes()
HEADER = "| species | island | bill_length_mm | bill_depth_mm | flipper_length_mm | body_mass_g | sex | year |"


def _tiles(doc: Document) -> None:
    assert doc.blocks[0].start == 0 and doc.blocks[-1].end == len(doc.markdown)
    assert all(a.end == b.start for a, b in zip(doc.blocks, doc.blocks[1:], strict=False))


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


@pytest.mark.parametrize("mime", [mime_for_path("penguins.csv"), "application/octet-stream"], ids=["named", "sniffed"])
def test_a_real_csv_is_a_table_whose_every_part_repeats_the_header_and_loses_no_row(mime: str) -> None:
    """It was plain text: a chunk of rows said nothing of which column is the body mass."""
    doc = convert(PENGUINS, mime, SETTINGS)
    _tiles(doc)
    tables = [doc.markdown[b.start : b.end].strip() for b in doc.blocks if b.kind == "table"]
    assert len(tables) > 1 and all(t.startswith(HEADER + "\n|---|") for t in tables), "split by rows, header in each"
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))
    body = [line for t in tables for line in t.split("\n")[2:]]
    assert body == [_row(r) for r in rows[1:]] and len(body) == 344


def test_prose_with_commas_is_not_taken_for_a_csv() -> None:
    """The sniffer finds a "delimiter" in any text with commas; a real text file stays text."""
    source = (REAL / "postmodern-simple-date.org").read_bytes()
    doc = convert(source, "application/octet-stream", SETTINGS)
    assert doc.markdown == source.decode() and not any(b.kind == "table" for b in doc.blocks)


def test_each_chunk_of_a_split_table_is_embedded_under_its_column_names() -> None:
    """A 512-token window cuts a table part anywhere: the rows it holds are read under the header, the stored text
    is still the document's own (offsets exact)."""
    cfg = ChunkingSettings(strategies=("token_window",))
    doc = convert(PENGUINS, "text/csv", cfg)
    (candidate,) = candidates.generate(doc, build(cfg), cfg, parallel=False)
    texts, prefixes = winner_texts(doc, candidate, "{heading}\n\n{text}", "penguins.csv")
    assert len(candidate.chunks) > 3
    for chunk, text, prefix in zip(candidate.chunks, texts, prefixes, strict=True):
        assert doc.markdown[chunk.start : chunk.end] == chunk.text and text[prefix:] == chunk.text
        assert HEADER in text, "every chunk names the columns"
        if chunk.text.lstrip().startswith(HEADER):
            assert HEADER not in text[:prefix], "a chunk that opens with its header is not given it twice"
    heads = [p for p, c in zip(texts, candidate.chunks, strict=True) if not c.text.lstrip().startswith(HEADER)]
    assert heads, "some chunk starts below a header"
    assert embedding_text("{heading}\n\n{text}", "t", (), "x", HEADER + "\n")[0] == f"t\n\n{HEADER}\nx"


def test_a_workbook_of_several_sheets_is_one_section_per_sheet() -> None:
    """readxl's datasets.xlsx declares every sheet `A1:A1`: read by what the cells are, not by what it says."""
    doc = convert((REAL / "readxl-datasets.xlsx").read_bytes(), mime_for_path("datasets.xlsx"), SETTINGS)
    _tiles(doc)
    headings = [b.section_path for b in doc.blocks if b.kind == "heading"]
    assert headings == [("iris",), ("mtcars",), ("chickwts",), ("quakes",)]
    assert "| Sepal.Length | Sepal.Width | Petal.Length | Petal.Width | Species |" in doc.markdown
    assert "| 5.1 | 3.5 | 1.4 | 0.2 | setosa |" in doc.markdown  # floats as written, not 5.0999999
    assert doc.markdown.count("| setosa |") == doc.markdown.count("| virginica |") == 50
    tables = [doc.markdown[b.start : b.end].strip() for b in doc.blocks if b.kind == "table"]
    assert all(t.split("\n")[0].startswith("| ") for t in tables)


def test_empty_rows_and_columns_of_a_sheet_are_dropped_and_dates_are_dates() -> None:
    doc = convert((REAL / "readxl-deaths.xlsx").read_bytes(), "application/octet-stream", SETTINGS)
    assert [b.section_path for b in doc.blocks if b.kind == "heading"] == [("arts",), ("other",)]
    assert "| David Bowie | musician | 69 | TRUE | 1947-01-08 | 2016-01-10 |" in doc.markdown
    assert "|  |  |  |  |  |  |" not in doc.markdown


@pytest.mark.parametrize("name", ["readxl-datasets", "readxl-deaths"])
def test_a_legacy_xls_reads_as_the_same_workbook_saved_as_xlsx(name: str) -> None:
    """Excel 97-2003 workbooks failed as "a legacy Office document": readxl ships each workbook in both formats,
    and the XLS now gives the very text of the XLSX (sheet headings, dates, booleans, numbers as written), named
    `.xls`, without a name, or named as something else (its OLE2 streams say what it is)."""
    xls = (REAL / f"{name}.xls").read_bytes()
    expected = convert((REAL / f"{name}.xlsx").read_bytes(), mime_for_path(f"{name}.xlsx"), SETTINGS)
    for label in (mime_for_path(f"{name}.xls"), "application/octet-stream", mime_for_path(f"{name}.txt")):
        doc = convert(xls, label, SETTINGS)
        assert doc.markdown == expected.markdown and doc.blocks == expected.blocks
        _tiles(doc)
    if name == "readxl-deaths":
        assert "| Zsa Zsa Gábor | actor | 99 | TRUE | 1917-02-06 | 2016-12-18 |" in doc.markdown  # BIFF's UTF-16
        assert [b.section_path for b in doc.blocks if b.kind == "heading"] == [("arts",), ("other",)]


def test_hostile_xls_files_fail_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut short, encrypted, or past the cell limit (counted as cells are read, and a sheet whose records could
    hold far more refused before xlrd builds them): a `ConversionError` that says so, never a traceback."""
    deaths = (REAL / "readxl-deaths.xls").read_bytes()
    for cut in (deaths[:600], deaths[: len(deaths) // 2]):
        with pytest.raises(ConversionError, match=r"^cannot read XLS: "):
            convert(cut, mime_for_path("deaths.xls"), SETTINGS)
    # An encrypted workbook's globals open with a FILEPASS record (0x2F) after the BOF: put one in place of the
    # INTERFACEHDR record that follows it here (same length), as Excel's "Encrypt with password" writes it.
    bof = deaths.index(b"\x09\x08\x10\x00\x00\x06\x05\x00")
    assert deaths[bof + 20 : bof + 24] == b"\xe1\x00\x02\x00"
    encrypted = deaths[: bof + 20] + b"\x2f\x00" + deaths[bof + 22 :]
    with pytest.raises(ConversionError, match=f"^{re.escape(spreadsheet.XLS_ENCRYPTED)}$"):
        convert(encrypted, "application/octet-stream", SETTINGS)
    datasets = (REAL / "readxl-datasets.xls").read_bytes()  # iris: 151 rows of 5 cells, in 12 KB of records
    monkeypatch.setattr(spreadsheet, "MAX_CELLS", 700)
    with pytest.raises(ConversionError, match=r"^spreadsheet too large: more than"):
        convert(datasets, mime_for_path("datasets.xls"), SETTINGS)
    monkeypatch.setattr(spreadsheet, "MAX_CELLS", 500_000)
    monkeypatch.setattr(spreadsheet, "MAX_XLS_SHEET_BYTES", 10_000)
    with pytest.raises(ConversionError, match=r"^spreadsheet too large: more than"):
        convert(datasets, mime_for_path("datasets.xls"), SETTINGS)


def test_an_ods_is_one_section_per_sheet() -> None:
    doc = convert((REAL / "penguins-by-species.ods").read_bytes(), "application/octet-stream", SETTINGS)
    _tiles(doc)
    assert [b.section_path for b in doc.blocks if b.kind == "heading"] == [("Adelie",), ("Gentoo",), ("Chinstrap",)]
    tables = [doc.markdown[b.start : b.end].strip() for b in doc.blocks if b.kind == "table"]
    assert all(t.startswith(HEADER) for t in tables)
    assert "| Gentoo | Biscoe | 46.1 | 13.2 | 211 | 4500 | female | 2007 |" in doc.markdown


def _cut(keep) -> bytes:
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(keep(rows))
    return out.getvalue().encode()


def test_hostile_csvs_one_column_ragged_rows_quoted_newlines() -> None:
    one = convert(_cut(lambda rows: [r[:1] for r in rows[:60]]), "text/csv", SETTINGS)
    assert one.markdown.startswith("| species |\n|---|\n| Adelie |\n") and one.blocks[0].kind == "table"
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))[:60]
    ragged = convert(_cut(lambda rows: [r[: 8 - i % 3] for i, r in enumerate(rows[:60])]), "text/csv", SETTINGS)
    lines = ragged.markdown.split("\n")
    assert lines[3] == _row([*rows[2][:6], "", ""]) and lines[4] == _row(rows[3]), "padded to the widest row"
    newline = _cut(lambda rows: [rows[0], [*rows[1][:6], "male\nchecked twice", rows[1][7]], *rows[2:60]])
    doc = convert(newline, "application/octet-stream", SETTINGS)
    assert "| 3750 | male checked twice | 2007 |" in doc.markdown and doc.blocks[0].kind == "table"
    _tiles(doc)
    # a field past the csv module's 128 KB limit, beyond the sniffed sample: the file is read as the text it is
    huge = PENGUINS + b'Adelie,"' + b"x" * 200_000 + b'",1,2,3,4,female,2009\n'
    assert convert(huge, "text/csv", SETTINGS).markdown == huge.decode()


def test_a_sheet_of_a_million_cells_is_refused_saying_so(tmp_path: Path) -> None:
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("big")
    for i in range(1000):
        sheet.append(range(i, i + 1000))
    book.save(tmp_path / "big.xlsx")
    with pytest.raises(ConversionError, match=r"^spreadsheet too large: more than 500,000 cells"):
        convert((tmp_path / "big.xlsx").read_bytes(), mime_for_path("big.xlsx"), SETTINGS)


def test_a_sheet_of_formulas_never_calculated_fails_saying_so(tmp_path: Path) -> None:
    """openpyxl writes formulas without their results: a reader of values sees nothing."""
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))
    book = openpyxl.Workbook()
    for i, row in enumerate(rows[1:21], start=1):
        book.active.append([f"=SUM({row[2]}, {row[3]})", f"=A{i}*{row[5]}"])
    book.save(tmp_path / "formulas.xlsx")
    with pytest.raises(ConversionError, match=f"^{re.escape(spreadsheet.NO_VALUES)}$"):
        convert((tmp_path / "formulas.xlsx").read_bytes(), mime_for_path("formulas.xlsx"), SETTINGS)


NAMES = ("penguins.csv", "readxl-datasets.xlsx", "penguins-by-species.ods", "readxl-deaths.xls")


def test_tables_ingest_end_to_end(tmp_path: Path, migrated_dsn) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in NAMES:
        (folder / name).write_bytes((REAL / name).read_bytes())
    command = connector_cmd("ingest", str(folder), "--dsn", migrated_dsn, "--embedder", "fake")
    # token windows: chunks that start below a table's header rows, which the re-embedding below must find
    env = {**child_env(tmp_path), "CONNECTOR_CHUNK_STRATEGIES": '["token_window"]'}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(migrated_dsn) as conn:
        rows = conn.execute(
            "SELECT d.source_key, d.status, c.chunk_type, c.section_path, "
            "substr(d.markdown, c.start_char + 1, c.end_char - c.start_char) = c.text "
            "FROM connector.documents d JOIN connector.chunks c ON c.document_id = d.id"
        ).fetchall()
    assert {r[0] for r in rows} == set(NAMES)
    assert all(r[1] == "done" and r[4] for r in rows)
    assert {r[2] for r in rows if r[0] == "penguins.csv"} == {"table"}
    assert {tuple(r[3]) for r in rows if r[0] == "readxl-datasets.xlsx"} >= {("iris",), ("quakes",)}
    assert {tuple(r[3]) for r in rows if r[0] == "readxl-deaths.xls"} == {("arts",), ("other",)}
    # a re-embedding (`connector reembed`) reads each chunk under the same header rows as the writer did
    document = convert(PENGUINS, "text/csv", SETTINGS)
    with psycopg.connect(migrated_dsn) as conn:
        stored = [c for c in embeddings.all_chunks(conn) if c.text in document.markdown]
    assert stored and any(c.table_head for c in stored)
    assert all(c.table_head == table_header(document, c.start_char) for c in stored)
    # and reads each document's blocks once, not once per chunk (quadratic: 25 s for a 4 MB document)
    with psycopg.connect(migrated_dsn) as conn:
        chunks = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + embeddings.ALL_CHUNKS_TEXT).fetchone()[0]
    loops = sum(n["Actual Loops"] for n in _plan_nodes(plan[0]["Plan"]) if n.get("Function Name"))
    assert loops <= len(NAMES) < chunks, (loops, chunks)  # once per document


def _plan_nodes(node: dict) -> list[dict]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


def _rezipped(data: bytes, part: str, edit) -> bytes:
    """A copy of a real package with one of its parts edited."""
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            body = src.read(name)
            kind = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            z.writestr(name, edit(body) if name == part else body, compress_type=kind)
    return out.getvalue()


def test_hostile_sheets_are_refused_before_their_size_is_spent(tmp_path: Path) -> None:
    """Three ways past the cell count: a negative ODF repeat took cells off it (the next huge repeat was then
    expanded whole), empty rows before a far cell were not counted (openpyxl yields each of them: a minute of CPU
    for a 5 KB file), and a table's padding was not counted (one wide row over many short ones)."""
    too_large = r"^spreadsheet too large: more than 500,000 cells"
    ods = (REAL / "penguins-by-species.ods").read_bytes()
    negative = _rezipped(
        ods,
        "content.xml",
        lambda xml: xml.replace(b"<table:table-row>", b'<table:table-row table:number-rows-repeated="-100000000">', 1)
        .replace(b"<text:p>Torgersen</text:p>", b"<text:p>Torgersen</text:p></table:table-cell>"
                 b'<table:table-cell table:number-columns-repeated="20000000"><text:p>x</text:p>', 1),
    )  # fmt: skip
    with pytest.raises(ConversionError, match=too_large):
        convert(negative, mime_for_path("penguins.ods"), SETTINGS)
    deaths = (REAL / "readxl-deaths.xlsx").read_bytes()
    far = b'<row r="200000000"><c r="A200000000" t="inlineStr"><is><t>x</t></is></c></row></sheetData>'
    lying = _rezipped(deaths, "xl/worksheets/sheet1.xml", lambda xml: xml.replace(b"</sheetData>", far))
    with pytest.raises(ConversionError, match=too_large):
        convert(lying, mime_for_path("deaths.xlsx"), SETTINGS)
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("wide")
    sheet.append(rows[0] + [f"extra_{i}" for i in range(2000)])  # 2,008 columns over 344 rows: 690,752 cells
    for row in rows[1:]:
        sheet.append(row[:1])
    book.save(tmp_path / "wide.xlsx")
    with pytest.raises(ConversionError, match=too_large):
        convert((tmp_path / "wide.xlsx").read_bytes(), mime_for_path("wide.xlsx"), SETTINGS)


def test_a_wide_header_over_short_rows_does_not_multiply_the_table() -> None:
    """penguins.csv with 1,000 more columns named in its header and its rows cut to their species: padded to the
    header and split under it, each row was a part repeating the 1,000-column header (15 KB of CSV, megabytes of
    Markdown). Mostly short rows under a wide one are the text they are; a table whose header fills half a part
    is not split."""
    rows = list(csv.reader(io.StringIO(PENGUINS.decode())))
    header = rows[0] + [f"measure_{i}" for i in range(1000)]
    ragged = "\n".join([",".join(header), *(r[0] for r in rows[1:])]) + "\n"
    assert convert(ragged.encode(), "text/csv", SETTINGS).markdown == ragged
    full = "\n".join(",".join(r + ["1"] * 1000) for r in rows[1:41])  # its first 40 rows, every cell filled
    full = ",".join(header) + "\n" + full + "\n"
    doc = convert(full.encode(), "text/csv", SETTINGS)
    assert len(doc.markdown) < 2 * len(full)
    assert [b.kind for b in doc.blocks] == ["table"] and doc.markdown.count("| species |") == 1
    _tiles(doc)
