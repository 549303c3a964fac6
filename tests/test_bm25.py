"""The BM25 text arm of `connector.search()` (migration 0008) on documents the real pipeline stored: postings kept by
the writer, rare words outweighing common ones, and nothing left behind when chunks are replaced or deleted."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from connector.db.database import connect, ensure_embedding_model
from connector.embedders import load
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.worker import Worker
from tests.dbchecks import POSTING_MISMATCHES

COMMON = "The container runs. A container image builds a container from layers, and each container has a name. "


def _ingest(settings: Settings, rows: list[tuple[str, str]]) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        for key, text in rows:
            conn.execute(
                "INSERT INTO connector.documents (source_key, content) VALUES (%s, %s) "
                "ON CONFLICT (source, source_key) DO UPDATE SET content = excluded.content, status = 'pending'",
                (key, text),
            )
        ensure_embedding_model(conn, load("fake"))
        Worker(conn, Pipeline(settings, load("fake")), []).drain(threading.Event())


def _text_ranking(dsn: str, question: str, k: int = 3) -> list[str]:
    """The text arm's order: an unrelated query vector and a text weight that dwarfs the vector arm."""
    unrelated = np.zeros(384, dtype=np.float32)
    unrelated[7] = 1
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        rows = conn.execute(
            "SELECT source_key FROM connector.search(%s, %s, %s, '{}', 1e6)", (unrelated, question, k)
        ).fetchall()
    return [r[0] for r in rows]


def test_a_rare_word_outweighs_a_common_one_repeated(settings: Settings) -> None:
    """Twenty documents say "container" over and over; one says it once, next to the only "zeppelin". BM25's idf puts
    that one first for "container zeppelin"."""
    dsn = settings.dsn.get_secret_value()
    rows = [(f"common/{i}", COMMON * 3 + f"Note {i}.") for i in range(20)]
    rows.append(("rare", "The zeppelin landed near the container yard at dawn, and the crew unloaded the mail."))
    _ingest(settings, rows)
    assert _text_ranking(dsn, "container zeppelin")[0] == "rare"
    assert _text_ranking(dsn, "zeppelin")[:1] == ["rare"]
    with psycopg.connect(dsn) as conn:
        with_tf = conn.execute(
            "SELECT t.tf FROM connector.chunk_terms t JOIN connector.chunks c ON c.id = t.chunk_id "
            "JOIN connector.documents d ON d.id = c.document_id WHERE d.source_key = 'common/0' AND t.term = 'contain'"
        ).fetchone()
    assert with_tf == (12,)  # 4 mentions × 3 repeats, stemmed by the english configuration


def _postings(dsn: str, term: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM connector.chunk_terms WHERE term = %s", (term,)).fetchone()[0]


def test_postings_follow_the_chunks_when_replaced_or_deleted(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    _ingest(settings, [("doc", "Walruses sleep on the ice floes of the Arctic."), ("other", "Seals bark.")])
    assert (_postings(dsn, "walrus"), _postings(dsn, "penguin")) == (1, 0)
    assert _text_ranking(dsn, "walrus", 1) == ["doc"]
    _ingest(settings, [("doc", "Penguins swim in the cold waters of the Antarctic.")])
    assert (_postings(dsn, "walrus"), _postings(dsn, "penguin")) == (0, 1)
    assert _text_ranking(dsn, "penguin", 1) == ["doc"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        orphans = conn.execute(
            "SELECT count(*) FROM connector.chunk_terms t LEFT JOIN connector.chunks c ON c.id = t.chunk_id "
            "WHERE c.id IS NULL"
        ).fetchone()
        assert orphans == (0,)
        conn.execute("DELETE FROM connector.documents WHERE source_key = 'doc'")
    assert _postings(dsn, "penguin") == 0 and _postings(dsn, "seal") == 1
    # Chunks deleted by hand, several in one statement, and a TRUNCATE: their postings go with them (a trigger per
    # statement since migration 0012, where a foreign key checked each posting).
    _ingest(settings, [("a", "Narwhals dive deep."), ("b", "Narwhals sing."), ("c", "Otters float.")])
    assert _postings(dsn, "narwhal") == 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM connector.chunks WHERE document_id IN "
                     "(SELECT id FROM connector.documents WHERE source_key IN ('a', 'b'))")  # fmt: skip
        assert _postings(dsn, "narwhal") == 0 and _postings(dsn, "otter") == 1
        assert conn.execute(POSTING_MISMATCHES).fetchall() == []
        conn.execute("TRUNCATE connector.chunks CASCADE")
        assert conn.execute("SELECT count(*) FROM connector.chunk_terms").fetchone() == (0,)
        # The trigger functions run with the owner's rights: nobody else may call them (or attach them elsewhere).
        granted = conn.execute("""
            SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') FROM pg_proc p
            WHERE p.pronamespace = 'connector'::regnamespace AND p.proname LIKE 'chunk_terms_follow_%'
        """).fetchall()  # fmt: skip
        assert sorted(granted) == [("chunk_terms_follow_delete", False), ("chunk_terms_follow_truncate", False)]


def test_a_question_of_stop_words_only_is_ranked_by_vectors(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    _ingest(settings, [("a", "Walruses sleep on the ice."), ("b", "Penguins swim in cold water.")])
    vector = load("fake").embed(["penguins swim"]).vectors[0]
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        rows = conn.execute("SELECT source_key FROM connector.search(%s, 'the of and', 2)", (vector,)).fetchall()
    assert [r[0] for r in rows] == ["b", "a"]


def _scans(conn: psycopg.Connection) -> tuple[int, int]:
    """Sequential scans of the postings, and scans of their primary key, as the statistics count them now."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        "SELECT t.seq_scan, i.idx_scan FROM pg_stat_user_tables t JOIN pg_stat_user_indexes i USING (relid) "
        "WHERE t.schemaname = 'connector' AND t.relname = 'chunk_terms' AND i.indexrelname = 'chunk_terms_pkey'"
    ).fetchone()


def test_a_deleted_chunks_postings_are_found_by_its_lexemes_not_by_reading_them_all(dsn: str) -> None:
    """Migration 0014: no index on `chunk_terms.chunk_id` (a second btree entry per posting); the delete trigger looks
    the gone chunks' postings up through the primary key (term, chunk_id), by their own lexemes. On a table of
    ~100,000 postings, deleting one document reads the key and never scans the table; a downgrade puts the index and
    the old trigger back, and either one leaves no posting behind."""
    from connector.db.database import migrate

    migrate(dsn, 4)
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'connector'")}
        assert not indexes & {"chunk_terms_chunk", "chunks_search_tsv_gin", "chunks_document_idx"}
        assert {"chunk_terms_pkey", "chunks_document_id_ordinal_key"} <= indexes
        conn.execute("INSERT INTO connector.documents (source_key, status) SELECT g::text, 'done' "
                     "FROM generate_series(1, 300) g")  # fmt: skip
        conn.execute("""
            INSERT INTO connector.chunks (document_id, ordinal, text, token_count, start_char, end_char, embedding,
                                          strategy)
            SELECT d.id, o, (SELECT string_agg(substr(md5((d.id * 10 + o)::text || w::text), 1, 6), ' ')
                             FROM generate_series(1, 120) w), 120, 0, 10, '[1,0,0,0]', 'x'
            FROM connector.documents d, generate_series(0, 2) o
        """)  # fmt: skip
        conn.execute("""
            INSERT INTO connector.chunk_terms (term, chunk_id, tf, chunk_len)
            SELECT t.lexeme, c.id, coalesce(array_length(t.positions, 1), 1), c.token_count
            FROM connector.chunks c CROSS JOIN LATERAL unnest(c.search_tsv) t
        """)  # fmt: skip
        conn.execute("ANALYZE connector.chunk_terms")
        total = conn.execute("SELECT count(*) FROM connector.chunk_terms").fetchone()[0]
        assert total > 100_000
        mine = conn.execute(
            "SELECT count(*) FROM connector.chunk_terms t JOIN connector.chunks c ON c.id = t.chunk_id "
            "JOIN connector.documents d ON d.id = c.document_id WHERE d.source_key = '7'"
        ).fetchone()[0]
        seq0, idx0 = _scans(conn)
        conn.execute("DELETE FROM connector.documents WHERE source_key = '7'")  # cascades to its three chunks
        seq1, idx1 = _scans(conn)
        assert (seq1 - seq0, idx1 > idx0) == (0, True)
        assert conn.execute("SELECT count(*) FROM connector.chunk_terms").fetchone()[0] == total - mine
        assert conn.execute(POSTING_MISMATCHES).fetchall() == []
    migrate(dsn, 4, "0013", downgrade=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'connector'")}
        assert {"chunk_terms_chunk", "chunks_search_tsv_gin", "chunks_document_idx"} <= indexes
        conn.execute("DELETE FROM connector.chunks WHERE document_id IN "
                     "(SELECT id FROM connector.documents WHERE source_key IN ('8', '9'))")  # fmt: skip
        assert conn.execute(POSTING_MISMATCHES).fetchall() == []
    migrate(dsn, 4)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM connector.chunks WHERE ordinal = 1")  # a third of them at once
        assert conn.execute(POSTING_MISMATCHES).fetchall() == []
        assert conn.execute("SELECT count(*) FROM connector.chunk_terms").fetchone()[0] < total * 0.7
