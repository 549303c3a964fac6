"""Reuse and change of embedding models against a real Postgres: the embedding cache (an edit re-embeds only what
changed), and `connector reembed` to a model of another dimension, served by an OpenAI-compatible stub, while
searches run, then switched atomically, back, dropped; and a reembed killed midway that resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import psycopg
import pytest

from connector import reembed
from connector.counters import EMBED_CACHE
from connector.db import embeddings
from connector.db.database import connect, ensure_embedding_model
from connector.embed import embedding_text
from connector.embedders import close, load, spec_of
from connector.embedders.cache import PersistentCache
from connector.errors import EmbeddingModelMismatch, FatalError
from connector.observe import prometheus
from connector.pipeline import Pipeline
from connector.settings import EmbedSettings, Settings
from connector.worker import Worker
from tests.conftest import FIXTURES, child_env, connector_cmd, wait_for
from tests.embed_stub import EmbeddingStub
from tests.test_search import queue_corpus

KEY = "sk-stub-7781"


def with_endpoint(settings: Settings, stub: EmbeddingStub, **embed) -> Settings:
    values = {"base_url": stub.base_url, "api_key": KEY, "model": "stub-embed", "batch_size": 8, "max_retries": 1,
              "timeout": 10.0, **embed}  # fmt: skip
    return settings.model_copy(update={"embedder": "openai", "embed": EmbedSettings(**values)})


def cached_pipeline(settings: Settings, model) -> Pipeline:
    dsn = settings.dsn.get_secret_value()
    return Pipeline(settings, model, None, PersistentCache(model, embeddings.CacheTable(dsn), spec_of(model).cache_key))


def drain(conn, pipeline: Pipeline) -> None:
    Worker(conn, pipeline, []).drain(threading.Event())


def embedded_texts(conn, settings: Settings, key: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.text, c.section_path, d.title FROM connector.chunks c JOIN connector.documents d "
        "ON d.id = c.document_id WHERE d.source_key = %s ORDER BY c.ordinal",
        (key,),
    ).fetchall()
    return [embedding_text(settings.embed_template, title, tuple(path), text)[0] for text, path, title in rows]


def test_an_edit_re_embeds_only_the_chunks_whose_text_changed(settings: Settings) -> None:
    text = (FIXTURES / "dockerfile-reference.md").read_text()
    lines = text.splitlines(keepends=True)
    middle = next(i for i in range(len(lines) // 2, len(lines)) if len(lines[i]) > 60 and lines[i][0].isalpha())
    edited = "".join(lines[:middle] + ["One more sentence about the build cache, added today.\n"] + lines[middle:])
    dsn = settings.dsn.get_secret_value()
    with EmbeddingStub(dim=64) as stub:
        s = with_endpoint(settings, stub, dimensions=64)
        model = load("openai", s.embed)
        pipeline = cached_pipeline(s, model)
        try:
            with connect(dsn, autocommit=True) as conn:
                ensure_embedding_model(conn, model)
                insert = (
                    "INSERT INTO connector.documents (source_key, content, mime_type) VALUES (%s, %s, 'text/markdown')"
                )
                conn.execute(insert, ("v1", text))
                drain(conn, pipeline)
                first = embedded_texts(conn, s, "v1")
                assert len(first) > 5 and len(stub.texts) == len(set(first))
                assert pipeline.chunk_embedder.last == {"embedded": len(set(first)), "cached": 0}

                before, hits = len(stub.requests), EMBED_CACHE.labels("hit")._value.get()
                conn.execute(insert, ("copy", text))  # the same text again, under another key
                drain(conn, pipeline)
                assert len(stub.requests) == before, "unchanged text never reaches the provider"
                assert EMBED_CACHE.labels("hit")._value.get() - hits == len(set(first))
                assert b'connector_embed_cache_total{result="hit"}' in prometheus()
                same = conn.execute(
                    "SELECT a.embedding = b.embedding FROM connector.chunks a JOIN connector.chunks b USING (ordinal) "
                    "JOIN connector.documents da ON da.id = a.document_id JOIN connector.documents db "
                    "ON db.id = b.document_id WHERE da.source_key = 'v1' AND db.source_key = 'copy'"
                ).fetchall()
                assert same and all(r[0] for r in same), "a cached vector is the vector the model gave"

                sent = len(stub.texts)
                conn.execute("UPDATE connector.documents SET content = %s WHERE source_key = 'v1'", (edited,))
                drain(conn, pipeline)
                second = embedded_texts(conn, s, "v1")
                changed = set(second) - set(first)
                assert second != first and 0 < len(changed) < len(second)
                assert sorted(stub.texts[sent:]) == sorted(changed), "only the chunks whose text changed"
        finally:
            pipeline.close()
            close(model)


@pytest.fixture
def fake_corpus(settings: Settings) -> str:
    dsn = settings.dsn.get_secret_value()
    n = queue_corpus(dsn)
    with connect(dsn, autocommit=True) as conn:
        ensure_embedding_model(conn, load("fake"))
        drain(conn, Pipeline(settings, load("fake")))
        assert conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone() == (n,)
    return dsn


def column_dims(conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT a.attrelid::regclass::text || '.' || a.attname, a.atttypmod FROM pg_attribute a "
        "WHERE a.attrelid IN ('connector.chunks'::regclass, 'connector.chunk_windows'::regclass) "
        "AND a.attname IN ('embedding', 'standby_embedding') AND NOT a.attisdropped"
    ).fetchall()
    return dict(rows)


def chunk_indexes(conn) -> dict[str, str]:
    """The HNSW indexes on connector.chunks: name → the column they index."""
    return dict(
        conn.execute(
            "SELECT c.relname, a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am am ON am.oid = c.relam "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = 'connector.chunks'::regclass AND am.amname = 'hnsw'"
        ).fetchall()
    )


def test_reembed_to_another_dimension_serves_searches_throughout_then_switches_back_and_drops(
    settings: Settings, fake_corpus: str
) -> None:
    import connector

    dsn = fake_corpus
    with EmbeddingStub(dim=48, delay=0.02) as stub:
        s = with_endpoint(settings, stub)  # no dimensions asked: the stub's own 48, from its first answer
        seen: list[str] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def search_all_along() -> None:
            try:
                with connector.Client(dsn, s) as client:  # configured for the stub: used once it is the active one
                    while not stop.is_set():
                        seen.append(client.search("flux capacitor calibration", 1)[0].hit.source_key)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        searcher = threading.Thread(target=search_all_along)
        searcher.start()
        try:
            model = load("openai", s.embed)
            try:
                n = reembed.build(dsn, s, model, lambda done, total: None)
            finally:
                close(model)
            with connect(dsn, autocommit=True) as conn:
                total = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
                assert n == total and len(set(stub.inputs) - {"dimension probe"}) == total
                slots = embeddings.models(conn)
                standby = slots["standby"]
                assert slots["active"].name == "fake-bow-384"
                assert (standby.name, standby.dim, standby.state) == ("stub-embed", 48, "ready")
                assert conn.execute("SELECT name FROM connector.embedding_model").fetchone() == ("fake-bow-384",)
            during = len(seen)
            wait_for(lambda: len(seen) > during + 3, what="searches during the build")

            old, new = reembed.switch(dsn, s, lambda done, total: None)
            assert (old.name, new.name, new.dim) == ("fake-bow-384", "stub-embed", 48)
            with connect(dsn, autocommit=True) as conn:
                assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchone() == ("stub-embed", 48)
                dims = column_dims(conn)
                assert dims["connector.chunks.embedding"] == 48 and dims["connector.chunks.standby_embedding"] == 384
                assert dims["connector.chunk_windows.embedding"] == 48
                # the standby vectors' index, built for the switch, now serves the active ones
                assert chunk_indexes(conn) == {"chunks_embedding_hnsw": "embedding"}
                # a sidecar still running with the old model writes nothing after the switch
                conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('late', 'written late')")
                with pytest.raises(EmbeddingModelMismatch, match="reembed"):
                    drain(conn, Pipeline(settings, load("fake")))
                assert conn.execute(
                    "SELECT status, (SELECT count(*) FROM connector.chunks c WHERE c.document_id = d.id) "
                    "FROM connector.documents d WHERE source_key = 'late'"
                ).fetchone() == ("pending", 0)
                # the new model's sidecar writes it
                model = load("openai", s.embed)
                drain(conn, cached_pipeline(s, model))
                close(model)
                assert conn.execute("SELECT status FROM connector.documents WHERE source_key = 'late'").fetchone() == (
                    "done",
                )
            after_switch = len(seen)
            wait_for(lambda: len(seen) > after_switch + 3, what="searches after the switch")
            assert len(stub.requests) > 0

            back_old, back_new = reembed.switch(
                dsn, s, lambda done, total: None
            )  # the late document gets its fake vector
            assert (back_old.name, back_new.name) == ("stub-embed", "fake-bow-384")
            with connect(dsn, autocommit=True) as conn:
                assert column_dims(conn)["connector.chunks.embedding"] == 384
                assert all(chunk_indexes(conn)[name] == column for name, column in (
                    ("chunks_embedding_hnsw", "embedding"), ("chunks_standby_embedding_hnsw", "standby_embedding"),
                ) if name in chunk_indexes(conn)), "each index's name says whose vectors it holds"  # fmt: skip
                assert conn.execute("SELECT count(*) FROM connector.chunks WHERE embedding IS NULL").fetchone() == (0,)
            back = len(seen)
            wait_for(lambda: len(seen) > back + 3, what="searches after switching back")
        finally:
            stop.set()
            searcher.join()
    assert errors == []
    assert set(seen) == {"topics/flux"}, "every search, before, during and after each switch, found the answer"
    with connect(dsn, autocommit=True) as conn:
        assert embeddings.drop_standby(conn).name == "stub-embed"
        assert set(embeddings.models(conn)) == {"active"}
        assert "connector.chunks.standby_embedding" not in column_dims(conn)
        assert conn.execute("SELECT to_regclass('connector.standby_windows')").fetchone() == (None,)
        assert conn.execute(
            "SELECT count(*) FROM connector.embedding_cache WHERE model LIKE 'stub-embed@%'"
        ).fetchone() == (0,)
        with pytest.raises(FatalError, match="no standby model"):
            reembed.switch(dsn, settings, lambda done, total: None)


def test_a_reembed_keeps_windows_of_long_chunks_only_and_searches_both_kinds_after_the_switch(
    settings: Settings, fake_corpus: str
) -> None:
    """A model with a short input limit: the chunks longer than it get several standby windows each, those that fit
    none (their standby vector is their window, migration 0013); after the switch a search finds either kind."""
    dsn = fake_corpus
    with connect(dsn, autocommit=True) as conn:
        counts = sorted(n for (n,) in conn.execute("SELECT token_count FROM connector.chunks"))
    limit = max(16, counts[len(counts) // 2])  # about half the chunks fit, half do not
    with EmbeddingStub(dim=48) as stub:
        s = with_endpoint(settings, stub, max_input_tokens=limit)
        model = load("openai", s.embed)
        try:
            reembed.build(dsn, s, model, lambda done, total: None)
        finally:
            close(model)
        with connect(dsn, autocommit=True) as conn:
            per_chunk = dict(
                conn.execute("SELECT chunk_id, count(*) FROM connector.standby_windows GROUP BY chunk_id").fetchall()
            )
            total = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
        assert per_chunk and min(per_chunk.values()) >= 2, "a chunk with window rows has several"
        assert len(per_chunk) < total, "and the chunks that fit the model have none"
        reembed.switch(dsn, s, lambda done, total: None)
        with connect(dsn, autocommit=True) as conn:
            long_id = next(iter(per_chunk))
            short_id = conn.execute(
                "SELECT id FROM connector.chunks WHERE id <> ALL(%s) ORDER BY id LIMIT 1", (list(per_chunk),)
            ).fetchone()[0]
            for chunk_id in (short_id, long_id):
                vector = conn.execute("SELECT embedding FROM connector.chunks WHERE id = %s", (chunk_id,)).fetchone()[0]
                if chunk_id == long_id:  # asked with one of its windows: its best window matches exactly
                    vector = conn.execute(
                        "SELECT embedding FROM connector.chunk_windows WHERE chunk_id = %s AND window_no = 1",
                        (chunk_id,),
                    ).fetchone()[0]
                found = conn.execute(
                    "SELECT chunk_id FROM connector.search(%s, NULL, 3, '{}', 1.0, 1.0)", (vector,)
                ).fetchall()
                assert (chunk_id,) in found, (chunk_id, found)


def test_a_reembed_killed_midway_resumes_where_it_stopped(fake_corpus: str, tmp_path) -> None:
    dsn = fake_corpus
    with connect(dsn, autocommit=True) as conn:
        total = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
    with EmbeddingStub(dim=32, delay=0.25) as stub:
        env = {**child_env(tmp_path), "CONNECTOR_EMBED_API_KEY": KEY, "CONNECTOR_EMBED_BATCH_SIZE": "2",
               "CONNECTOR_EMBED_CONCURRENCY": "1"}  # fmt: skip
        args = ("reembed", "--embedder", "openai", "--model", "stub-embed", "--base-url", stub.base_url,
                "--dimensions", "32", "--dsn", dsn)  # fmt: skip
        proc = subprocess.Popen(connector_cmd(*args), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:

            def done() -> int:
                with psycopg.connect(dsn) as conn:
                    try:
                        return conn.execute(
                            "SELECT count(*) FROM connector.chunks WHERE standby_embedding IS NOT NULL"
                        ).fetchone()[0]
                    except psycopg.errors.UndefinedColumn:  # not created yet
                        return 0

            wait_for(lambda: done() >= 4, timeout=60, what="a few standby vectors")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stopped_at = done()
        assert 4 <= stopped_at < total
        sent_before = len(stub.texts)
        rerun = subprocess.run(connector_cmd(*args), env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=180)  # fmt: skip
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert f"{total - stopped_at} of {total} chunks to embed" in rerun.stderr
        assert "connector reembed --switch" in rerun.stderr
        assert done() == total
        resent = len(stub.texts[sent_before:]) - (total - stopped_at)
        assert resent <= 2, "only what was in flight at the kill (already in the cache otherwise) is sent again"
        assert KEY not in rerun.stdout + rerun.stderr
    with connect(dsn, autocommit=True) as conn:
        assert embeddings.models(conn)["standby"].state == "ready"
        hnsw = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'connector' AND indexname IN "
            "('chunks_standby_embedding_hnsw', 'standby_windows_embedding_hnsw')"
        ).fetchone()
        assert hnsw == (2,)
        dims = conn.execute("SELECT DISTINCT vector_dims(standby_embedding) FROM connector.chunks").fetchall()
        assert dims == [(32,)]


def test_a_sidecar_given_a_wrong_key_stops_with_a_clear_error_and_never_prints_the_key(dsn: str, tmp_path) -> None:
    wrong = "sk-live-Qw3rTy9-never-print-me"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "note.md").write_text("# Penguins\n\nPenguins live in the southern hemisphere.\n")
    with EmbeddingStub(dim=32, key=KEY) as stub:
        env = {**child_env(tmp_path), "CONNECTOR_EMBEDDER": "openai", "CONNECTOR_EMBED_BASE_URL": stub.base_url,
               "CONNECTOR_EMBED_API_KEY": wrong, "CONNECTOR_LOG_FORMAT": "json"}  # fmt: skip
        out = subprocess.run(connector_cmd("ingest", "docs", "--dsn", dsn, "-v"), env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=180)  # fmt: skip
        assert stub.requests, "the endpoint was asked"
    shown = out.stdout + out.stderr
    assert out.returncode == 2, shown
    assert "refused the API key (HTTP 401)" in shown and "CONNECTOR_EMBED_API_KEY" in shown
    assert wrong not in shown and wrong[-4:] not in shown and "sk-liv" not in shown
    assert "Traceback" not in shown
    with psycopg.connect(dsn) as conn:  # stopped at the first request (the dimension probe): nothing written at all
        assert conn.execute("SELECT to_regclass('connector.documents')").fetchone() == (None,)
