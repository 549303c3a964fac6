"""The chunks' HNSW index waits until the table is large (migration 0015): `connector.build_vector_index` builds it
at the threshold, one caller at a time; workers ask between batches; searches give the same answers before and
after on a table this small, and a failed build costs no document."""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

from connector.db.database import connect
from connector.embedders import load
from connector.pipeline import Pipeline
from connector.settings import SearchSettings, Settings
from connector.worker import Worker
from tests.dbchecks import assert_consistent
from tests.test_batches import _insert

EXISTS = "SELECT to_regclass('connector.chunks_embedding_hnsw') IS NOT NULL"


def _with_threshold(settings: Settings, n: int) -> Settings:
    return settings.model_copy(update={"search": SearchSettings(vector_index_min_chunks=n)})


def _search(conn: psycopg.Connection, question: str) -> list[tuple]:
    register_vector(conn)
    vector = load("fake").embed([question]).vectors[0]
    return conn.execute(
        "SELECT chunk_id, round(score::numeric, 6) FROM connector.search(%s, %s, 5, %s)", (vector, question, Jsonb({}))
    ).fetchall()


def test_workers_build_the_index_once_the_table_reaches_the_threshold(settings: Settings, caplog) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 12)
        Worker(conn, Pipeline(_with_threshold(settings, 10**6), load("fake")), []).drain(threading.Event())
        (chunks,) = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()
        assert chunks >= 12 and conn.execute(EXISTS).fetchone() == (False,), "below the threshold: no index"
        questions = ["warranty disclaimer of the licensor", "grant of patent license", "redistribution"]
        exact = [_search(conn, q) for q in questions]

        _insert(conn, 3, prefix="more")
        worker = Worker(conn, Pipeline(_with_threshold(settings, chunks + 1), load("fake")), [])
        worker.drain(threading.Event())  # asked before its batch, one chunk short; not again for a minute
        assert conn.execute(EXISTS).fetchone() == (False,)
        conn.execute("DELETE FROM connector.documents WHERE source_key LIKE 'more-%'")
        with caplog.at_level(logging.INFO, logger="connector.worker"):
            Worker(conn, Pipeline(_with_threshold(settings, chunks), load("fake")), []).drain(threading.Event())
        assert conn.execute(EXISTS).fetchone() == (True,), "a worker asks before its first batch"
        assert "HNSW index is in place" in caplog.text
        assert [_search(conn, q) for q in questions] == exact, "the same answers through the graph on a small table"
        assert_consistent(conn)


def test_one_caller_builds_the_others_return_at_once(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    with psycopg.connect(dsn) as a, connect(dsn, autocommit=True) as b:
        _insert(b, 1)
        Worker(b, Pipeline(_with_threshold(settings, 10**6), load("fake")), []).drain(threading.Event())
        build = "SELECT connector.build_vector_index(%s)"
        assert b.execute(build, (2,)).fetchone() == (False,), "one chunk: below 2"
        assert a.execute(build, (1,)).fetchone() == (True,)  # built in a's transaction, not yet committed
        b.execute("SET lock_timeout = '2s'")  # waiting on a's lock would fail the statement instead
        assert b.execute(build, (1,)).fetchone() == (False,), "a builds: b neither waits nor builds a second"
        a.commit()
        assert b.execute(build, (1,)).fetchone() == (True,)
        assert b.execute(build, (10**6,)).fetchone() == (True,), "once built it stays, whatever the threshold"


def test_a_build_that_fails_is_logged_and_costs_no_document(settings: Settings, caplog) -> None:
    """The function gone (as good as a build that fails: out of memory, say): the worker says so and goes on."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("ALTER FUNCTION connector.build_vector_index(bigint) RENAME TO build_vector_index_away")
        try:
            _insert(conn, 5)
            with caplog.at_level(logging.WARNING, logger="connector.worker"):
                Worker(conn, Pipeline(_with_threshold(settings, 0), load("fake")), []).drain(threading.Event())
        finally:
            conn.execute("ALTER FUNCTION connector.build_vector_index_away(bigint) RENAME TO build_vector_index")
        assert "could not build the chunks' HNSW index" in caplog.text
        assert conn.execute("SELECT status, count(*) FROM connector.documents GROUP BY 1").fetchall() == [("done", 5)]
        assert conn.execute(EXISTS).fetchone() == (False,)


@pytest.mark.parametrize("threshold", [0])
def test_a_threshold_of_zero_builds_at_once_on_an_empty_table(settings: Settings, threshold: int) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        Worker(conn, Pipeline(_with_threshold(settings, threshold), load("fake")), []).drain(threading.Event())
        assert conn.execute(EXISTS).fetchone() == (True,)


def test_the_readmes_statement_builds_it_now(settings: Settings) -> None:
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    statement = "SELECT connector.build_vector_index(0);"
    assert f"`{statement}`" in readme
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        assert conn.execute(statement).fetchone() == (True,) and conn.execute(EXISTS).fetchone() == (True,)
