"""Migrations on a real Postgres: up, down, up again; the embedding model check."""

from __future__ import annotations

import psycopg
import pytest

from connector.db.database import connect, ensure_embedding_model, migrate
from connector.embedders import load
from connector.errors import EmbeddingModelMismatch

TABLES = {"documents", "chunks", "chunk_windows", "chunk_terms", "candidates", "embedding_models", "embedding_cache",
          "watched_tables"}  # fmt: skip


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'connector'").fetchall()
    return {r[0] for r in rows} - {"alembic_version"}


def _chunks_hnsw(dsn: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'connector' AND indexname = 'chunks_embedding_hnsw'"
        ).fetchone()
    return row[0] if row else None


def _notify_payload(dsn: str) -> str:
    """The payload expression of the queue's NOTIFY (`connector.notify_pending`)."""
    with psycopg.connect(dsn) as conn:
        body = conn.execute("SELECT prosrc FROM pg_proc WHERE oid = 'connector.notify_pending'::regproc").fetchone()[0]
    return body.split("pg_notify(", 1)[1].split(",", 1)[1].rsplit(")", 1)[0].strip()


def _requeue_body(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT prosrc FROM pg_proc WHERE oid = 'connector.requeue_changed'::regproc").fetchone()[0]


def _has_column(dsn: str, table: str, column: str) -> bool:
    query = "SELECT FROM information_schema.columns WHERE table_schema = 'connector' AND table_name = %s AND "
    with psycopg.connect(dsn) as conn:
        return conn.execute(query + "column_name = %s", (table, column)).fetchone() is not None


def test_upgrade_downgrade_upgrade(dsn: str) -> None:
    migrate(dsn, 384, "0014")
    index = _chunks_hnsw(dsn)
    assert index and "hnsw" in index and "vector_cosine_ops" in index
    migrate(dsn, 384)
    assert tables(dsn) == TABLES
    assert _chunks_hnsw(dsn) is None, "0015: an empty table has no HNSW index until it is large (build_vector_index)"
    assert _notify_payload(dsn) == "''", "0016: one notification per transaction (a payload every row shares)"
    assert _has_column(dsn, "documents", "file_ctime_ns"), "0017: the ctime a folder file was hashed with"
    assert _has_column(dsn, "watched_tables", "attnums"), "0018: the watched columns' numbers, for renames"
    assert "content_hash" in _requeue_body(dsn), "0019: a new type clears the hash of what was converted"
    migrate(dsn, 384, "0014", downgrade=True)
    assert "content_hash" not in _requeue_body(dsn), "down from 0019: as before"
    assert not _has_column(dsn, "watched_tables", "attnums"), "down from 0018: gone"
    assert not _has_column(dsn, "documents", "file_ctime_ns"), "down from 0017: gone"
    assert "hnsw" in (_chunks_hnsw(dsn) or ""), "down from 0015: the index is back"
    assert _notify_payload(dsn) == "NEW.id::text", "down from 0016: the row's id again"
    migrate(dsn, 384)
    with psycopg.connect(dsn) as conn:
        dim = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'connector.chunks'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert dim == (384,)
    migrate(dsn, 384)  # idempotent at head
    migrate(dsn, 384, "base", downgrade=True)
    assert tables(dsn) == set()
    migrate(dsn, 384)
    assert tables(dsn) == TABLES


def test_embedding_model_is_recorded_and_a_mismatch_refused(dsn: str) -> None:
    migrate(dsn, 384)
    fake = load("fake")
    with connect(dsn) as conn:
        ensure_embedding_model(conn, fake)
        ensure_embedding_model(conn, fake)  # same model again: fine
        assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchall() == [(fake.name, 384)]

    class Wider:
        name = "other-model"
        dim = 768

    with (
        connect(dsn) as conn,
        pytest.raises(EmbeddingModelMismatch, match=r"fake-bow-384 \(384 dim.*other-model \(768 dim.*reembed"),
    ):
        ensure_embedding_model(conn, Wider())


def test_a_fresh_database_takes_the_first_models_dimension_and_one_with_chunks_refuses(dsn: str) -> None:
    migrate(dsn, 384)

    class Wider:
        name = "other-model"
        dim = 768

    with connect(dsn) as conn:
        ensure_embedding_model(conn, Wider())  # migrated before any model was known: nothing stored yet
        dims = conn.execute(
            "SELECT attrelid::regclass::text, atttypmod FROM pg_attribute WHERE attname = 'embedding' "
            "AND attrelid IN ('connector.chunks'::regclass, 'connector.chunk_windows'::regclass) ORDER BY 1"
        ).fetchall()
        assert dims == [("connector.chunk_windows", 768), ("connector.chunks", 768)]
        assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchall() == [("other-model", 768)]
        assert conn.execute(
            "SELECT indexname FROM pg_indexes "
            "WHERE indexname IN ('chunks_embedding_hnsw', 'chunk_windows_embedding_hnsw')"
        ).fetchall() == [("chunk_windows_embedding_hnsw",)], "the chunks' comes once the table is large (0015)"
        conn.execute("DELETE FROM connector.embedding_models")
        doc = conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('d', 'x') RETURNING id")
        conn.execute(
            "INSERT INTO connector.chunks (document_id, ordinal, text, token_count, start_char, end_char, embedding, "
            "strategy) VALUES (%s, 0, 'x', 1, 0, 1, %s::vector, 'page')",
            (doc.fetchone()[0], "[" + ",".join(["0.1"] * 768) + "]"),
        )
        conn.commit()
        with pytest.raises(EmbeddingModelMismatch, match="768-dimensional embeddings of an unrecorded model"):
            ensure_embedding_model(conn, load("fake"))
        assert conn.execute("SELECT count(*) FROM connector.embedding_model").fetchone() == (0,)


def test_a_model_recorded_before_0010_becomes_the_active_one(dsn: str) -> None:
    migrate(dsn, 384, "0009")
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO connector.embedding_model (name, dim) VALUES ('sentence-transformers/all-MiniLM-L6-v2', 384)"
        )
    migrate(dsn, 384)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT slot, provider, name, dim, state FROM connector.embedding_models").fetchall()
        assert rows == [("active", "minilm", "sentence-transformers/all-MiniLM-L6-v2", 384, "ready")]
        assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchall() == [rows[0][2:4]]
    migrate(dsn, 384, "0009", downgrade=True)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchall() == [rows[0][2:4]]


def test_two_replicas_recording_the_model_at_once_both_start(dsn: str) -> None:
    """The second one's INSERT waits for the first one's transaction, then compares instead of failing."""
    import threading

    from psycopg.types.json import Jsonb

    migrate(dsn, 384)
    fake = load("fake")
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as first:
        first.execute(
            "INSERT INTO connector.embedding_models (slot, provider, name, dim, options) VALUES "
            "('active', 'fake', %s, 384, %s)",
            (fake.name, Jsonb({})),
        )  # not committed yet: the other replica is right behind

        def second() -> None:
            try:
                with connect(dsn) as conn:
                    ensure_embedding_model(conn, fake)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        other = threading.Thread(target=second)
        other.start()
        other.join(1.0)
        assert other.is_alive(), "the second replica waits for the first one's row"
        first.commit()
        other.join(10)
    assert errors == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM connector.embedding_models").fetchone() == (1,)
