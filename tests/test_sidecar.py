"""`connector run` as a user runs it: a real child process watching a real folder and a real queue table."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import FIXTURES, output_of, wait_for
from tests.dbchecks import assert_consistent, documents

# The poll is a minute away: within a test, only LISTEN/NOTIFY can wake the worker.
SIDECAR_ENV = {
    "CONNECTOR_SETTLE_SECONDS": "1",
    "CONNECTOR_POLL_INTERVAL": "60",
    "CONNECTOR_SHUTDOWN_GRACE_SECONDS": "10",
}


def status_of(dsn: str, key: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status FROM connector.documents WHERE source_key = %s", (key,)).fetchone()
    return row[0] if row else None


def finished(dsn: str, key: str) -> str | None:
    status = status_of(dsn, key)
    return status if status in ("done", "failed") else None


@pytest.fixture
def sidecar(tmp_path: Path, migrated_dsn: str, start_process):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(FIXTURES / "debian-manifesto.txt", inbox / "already-here.txt")  # for the initial scan
    proc = start_process("run", "--watch", str(inbox), "--dsn", migrated_dsn, "--embedder", "fake", **SIDECAR_ENV)
    wait_for(lambda: "connector running" in output_of(proc), timeout=60, what="sidecar start")
    yield proc, inbox
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, output_of(proc)


def test_folder_drops_become_chunks(sidecar, migrated_dsn: str, tmp_path: Path) -> None:
    proc, inbox = sidecar
    dsn = migrated_dsn
    assert wait_for(lambda: finished(dsn, "already-here.txt"), what="initial scan") == "done"

    shutil.copy(FIXTURES / "dockerfile-reference.md", inbox / "dockerfile.md")
    assert wait_for(lambda: finished(dsn, "dockerfile.md"), what="dropped markdown") == "done"

    # A slow copy: the file grows in pieces, with pauses shorter than the settle time.
    data = (FIXTURES / "lppl-1.3c.pdf").read_bytes()
    with open(inbox / "slow.pdf", "wb") as f:
        for i in range(0, len(data), len(data) // 5 + 1):
            f.write(data[i : i + len(data) // 5 + 1])
            f.flush()
            time.sleep(0.2)  # a pause of the writer longer than the settle time would read a part
    assert wait_for(lambda: finished(dsn, "slow.pdf"), what="slow copy") == "done"

    # A browser-style download: written as .part, renamed when complete.
    part = inbox / "download.pdf.part"
    part.write_bytes(data)
    time.sleep(1.5)
    assert status_of(dsn, "download.pdf.part") is None
    part.rename(inbox / "download.pdf")
    assert wait_for(lambda: finished(dsn, "download.pdf"), what=".part renamed") == "done"

    # A corrupt PDF fails with a readable error, and the sidecar carries on with the next file.
    (inbox / "corrupt.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(3000))
    assert wait_for(lambda: finished(dsn, "corrupt.pdf"), what="corrupt pdf") == "failed"
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "after-corrupt.txt")
    assert wait_for(lambda: finished(dsn, "after-corrupt.txt"), what="file after corrupt") == "done"
    time.sleep(2)  # long enough for any event our own reads might cause to settle and requeue the file

    with psycopg.connect(dsn) as conn:
        docs = documents(conn)
        assert all(attempts == 1 for _, _, attempts, _ in docs.values()), "each file is processed once"
        assert "PDF" in docs["corrupt.pdf"][3]
        assert_consistent(conn)
        assert (
            conn.execute(
                "SELECT count(DISTINCT page_start) FROM connector.chunks c JOIN connector.documents d "
                "ON d.id = c.document_id WHERE d.source_key = 'slow.pdf'"
            ).fetchone()[0]
            > 1
        )
    assert proc.poll() is None
    log = output_of(proc)
    for key in ("dockerfile.md", "slow.pdf", "corrupt.pdf"):  # each document's start is in the log, then its end
        assert log.index(f"processing {key}") < log.index(f"failed {key}" if key == "corrupt.pdf" else f"done {key}")


def test_rows_inserted_in_sql_become_chunks(sidecar, migrated_dsn: str) -> None:
    dsn = migrated_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Record every status a row passes through, with a trigger of the test's own.
        conn.execute(
            """
            CREATE TABLE public.status_log (document_id bigint, status text, at timestamptz DEFAULT clock_timestamp());
            CREATE FUNCTION public.log_status() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO public.status_log (document_id, status) VALUES (NEW.id, NEW.status); RETURN NULL; END $$;
            CREATE TRIGGER log_status AFTER INSERT OR UPDATE OF status ON connector.documents
            FOR EACH ROW EXECUTE FUNCTION public.log_status();
            """
        )
        text = (FIXTURES / "apache-2.0.txt").read_text()
        faq_id = conn.execute(
            "INSERT INTO connector.documents (source_key, title, content) VALUES ('faq-1', 'FAQ', %s) RETURNING id",
            (text,),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO connector.documents (source_key, title, content_bytes, mime_type) "
            "VALUES ('manual-pdf', 'LPPL', %s, 'application/pdf')",
            ((FIXTURES / "lppl-1.3c.pdf").read_bytes(),),
        )
        conn.execute("INSERT INTO connector.documents (source_key, title) VALUES ('empty-row', 'nothing')")

    assert wait_for(lambda: finished(dsn, "faq-1"), what="text row") == "done"
    assert wait_for(lambda: finished(dsn, "manual-pdf"), what="pdf row") == "done"
    assert wait_for(lambda: finished(dsn, "empty-row"), what="empty row") == "failed"
    with psycopg.connect(dsn) as conn:
        history = [r[0] for r in conn.execute(
            "SELECT status FROM public.status_log WHERE document_id = %s ORDER BY at", (faq_id,)
        )]  # fmt: skip
        assert history == ["pending", "processing", "done"]
        docs = documents(conn)
        assert "neither content nor content_bytes" in docs["empty-row"][3]
        pages = conn.execute(
            "SELECT max(page_end) FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "WHERE d.source_key = 'manual-pdf'"
        ).fetchone()
        assert pages == (8,)
        assert conn.execute(
            "SELECT source, content_hash IS NOT NULL FROM connector.documents WHERE source_key = 'faq-1'"
        ).fetchone() == ("sql", True)
        assert_consistent(conn)


def test_a_flood_of_notifications_during_a_drain_holds_no_snapshot(sidecar, migrated_dsn: str) -> None:
    """While the workers drain a burst, notifications keep coming (other writers, other channels' habits): each
    worker's LISTEN connection is read as they come, so its server process never waits inside a transaction, holding
    back the database's xmin horizon (vacuum, and the queue index's dead entries) until the drain ends."""
    not_done = "SELECT count(*) FROM connector.documents WHERE status <> 'done'"
    inserted = [0]

    def burst(rows: int) -> None:
        conn.execute(
            "INSERT INTO connector.documents (source_key, content) "
            "SELECT 'burst/' || g, 'Row ' || g || '. ' || repeat('A sentence about queues and workers. ', 30) "
            "FROM generate_series(%s::int, %s::int) g",
            (inserted[0] + 1, inserted[0] + rows),
        )
        inserted[0] += rows

    def keep_draining() -> None:  # a fast machine must not end the drain before the test has looked
        if conn.execute(not_done).fetchone()[0] < 2000:
            burst(2000)

    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        burst(6000)
        wait_for(lambda: conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone()[0],
                 what="the drain to start")  # fmt: skip
        # 40,000 distinct payloads (Postgres folds only identical ones): over a megabyte for each listener, several
        # times what a Unix socket's buffer holds (the test server's connections are local).
        conn.execute("SELECT count(pg_notify('connector_documents', g::text)) FROM generate_series(1, 40000) g")
        listeners = (
            "SELECT pid, backend_xmin::text FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%' AND datname = current_database()"  # this test's database: a shared server too
        )
        wait_for(lambda: len(conn.execute(listeners).fetchall()) == 2, what="both workers' LISTEN connections")

        def none_held() -> bool:
            keep_draining()
            return all(xmin is None for _, xmin in conn.execute(listeners).fetchall())

        wait_for(none_held, timeout=10, what="the listening backends to hold no snapshot")
        pending = conn.execute(not_done).fetchone()[0]
        # (Unread, their backends hold one until the drain ends: then this is 0.)
        assert pending > 0, "no snapshot held only once the drain was over (or the burst was too short to tell)"
        time.sleep(1.0)
        assert none_held()
        wait_for(lambda: conn.execute(not_done).fetchone()[0] == 0, timeout=180, what="the burst to be done")
        assert_consistent(conn)


def test_run_with_the_embedded_server_keeps_data_and_stops_it(tmp_path: Path, start_process) -> None:
    """What `make run` does: no DSN, so the embedded Postgres starts in the data dir and stops with the sidecar."""
    inbox = tmp_path / "inbox"
    proc = start_process("run", "--watch", str(inbox), "--embedder", "fake", **SIDECAR_ENV)
    wait_for(lambda: "query the chunks with" in output_of(proc), timeout=90, what="sidecar start")
    out = output_of(proc)
    assert "connector running" in out and "psql '" in out and str(tmp_path / "state" / "pgdata") in out
    assert inbox.is_dir()
    shutil.copy(FIXTURES / "debian-manifesto.txt", inbox / "manifesto.txt")
    dsn = f"postgresql://postgres:@/postgres?host={tmp_path / 'state' / 'pgdata'}"
    assert wait_for(lambda: finished(dsn, "manifesto.txt"), what="embedded ingest") == "done"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, output_of(proc)
    assert not (tmp_path / "state" / "pgdata" / "postmaster.pid").exists(), "embedded server left running"
    assert (tmp_path / "state" / "pgdata" / "PG_VERSION").exists(), "data kept for the next start"


def test_renames_and_deletes_are_mirrored_without_re_embedding(sidecar, migrated_dsn: str) -> None:
    proc, inbox = sidecar
    dsn = migrated_dsn
    (inbox / "sub").mkdir()
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "a.txt")
    shutil.copy(FIXTURES / "debian-manifesto.txt", inbox / "sub" / "m.txt")
    assert wait_for(lambda: finished(dsn, "a.txt"), what="a.txt") == "done"
    assert wait_for(lambda: finished(dsn, "sub/m.txt"), what="sub/m.txt") == "done"

    def chunks_of(key: str) -> list[int]:
        with psycopg.connect(dsn) as conn:
            return [r[0] for r in conn.execute(
                "SELECT c.id FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
                "WHERE d.source_key = %s ORDER BY c.ordinal", (key,))]  # fmt: skip

    before, before_sub = chunks_of("a.txt"), chunks_of("sub/m.txt")
    (inbox / "a.txt").rename(inbox / "b.txt")
    (inbox / "sub").rename(inbox / "renamed")
    wait_for(lambda: status_of(dsn, "b.txt") and status_of(dsn, "renamed/m.txt"), what="renames")
    time.sleep(1.5)  # let any re-queue the renames might (wrongly) cause happen
    assert status_of(dsn, "a.txt") is None and status_of(dsn, "sub/m.txt") is None
    assert chunks_of("b.txt") == before and chunks_of("renamed/m.txt") == before_sub, "same chunks, not re-embedded"
    with psycopg.connect(dsn) as conn:
        attempts = dict(conn.execute("SELECT source_key, attempts FROM connector.documents").fetchall())
        assert attempts["b.txt"] == attempts["renamed/m.txt"] == 1
        assert conn.execute("SELECT file_path FROM connector.documents WHERE source_key = 'b.txt'").fetchone() == (
            str(inbox.resolve() / "b.txt"),
        )

    (inbox / "b.txt").unlink()
    shutil.rmtree(inbox / "renamed")
    wait_for(lambda: status_of(dsn, "b.txt") is None and status_of(dsn, "renamed/m.txt") is None, what="deletes")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0] == len(chunks_of("already-here.txt"))
        assert_consistent(conn)
    assert proc.poll() is None


def test_health_and_prometheus_metrics(tmp_path: Path, migrated_dsn: str, start_process) -> None:
    import json
    import socket
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    proc = start_process("run", "--watch", str(inbox), "--dsn", migrated_dsn, "--embedder", "fake", "--workers", "2",
                         "--http-port", str(port), **SIDECAR_ENV)  # fmt: skip
    wait_for(lambda: "connector running" in output_of(proc), timeout=60, what="sidecar start")
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "a.txt")
    assert wait_for(lambda: finished(migrated_dsn, "a.txt"), what="a.txt") == "done"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    code, body = get("/health")
    health = json.loads(body)
    assert code == 200 and health["status"] == "ok" and health["workers_alive"] == 2 and health["database"] == "ok"
    assert health["queue"]["done"] == 1
    code, metrics = get("/metrics")
    assert code == 200
    assert 'connector_documents_total{outcome="done"} 1.0' in metrics
    assert 'connector_queue_documents{state="done"} 1.0' in metrics
    assert re.search(r'connector_stage_seconds_count\{stage="embed"\} 1\.0', metrics)
    assert "connector_database_up 1.0" in metrics
    assert get("/nope")[0] == 404
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, output_of(proc)
