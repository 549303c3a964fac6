"""The candidates' rows made in COPY's text format where a document is chosen (`connector.db.candidate_rows`): what
Postgres stores from them is every value of the candidates, to the last bit, whatever their texts hold."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import orjson
import psycopg
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from pydantic import SecretStr

from connector.db import browse, candidate_rows
from connector.db.database import connect, migrate
from connector.db.store import Store
from connector.embedders import load
from connector.ingest import ingest, select
from connector.models import Candidate, Chunk, Scored
from connector.pipeline import Chooser, Pipeline
from connector.settings import ChunkingSettings, LLMSettings, Settings
from tests.conftest import FIXTURES
from tests.llm_stub import ChatStub
from tests.test_rc_when_decisive import rows_and_documents

COLUMNS = (
    "strategy, params, chunk_count, rc, icc, dcc, bi, sc, rt, score, chosen, elapsed_ms, error, rc_backend, "
    "metric_ms, shape, spans, breaks"
)


def _json(value):
    """A value as it comes back from a jsonb column (tuples are arrays)."""
    return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY))


def _expected(s: Scored, chosen: bool) -> tuple:
    c, m = s.candidate, s.metrics
    spans = None if c.error else [x for chunk in c.chunks for x in (chunk.start, chunk.end)]
    return (
        c.strategy, _json(c.params), len(c.chunks), *(m.get(k) for k in ("rc", "icc", "dcc", "bi", "sc", "rt")),
        s.score, chosen, c.elapsed_ms + s.elapsed_ms, c.error, s.rc_backend,
        {k: round(v, 3) for k, v in s.metric_ms.items()}, _json(s.shape), spans, _json(list(s.breaks)),
    )  # fmt: skip


def test_every_value_of_every_candidate_is_stored_as_it_was(settings: Settings, tmp_path: Path) -> None:
    """Short rows and whole real documents, chosen, shipped and written as the sidecar does: each stored row equals
    the candidate's values before shipping (floats bit for bit, NULLs where undefined, JSON equal)."""
    sources = rows_and_documents([(600, 40), (2400, 20)])
    chooser = Chooser.load(settings, parallel=False)
    pipeline = Pipeline(settings, load("fake"))
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        store = Store(conn)
        items, expected = [], {}
        for n, source in enumerate(sources):
            conn.execute("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)",
                         (f"doc/{n}", source.data.decode()))  # fmt: skip
        rows = store.claim_batch(60, "test", (), len(sources), 10**9)
        assert len(rows) == len(sources)
        for row, source in zip(rows, sources, strict=True):
            full = chooser.choose(source)
            expected[row.id] = {s.candidate.strategy: _expected(s, s is full.winner) for s in full.scored}
            shipped = full.shipped()
            assert shipped.candidate_rows and all(not s.breaks for s in shipped.scored if s is not shipped.winner)
            items.append((row, source, pipeline.embed([shipped])[0]))
        assert all(store.write_many(items))
        stored: dict[int, dict] = {}
        for document_id, *values in conn.execute(f"SELECT document_id, {COLUMNS} FROM connector.candidates"):
            stored.setdefault(document_id, {})[values[0]] = tuple(values)
    assert stored == expected
    assert any(v[12] for doc in expected.values() for v in doc.values()), "a failed or skipped strategy's error"
    assert any(v[-1] for doc in expected.values() for v in doc.values()), "some cuts break something"


_TEXTS = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))


@hyp_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=_TEXTS,
    number=st.floats(allow_nan=True, allow_infinity=True) | st.none(),
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | _TEXTS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXTS, inner, max_size=4),
        max_leaves=12,
    ),
)
def test_a_text_a_float_and_a_json_value_read_back_as_they_were(db: psycopg.Connection, text, number, value) -> None:
    """Any text (tabs, newlines, backslashes, `\\N` itself), any float8 (-0.0, subnormals, infinities, NaN), any
    JSON value, through COPY's text format and back: the same text, the same bits, the same jsonb as psycopg's own
    dumper makes of the value."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS copied (t text, f float8, j jsonb)")
    db.execute("TRUNCATE copied")
    line = "\t".join([candidate_rows.text(text), candidate_rows.number(number), candidate_rows.jsonb(value)]) + "\n"
    with db.cursor().copy("COPY copied FROM STDIN") as copy:
        copy.write(line.encode())
    t, f, j = db.execute("SELECT t, f, j FROM copied").fetchone()
    assert t == text
    if number is None or math.isnan(number):
        assert f is None if number is None else math.isnan(f)
    else:
        assert f == number and math.copysign(1, f) == math.copysign(1, number)
    # As psycopg's own jsonb dumper sent it (the writer's binary COPY before): Postgres reads the same JSON text
    assert j == db.execute("SELECT %s::jsonb", [Jsonb(value)]).fetchone()[0]


def test_an_error_with_a_lone_surrogate_is_stored_not_refused(settings: Settings) -> None:
    """A strategy's error may quote a file name read with `surrogateescape`: its row is written all the same."""
    error = "cannot read r\udcffsum\u00e9\tof\nit\\"
    chunk = Chunk(0, 5, "Hello", 1)
    winner = Scored(Candidate("recursive", (chunk,)), {"sc": 1.0}, 1.0)
    failed = Scored(Candidate("llm_regex", (), error=error), {}, None)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        (document_id,) = conn.execute(
            "INSERT INTO connector.documents (source_key, content) VALUES ('x', 'Hello') RETURNING id"
        ).fetchone()
        with conn.cursor().copy("COPY connector.candidates (document_id, " + COLUMNS + ") FROM STDIN") as copy:
            for line in candidate_rows.lines([winner, failed], winner):
                copy.write(b"%d" % document_id + line)
        stored = dict(conn.execute("SELECT strategy, error FROM connector.candidates").fetchall())
    assert stored == {"recursive": None, "llm_regex": error.replace("\udcff", "?")}


def test_a_database_in_latin1_reads_back_its_headings_and_patterns(pg_admin_dsn: str, tmp_path: Path) -> None:
    """A database in LATIN1 (a cluster made before UTF-8 was the default), a real French file written by the
    worker: psycopg sends and reads jsonb as UTF-8 whatever the connection's encoding, so the writer sends the
    blocks and the candidates' JSON columns as it does. The web UI's document page reads back the file's headings
    and the LLM's pattern as they were (it failed on `Création`: `'utf-8' codec can't decode byte 0xe9`); its text
    columns (the strategy's name) are in the database's encoding."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'").format(
                sql.Identifier(name)
            )
        )
    dsn = make_conninfo(pg_admin_dsn, dbname=name)
    pattern = "(?m)^(?:Documentation|Configuration|Quelle|Création)\\b"
    try:
        migrate(dsn, 384)
        with ChatStub(f"<regex>{pattern}</regex>") as stub:
            llm = LLMSettings(base_url=stub.base_url, api_key=SecretStr("sk-test"), model="stub-model")
            chunking = ChunkingSettings(
                strategies=("sections", {"kind": "recursive", "max_tokens": 200, "name": "récursif"}, "llm_regex"),
                llm=llm,
            )
            settings = Settings(dsn=dsn, data_dir=tmp_path / "state", embedder="fake", chunking=chunking)
            pipeline = Pipeline(settings, load("fake"))
            with connect(dsn, autocommit=True) as conn:
                report = ingest(conn, pipeline, select([FIXTURES / "real" / "ifrench-gut-ALIRE"]))
                assert report.counts["done"] == 1, report.failures
                (document_id,) = conn.execute("SELECT id FROM connector.documents").fetchone()
                doc, _, candidates = browse.document(conn, document_id)
            pipeline.close()
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    assert ["Francais-GUTenberg v1.0", "Création du dictionnaire"] in [b["section_path"] for b in doc.blocks]
    params = {s.strategy: s.params for s, _ in candidates}
    assert params["llm_regex"]["regex"] == pattern
    assert "récursif" in params and all(s.error is None for s, _ in candidates)


def test_an_llm_pattern_with_a_lone_surrogate_or_a_nul_fails_that_candidate_only(settings: Settings) -> None:
    """An LLM reply's JSON may escape a lone surrogate (`\\ud800`) or a NUL into the pattern: no jsonb Postgres takes
    holds either. The document failed whole, every try ("internal error: TypeError: str is not valid UTF-8"; the
    reply is cached), though its other candidates were sound; now that candidate falls back, and says why."""
    for n, bad in enumerate(["\ud800", "\x00"]):
        pattern = f"(?m)^(?:Documentation|{bad}Configuration)\\b"
        with ChatStub(f"<regex>{pattern}</regex>") as stub:
            llm = LLMSettings(base_url=stub.base_url, api_key=SecretStr("sk-test"), model=f"stub-{n}")
            chunking = ChunkingSettings(strategies=("sections", "llm_regex"), llm=llm)
            s = settings.model_copy(update={"chunking": chunking})
            pipeline = Pipeline(s, load("fake"))
            with connect(s.dsn.get_secret_value(), autocommit=True) as conn:
                report = ingest(conn, pipeline, select([FIXTURES / "real" / "ifrench-gut-ALIRE"]))
                assert report.counts["done"] == 1, report.failures
                (params,) = conn.execute(
                    "SELECT params FROM connector.candidates WHERE strategy = 'llm_regex'"
                ).fetchone()
                conn.execute("DELETE FROM connector.documents")
            pipeline.close()
        assert params["fallback"] == "invalid pattern: it holds a NUL or a lone surrogate"
        assert params["regex"] == pattern.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
