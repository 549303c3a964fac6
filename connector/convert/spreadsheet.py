"""XLSX, XLS and ODS spreadsheets → one section per sheet (its name the heading) holding the sheet's values as a table.

Values, not formulas: an XLSX is read by openpyxl in read-only mode with the values its application last
calculated (`data_only`), a legacy XLS (Excel 97-2003, BIFF in an OLE2 file) by xlrd, likewise its saved values, an
ODS by odfpy (its cells' text as displayed). Rows and columns that hold nothing are
dropped; the first row left is the header. A sheet's size is what its cells say, not what the file declares (readxl's
`datasets.xlsx` declares every sheet `A1:A1`), so cells are counted as they are read and a workbook past
`MAX_CELLS` fails saying so, before its text would fill memory. The ZIP package is checked for a zip bomb first
(`office._guarded`); an XLS sheet is loaded only when its records' bytes could not hold far more cells than that
(`MAX_XLS_SHEET_BYTES`): xlrd builds every cell of a sheet before anyone can count them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator

from connector.convert import markdown
from connector.convert.office import _guarded, pipe_table
from connector.errors import ConversionError
from connector.models import Document

MAX_CELLS = 500_000
"""Cells read from a workbook, empty ones inside its used range included: 500,000 cells are ~5 MB of Markdown (the
document size limit's order) and a few seconds of parsing; a sheet of a million cells fails in the time it takes to
read half of it."""
TOO_LARGE = f"spreadsheet too large: more than {MAX_CELLS:,} cells (save the part you need as CSV, or split it)"
NO_VALUES = (
    "spreadsheet has no values: its cells are empty or hold formulas whose results were never saved (open it in a "
    "spreadsheet application and save it again)"
)


@_guarded("XLSX")
def xlsx(data: bytes) -> Document:
    import io

    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        counter = _Counter()
        sheets = []
        for sheet in book.worksheets:  # chart sheets have no cells
            sheet.reset_dimensions()  # the declared size may be wrong (`A1:A1`): read every row there is
            rows = (counter.count([_text(v) for v in row]) for row in sheet.iter_rows(values_only=True))
            sheets.append((sheet.title, _table(rows, counter)))
        title = book.properties.title
    finally:
        book.close()
    return _workbook(sheets, title)


MAX_XLS_SHEET_BYTES = 24 * MAX_CELLS
"""The records of one XLS sheet, in bytes, loaded at most: a real sheet spends 14-20 bytes on a value cell (a shared
string, a number) and more on its formatting, so a sheet within `MAX_CELLS` fits; BIFF's packed numbers take 6
bytes a cell, so xlrd never builds more than 2 million cells (some 100 MB) before the count refuses them."""
XLS_ENCRYPTED = "XLS workbook is encrypted (password-protected): save it without a password, as XLSX"


@_guarded("XLS", zipped=False)
def xls(data: bytes) -> Document:
    import io

    import xlrd

    try:
        # on demand: one sheet in memory at a time; ragged rows: a row as long as its last cell, not padded to the
        # widest row (one cell at IV65536 padded 16 million); xlrd's warnings go nowhere, the error says it
        book = xlrd.open_workbook(file_contents=data, on_demand=True, ragged_rows=True, logfile=io.StringIO())
    except xlrd.XLRDError as exc:
        if "encrypted" in str(exc).lower():
            raise ConversionError(XLS_ENCRYPTED) from exc
        raise
    try:
        counter = _Counter()
        sheets = []
        # where each sheet's records start in the workbook stream: a sheet ends where the next one starts
        starts = sorted(book._sh_abs_posn) + [len(book.mem)]
        for index in range(book.nsheets):
            start = book._sh_abs_posn[index]
            if next(s for s in starts if s > start) - start > MAX_XLS_SHEET_BYTES:
                raise ConversionError(TOO_LARGE)  # before xlrd builds its cells
            sheet = book.sheet_by_index(index)
            rows = (counter.count([_xls_text(book, sheet, r, c) for c in range(sheet.row_len(r))])
                    for r in range(sheet.nrows))  # fmt: skip
            sheets.append((sheet.name, _table(rows, counter)))
            book.unload_sheet(index)
    finally:
        book.release_resources()
    return _workbook(sheets, None)  # xlrd reads no document properties: the file's name is shown


def _xls_text(book, sheet, row: int, col: int) -> str:
    import contextlib

    import xlrd

    kind, value = sheet.cell_type(row, col), sheet.cell_value(row, col)
    if kind == xlrd.XL_CELL_DATE:
        # a date out of Excel's range stays its serial number, as Excel shows it
        with contextlib.suppress(xlrd.xldate.XLDateError, OverflowError, ValueError):
            value = xlrd.xldate.xldate_as_datetime(value, book.datemode)
    elif kind == xlrd.XL_CELL_BOOLEAN:
        value = bool(value)
    elif kind == xlrd.XL_CELL_ERROR:
        value = xlrd.error_text_from_code.get(value, "#ERR")
    return _text(value)


@_guarded("ODS")
def ods(data: bytes) -> Document:
    import io

    from odf import opendocument, table, teletype

    book = opendocument.load(io.BytesIO(data))
    counter = _Counter()
    sheets = []
    for sheet in book.spreadsheet.getElementsByType(table.Table):
        rows = _ods_rows(sheet, table, teletype, counter)
        sheets.append((sheet.getAttribute("name") or "", _table(rows, counter)))
    title = next((teletype.extractText(t) for t in book.meta.childNodes if t.qname[1] == "title"), None)
    return _workbook(sheets, title)


def _ods_rows(sheet, table, teletype, counter: _Counter) -> Iterator[list[str]]:
    """A sheet's rows, with ODF's repeats expanded (`number-rows-repeated`, `number-columns-repeated`). A file saved
    by LibreOffice ends each row with one cell repeated to the last column (16,384) and the sheet with one row
    repeated to the last row (a million): trailing empty cells and rows are not expanded, they hold nothing."""
    for row in sheet.getElementsByType(table.TableRow):
        cells: list[str] = []
        trailing = 0
        for cell in row.childNodes:
            if cell.qname[1] not in ("table-cell", "covered-table-cell"):
                continue
            text = " ".join(teletype.extractText(cell).split())
            repeat = _repeat(cell.getAttribute("numbercolumnsrepeated"))
            if not text:
                trailing += repeat
                continue
            counter.add(trailing + repeat)
            cells.extend([""] * trailing + [text] * repeat)
            trailing = 0
        repeat = _repeat(row.getAttribute("numberrowsrepeated"))
        if not cells:
            continue  # empty rows hold nothing: not expanded, `_table` would drop them
        counter.add(len(cells) * (repeat - 1))
        for _ in range(repeat):
            yield cells


def _repeat(value: str | None) -> int:
    """A repeat count as ODF defines it (a positive integer): a negative one took cells off the count, and the
    next huge repeat was then expanded whole."""
    return max(1, int(value or 1))


class _Counter:
    """Cells read so far, across the workbook; past `MAX_CELLS` the workbook is refused."""

    def __init__(self) -> None:
        self.cells = 0
        self.table_cells = 0  # in the tables written (rows x columns kept), counted apart from the cells read

    def add(self, n: int, table: bool = False) -> None:
        if table:
            self.table_cells += n
        else:
            self.cells += n
        if max(self.cells, self.table_cells) > MAX_CELLS:
            raise ConversionError(TOO_LARGE)

    def count(self, row: list[str]) -> list[str]:
        # An empty row counts as one: a sheet whose XML puts one cell at row 200,000,000 had openpyxl yield every
        # empty row before it, none counted (a 5 KB file, a minute of CPU).
        self.add(max(1, len(row)))
        return row


def _table(rows: Iterable[list[str]], counter: _Counter) -> str:
    """A sheet's rows as a pipe table, without the rows and columns that hold nothing. The table's cells count too:
    a header of 16,384 columns over 100,000 rows of one value each is 116,384 cells read but 1.6 billion in the
    table (a workbook of a few hundred KB filling the pool process's memory)."""
    kept = [r for r in rows if any(r)]
    used = sorted({i for r in kept for i, c in enumerate(r) if c})
    counter.add(len(kept) * len(used), table=True)
    return pipe_table([[r[i] if i < len(r) else "" for i in used] for r in kept])


def _workbook(sheets: list[tuple[str, str]], title: str | None) -> Document:
    parts = [f"# {' '.join(name.split()) or 'Sheet'}\n\n{body}\n" for name, body in sheets if body]
    if not parts:
        raise ConversionError(NO_VALUES)
    text = "\n".join(parts)
    # The title is the workbook's own (its properties), never its first sheet's name: "iris" does not name
    # readxl's datasets.xlsx. Without one the file's name is shown.
    return Document(text, markdown.blocks(text), title=" ".join((title or "").split()) or None)


def _text(value: object) -> str:
    """A cell's value as a reader sees it: dates without a midnight time, floats without binary noise."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:.15g}"
    return " ".join(str(value).split())
