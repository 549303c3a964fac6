"""Migrations on a real Postgres: up, down, up again; the embedding model check."""

from __future__ import annotations

import psycopg
import pytest

from connector.db.database import connect, ensure_embedding_model, migrate
from connector.embedders import load
from connector.errors import EmbeddingModelMismatch

TABLES = {"documents", "chunks", "chunk_windows", "chunk_terms", "candidates", "embedding_model", "watched_tables"}


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'connector'").fetchall()
    return {r[0] for r in rows} - {"alembic_version"}


def test_upgrade_downgrade_upgrade(dsn: str) -> None:
    migrate(dsn, 384)
    assert tables(dsn) == TABLES
    with psycopg.connect(dsn) as conn:
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'connector' AND indexname = 'chunks_embedding_hnsw'"
        ).fetchone()
        assert index and "hnsw" in index[0] and "vector_cosine_ops" in index[0]
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

    with connect(dsn) as conn, pytest.raises(EmbeddingModelMismatch, match=r"384-dimensional.*other-model \(768"):
        ensure_embedding_model(conn, Wider())


def test_dimension_mismatch_on_a_fresh_database_writes_nothing(dsn: str) -> None:
    migrate(dsn, 384)

    class Wider:
        name = "other-model"
        dim = 768

    with connect(dsn) as conn:
        with pytest.raises(EmbeddingModelMismatch):
            ensure_embedding_model(conn, Wider())
        assert conn.execute("SELECT count(*) FROM connector.embedding_model").fetchone() == (0,)
