"""A document's rows of `connector.candidates`, in COPY's text format, made where the document was chosen.

A CPU pool process makes them (`pipeline.Chosen.shipped`) and the writer prefixes each with its document's id: the
sidecar's one interpreter, which every worker thread, the embedder's client and the pool's results share, no longer
turns ten candidates a document, with four JSON columns each, into COPY's binary format value by value: its CPU for
writing a 600-character row went from 0.12-0.13 to 0.05 ms (`tests/write_path_cost.py`), the pool's up by ~0.1.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from connector.models import Scored

_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
NULL = "\\N"
_JSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def lines(scored: Sequence[Scored], winner: Scored) -> tuple[bytes, ...]:
    """One line per candidate, each starting with the tab that follows the document's id, ending with a newline: the
    columns of `queries.COPY_CANDIDATES` after `document_id`."""
    return tuple(_line(s, s is winner) for s in scored)


def _line(s: Scored, chosen: bool) -> bytes:
    c = s.candidate
    get = s.metrics.get
    spans = NULL if c.error else "{" + ",".join([str(x) for chunk in c.chunks for x in (chunk.start, chunk.end)]) + "}"
    line = "\t".join([
        "", text(c.strategy), jsonb(c.params), str(len(c.chunks)), number(get("rc")), number(get("icc")),
        number(get("dcc")), number(get("bi")), number(get("sc")), number(get("rt")), number(s.score),
        "t" if chosen else "f", number(c.elapsed_ms + s.elapsed_ms), text(c.error), text(s.rc_backend),
        jsonb({k: round(v, 3) for k, v in s.metric_ms.items()}), jsonb(s.shape), spans, jsonb(s.breaks),
    ])  # fmt: skip
    # A message may hold a lone surrogate (a file name read with `surrogateescape`): Postgres takes no such UTF-8.
    return (line + "\n").encode("utf-8", "replace")


# The fields of a line (split at its tabs, its document's id first) that are text columns: strategy, error,
# rc_backend. The others are numbers, arrays and JSON.
_TEXT_FIELDS = (1, 13, 14)


def in_encoding(data: bytes, encoding: str) -> bytes:
    """Lines for a connection in another encoding than UTF-8 (a database made in LATIN1, a PGCLIENTENCODING): the
    text columns in that encoding (a character it lacks as `?`), the JSON columns left in UTF-8. psycopg sends and
    reads jsonb as UTF-8 whatever the connection's encoding (so did this writer's binary COPY); stored in the
    connection's encoding, a pattern's `é` failed every later read of the candidates (web UI, `connector explain`)."""
    lines = data.split(b"\n")[:-1]
    for n, line in enumerate(lines):
        fields = line.split(b"\t")  # no UTF-8 character has a tab's or a newline's byte inside it
        for i in _TEXT_FIELDS:
            fields[i] = fields[i].decode("utf-8").encode(encoding, "replace")
        lines[n] = b"\t".join(fields)
    return b"".join(line + b"\n" for line in lines)


def text(value: str | None) -> str:
    if value is None:
        return NULL
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPES)
    return value


def number(value: float | int | None) -> str:
    """As Postgres reads a float8 back to the same bits: Python's shortest repr, its own names for the others."""
    if value is None:
        return NULL
    shown = repr(float(value))
    if shown[-1] in "fn":  # inf, -inf, nan
        return {"inf": "Infinity", "-inf": "-Infinity"}.get(shown, "NaN")
    return shown


def jsonb(value) -> str:
    # As `database._json_dumps` (psycopg's dumper of these columns elsewhere); JSON has no raw tab or newline, only
    # backslashes to double for COPY.
    data = orjson.dumps(value, option=_JSON).decode()
    return data.replace("\\", "\\\\") if "\\" in data else data
