"""CSV and TSV → one Markdown pipe table, so that the header row names every column of every part of it.

Read as plain text, a chunk of a long CSV held rows without the header row: a question about "the body mass of
..." could not be answered from a chunk that never says which column is the body mass. As a table, the converter's
`split_large_tables` cuts it into parts that each repeat the header row (the stored text), and a chunk that starts
inside a part is embedded under that part's header (`embed.table_header`).

Which files are tables: a `.csv`, `.tsv` or `.tab` by name, and a file whose name says nothing by its content,
with the standard library's `csv.Sniffer` for the delimiter and header, checked here because the sniffer finds a
"delimiter" in any prose that has commas: most of the sample's rows must parse to the same number of fields, two or
more, and those fields must be short. A named file may have ragged rows or a single column; a named file that is
not tabular after all (one line, free text) is read as text.
"""

from __future__ import annotations

import csv
import io
import statistics

from connector.convert.office import pipe_table

SAMPLE_CHARS = 64 * 1024
"""What the check of field counts reads: the file's first 64 KB, whole lines."""
SNIFF_CHARS = 4096
"""What `csv.Sniffer` reads for the delimiter: its quote-finding regex is quadratic (64 KB of `, "a` lines took
25 s, and every text file without a suffix is sniffed), 4 KB take at most ~0.1 s and hold a table's first rows."""
MIN_ROWS = 3
"""A table has a header and at least two rows: fewer is a line of text with commas."""
MIN_SAME_WIDTH = 0.9
"""Share of the sample's rows that must have the most common number of fields (ragged rows are tolerated, prose
with a varying number of commas per line is not)."""
MAX_MEDIAN_FIELD_CHARS = 40
"""Cells of a table are short; clauses of a sentence split at its commas are not (checked on the median)."""
DELIMITERS = ",;\t|"


def dialect(source: str, named: bool = False) -> csv.Dialect | None:
    """The CSV dialect of `source` when it is a table, else None. A file `named` like one (`.csv`, `.tsv`) may hold
    a single column; a file known only by its content needs two or more, as the sniffer needs a delimiter."""
    sample = _sample(source, SAMPLE_CHARS)
    try:
        found = csv.Sniffer().sniff(_sample(source, SNIFF_CHARS), delimiters=DELIMITERS)
    except csv.Error:
        if not named:
            return None
        found = csv.excel  # one column: no delimiter to find
    rows = _rows(sample, found)
    if len(rows) < MIN_ROWS:
        return None
    widths = [len(r) for r in rows]
    width = statistics.mode(widths)
    if not named and (width < 2 or sum(w == width for w in widths) < MIN_SAME_WIDTH * len(rows)):
        return None  # a file named `.csv` may have ragged rows (trailing empty fields left out); prose may not
    cells = [len(c) for r in rows for c in r]
    if statistics.median(cells) > MAX_MEDIAN_FIELD_CHARS:
        return None
    return found


def markdown(source: str, found: csv.Dialect) -> str | None:
    """The whole file as one pipe table: its first row the header (the sniffer's `has_header` is a guess that fails
    on tables of text, and a table needs a header row whatever it holds); rows of any width kept, padded to the
    widest; a quoted newline inside a cell becomes a space. None where the reader fails further on than the sample
    the dialect came from (a field over the `csv` module's 128 KB limit, an unclosed quote at the end), or where
    padding would more than double its cells (a wide row over many short ones)."""
    try:
        rows = list(csv.reader(io.StringIO(source), found))
    except csv.Error:
        return None
    width = max(map(len, rows), default=0)
    if len(rows) * width > 2 * sum(map(len, rows)) + width:
        # Mostly short rows under a wide one: padded, they grow as rows x columns (a 7 KB file of a 1,000-column
        # header over 1,000 one-value rows was 14 MB of Markdown, 40 s and 2.6 GB), and left short, markdown-it
        # ends the table past 65,536 missing cells. Not a table a reader would draw: read as the text it is.
        return None
    return pipe_table(rows) + "\n"


def _sample(source: str, chars: int) -> str:
    sample = source[:chars]
    if len(source) > chars and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # whole lines: a row cut in two has the wrong number of fields
    return sample


def _rows(sample: str, found: csv.Dialect) -> list[list[str]]:
    try:
        return [r for r in csv.reader(io.StringIO(sample), found) if any(c.strip() for c in r)]
    except csv.Error:  # a field larger than the reader's limit, a NUL: not a table we read
        return []
