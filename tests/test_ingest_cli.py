"""`connector ingest`, `status` and `migrate` as a user runs them: real processes, real files, real Postgres."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector

from connector.embedders import load
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES, child_env, connector_cmd, output_of, wait_for
from tests.dbchecks import assert_consistent, documents


def ingest(tmp_path: Path, dsn: str, *paths: Path, embedder: str = "fake", **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        connector_cmd("ingest", *map(str, paths), "--dsn", dsn, "--embedder", embedder),
        cwd=tmp_path,
        env=child_env(tmp_path) | env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "legal").mkdir(parents=True)
    shutil.copy(FIXTURES / "apache-2.0.txt", folder / "legal")
    shutil.copy(FIXTURES / "lppl-1.3c.pdf", folder / "legal")
    shutil.copy(FIXTURES / "dockerfile-reference.md", folder)
    (folder / ".hidden.md").write_text("# hidden")
    return folder


def test_ingest_folder(tmp_path: Path, dsn: str, corpus: Path) -> None:
    result = ingest(tmp_path, dsn, corpus)
    assert result.returncode == 0, result.stderr
    assert "3 done" in result.stderr
    with psycopg.connect(dsn) as conn:
        docs = documents(conn)
        assert set(docs) == {"legal/apache-2.0.txt", "legal/lppl-1.3c.pdf", "dockerfile-reference.md"}
        strategies = ChunkingSettings().strategy_names
        assert all(status == "done" and strategy in strategies for status, strategy, *_ in docs.values())
        assert all(strategy != "page" for key, (_, strategy, *_) in docs.items() if not key.endswith(".pdf"))
        assert_consistent(conn)
        pages = conn.execute(
            """SELECT min(page_start), max(page_end), bool_and(page_start <= page_end) FROM connector.chunks c
               JOIN connector.documents d ON d.id = c.document_id WHERE d.source_key = 'legal/lppl-1.3c.pdf'"""
        ).fetchone()
        assert pages == (1, 8, True)
        candidates = conn.execute(
            """SELECT d.source_key, c.strategy,
                      c.sc IS NOT NULL AND c.bi IS NOT NULL AND c.icc IS NOT NULL AND c.dcc IS NOT NULL,
                      c.rc, c.rc_backend, c.error
               FROM connector.candidates c JOIN connector.documents d ON d.id = c.document_id"""
        ).fetchall()
        assert len(candidates) == 3 * len(strategies)
        for key, strategy, scored, rc, backend, error in candidates:
            if scored:  # every one of these English documents has pronouns to resolve
                assert backend == "heuristic" and 0 <= rc <= 1, (key, strategy, rc, backend)
            if strategy == "page" and not key.endswith(".pdf"):
                assert error == "skipped: document has no pages" and not scored
            elif strategy in ("sections", "sections_merged") and key == "legal/apache-2.0.txt":
                assert error == "skipped: document has no headings" and not scored
            elif strategy == "llm_regex":
                assert error == "skipped: no LLM endpoint configured (CONNECTOR_LLM_BASE_URL)" and not scored
            else:
                assert error is None and scored, (key, strategy, error)
        types = dict(conn.execute("SELECT chunk_type, count(*) FROM connector.chunks GROUP BY 1").fetchall())
        assert set(types) <= {"text", "table", "list", "code"} and types.get("text", 0) > 0
        sections = conn.execute(
            """SELECT count(*) FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id
               WHERE d.source_key = 'dockerfile-reference.md' AND cardinality(section_path) > 0"""
        ).fetchone()[0]
        assert sections > 0


def test_reingest_skips_unchanged_and_replaces_changed(tmp_path: Path, dsn: str, corpus: Path) -> None:
    assert ingest(tmp_path, dsn, corpus).returncode == 0
    with psycopg.connect(dsn) as conn:
        before = dict(conn.execute("SELECT id, document_id FROM connector.chunks").fetchall())

    again = ingest(tmp_path, dsn, corpus)
    assert again.returncode == 0 and "3 unchanged" in again.stderr
    with psycopg.connect(dsn) as conn:
        assert dict(conn.execute("SELECT id, document_id FROM connector.chunks").fetchall()) == before

    target = corpus / "legal" / "apache-2.0.txt"
    target.write_text(target.read_text() + "\n\nAPPENDIX B: a new closing paragraph added for the test.\n")
    changed = ingest(tmp_path, dsn, corpus)
    assert changed.returncode == 0 and "1 done" in changed.stderr and "2 unchanged" in changed.stderr
    with psycopg.connect(dsn) as conn:
        doc_id = conn.execute(
            "SELECT id FROM connector.documents WHERE source_key = 'legal/apache-2.0.txt'"
        ).fetchone()[0]
        new = dict(conn.execute("SELECT id, document_id FROM connector.chunks").fetchall())
        old_ids = {cid for cid, d in before.items() if d == doc_id}
        assert old_ids.isdisjoint(new), "old chunks of the changed document are gone"
        assert {cid for cid, d in before.items() if d != doc_id} <= set(new), "other documents untouched"
        texts = [r[0] for r in conn.execute(
            "SELECT text FROM connector.chunks WHERE document_id = %s ORDER BY ordinal", (doc_id,)
        )]  # fmt: skip
        assert "APPENDIX B" in texts[-1]
        assert conn.execute("SELECT count(*) FROM connector.documents").fetchone() == (3,)
        assert_consistent(conn)


def test_corrupt_pdf_fails_and_the_next_document_succeeds(tmp_path: Path, dsn: str) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    good = (FIXTURES / "lppl-1.3c.pdf").read_bytes()
    (folder / "a-corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    (folder / "b-good.pdf").write_bytes(good)
    result = ingest(tmp_path, dsn, folder)
    assert result.returncode == 1
    assert "a-corrupt.pdf" in result.stderr and "cannot open PDF" in result.stderr
    with psycopg.connect(dsn) as conn:
        docs = documents(conn)
        assert docs["a-corrupt.pdf"][0] == "failed" and "cannot open PDF" in docs["a-corrupt.pdf"][3]
        assert docs["b-good.pdf"][0] == "done"
        assert conn.execute(
            "SELECT count(*) FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "WHERE d.source_key = 'a-corrupt.pdf'"
        ).fetchone() == (0,)


def test_nearest_chunks_are_found_exactly_then_by_the_hnsw_index_once_the_table_is_large(
    tmp_path: Path, dsn: str, corpus: Path
) -> None:
    """Below CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS (migration 0015) the nearest chunks come from an exact scan;
    the next run that finds the table that large builds the HNSW index, and the same query then uses it."""
    query = load("fake").embed(["ONBUILD instruction adds a trigger instruction to the image"]).vectors[0]

    def nearest() -> tuple[str, list[str]]:
        with psycopg.connect(dsn) as conn:
            register_vector(conn)
            conn.execute("SET enable_seqscan = off")  # the index, whenever there is one
            sql = "SELECT text FROM connector.chunks ORDER BY embedding <=> %s LIMIT 3"
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (query,)).fetchall())
            return plan, [t for (t,) in conn.execute(sql, (query,)).fetchall()]

    assert ingest(tmp_path, dsn, corpus).returncode == 0
    with psycopg.connect(dsn) as conn:
        (chunks,) = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()
    plan, exact = nearest()
    assert "chunks_embedding_hnsw" not in plan and any("ONBUILD" in t for t in exact)
    # Another run with a threshold the table has passed (no document changed): it builds the index.
    below = ingest(tmp_path, dsn, corpus, CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS=str(chunks + 1))
    assert below.returncode == 0 and "chunks_embedding_hnsw" not in nearest()[0], "one chunk short: no index"
    built = ingest(tmp_path, dsn, corpus, CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS=str(chunks))
    assert built.returncode == 0, built.stderr
    plan, found = nearest()
    assert "chunks_embedding_hnsw" in plan
    assert found == exact, "on a table this small the graph finds the exact nearest"


def test_ingest_with_the_real_minilm_model(tmp_path: Path, dsn: str) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(FIXTURES / "apache-2.0.txt", folder)
    shutil.copy(FIXTURES / "debian-manifesto.txt", folder)
    result = ingest(tmp_path, dsn, folder, embedder="minilm")
    assert result.returncode == 0, result.stderr
    model = load("minilm")
    query = model.embed(["Who wrote the manifesto of the new Linux distribution, and who will sell it on CD-ROM?"])
    query = query.vectors[0]
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        assert conn.execute("SELECT name, dim FROM connector.embedding_model").fetchone() == (model.name, 384)
        (top,) = conn.execute(
            "SELECT d.source_key FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "ORDER BY c.embedding <=> %s LIMIT 1",
            (query,),
        ).fetchone()
        assert top == "debian-manifesto.txt"
        assert conn.execute("SELECT min(embed_windows) >= 1 FROM connector.chunks").fetchone() == (True,)
        assert_consistent(conn)


def test_migrate_and_status_commands(tmp_path: Path, dsn: str) -> None:
    env = {**child_env(tmp_path), "COLUMNS": "200"}  # wide enough that rich does not wrap the table cells
    mig = subprocess.run(connector_cmd("migrate", "--dsn", dsn), env=env, capture_output=True, text=True, timeout=60)
    assert mig.returncode == 0, mig.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO connector.documents (source_key, status, last_error, attempts) "
            "VALUES ('broken-row', 'failed', 'row has neither content nor content_bytes', 1), ('ok', 'done', NULL, 1)"
        )
    status = subprocess.run(connector_cmd("status", "--dsn", dsn), env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "broken-row" in status.stdout and "neither content" in status.stdout
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in status.stdout.splitlines()[3:9]}
    assert lines == {
        "pending (ready)": "0",
        "pending (ready, files)": "0",
        "pending (retry later)": "0",
        "processing": "0",
        "done": "1",
        "failed": "1",
    }
    with psycopg.connect(dsn, autocommit=True) as conn:  # a lease in flight, as a worker leaves it
        conn.execute(
            "INSERT INTO connector.documents (source_key, content, status, attempts, claimed_by, heartbeat_at, "
            "lease_expires_at) VALUES ('busy', 'x', 'processing', 3, 'host:42:ab:0', now(), now() + interval '1 min')"
        )
    status = subprocess.run(connector_cmd("status", "--dsn", dsn), env=env, capture_output=True, text=True, timeout=60)
    assert "in flight" in status.stdout and "host:42:ab:0" in status.stdout
    with psycopg.connect(dsn, autocommit=True) as conn:  # timestamps set by hand to what Python cannot hold
        conn.execute(
            "INSERT INTO connector.documents (source_key, content, status, attempts, claimed_by, heartbeat_at, "
            "lease_expires_at) VALUES ('stuck', 'x', 'processing', 1, 'host:43:cd:0', '-infinity', '-infinity'), "
            "('forever', 'x', 'processing', 1, 'host:44:ef:0', now(), 'infinity')"
        )
    status = subprocess.run(connector_cmd("status", "--dsn", dsn), env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr  # was: "timestamp too small (before year 1): '-infinity'"
    assert "host:43:cd:0" in status.stdout and "host:44:ef:0" in status.stdout

    def retry(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(connector_cmd("retry", *args, "--dsn", dsn), env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    assert retry().returncode == 2  # neither a document nor --failed
    assert retry("ok").returncode == 1  # done, not failed: nothing to requeue
    requeued = retry("--failed")
    assert requeued.returncode == 0 and "requeued" in requeued.stderr and "broken-row" in requeued.stderr
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status, retries FROM connector.documents WHERE source_key = 'broken-row'")
        assert row.fetchone() == ("pending", 0)


def test_another_embedding_model_is_refused_before_anything_is_written(tmp_path: Path, dsn: str, corpus: Path) -> None:
    assert ingest(tmp_path, dsn, corpus / "dockerfile-reference.md").returncode == 0
    with psycopg.connect(dsn) as conn:
        before = conn.execute("SELECT count(*), max(updated_at) FROM connector.documents").fetchone()
    result = ingest(tmp_path, dsn, corpus, embedder="minilm")
    assert result.returncode == 2
    assert "fake-bow-384" in result.stderr and "all-MiniLM-L6-v2" in result.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*), max(updated_at) FROM connector.documents").fetchone() == before
        assert conn.execute("SELECT name FROM connector.embedding_model").fetchall() == [("fake-bow-384",)]


def test_relative_paths_are_ingested(tmp_path: Path, dsn: str, corpus: Path) -> None:
    ok = ingest(tmp_path, dsn, Path("docs"), Path("docs/legal/apache-2.0.txt"))  # cwd is tmp_path
    assert ok.returncode == 0 and "4 done" in ok.stderr, ok.stderr
    with psycopg.connect(dsn) as conn:
        assert set(documents(conn)) == {
            "legal/apache-2.0.txt",
            "legal/lppl-1.3c.pdf",
            "dockerfile-reference.md",
            "apache-2.0.txt",
        }


def test_files_that_would_share_a_key_are_refused_before_anything_is_written(tmp_path: Path, dsn: str) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(FIXTURES / "debian-manifesto.txt", tmp_path / name / "README.txt")
    result = ingest(tmp_path, dsn, tmp_path / "a", tmp_path / "b")
    assert result.returncode == 2
    assert "share the key README.txt" in result.stderr
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'connector'").fetchone()
        assert tables == (0,), "refused before even migrating"


def test_sigterm_stops_a_one_shot_command_and_its_embedded_server(tmp_path: Path, start_process) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(80):
        shutil.copy(FIXTURES / "dockerfile-reference.md", folder / f"copy-{i:02d}.md")
    proc = start_process("ingest", str(folder), "--embedder", "fake")  # no DSN: the embedded server
    pid_file = tmp_path / "state" / "pgdata" / "postmaster.pid"
    wait_for(lambda: pid_file.exists() and "copy-" in output_of(proc), timeout=60, what="ingest under way")
    assert proc.poll() is None, "the ingest must still be running for this test to mean anything"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM
    assert not pid_file.exists(), "the embedded server was stopped on the way out"


def test_explain_shows_every_candidate_and_why_some_did_not_run(tmp_path: Path, dsn: str, corpus: Path) -> None:
    # RT is weighted 0 by default (not computed); a `.env` in the working directory, as `connector tune` writes
    # it, turns it on.
    (tmp_path / ".env").write_text("CONNECTOR_WEIGHT_RT=0.1\n")
    assert ingest(tmp_path, dsn, corpus).returncode == 0
    env = {**child_env(tmp_path), "COLUMNS": "250"}
    result = subprocess.run(connector_cmd("explain", "legal/apache-2.0.txt", "--json", "--dsn", dsn), env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["document"]["source_key"] == "legal/apache-2.0.txt" and report["document"]["status"] == "done"
    candidates = {c["strategy"]: c for c in report["candidates"]}
    assert set(candidates) == set(ChunkingSettings().strategy_names)
    chosen = [c for c in report["candidates"] if c["chosen"]]
    assert len(chosen) == 1 and chosen[0]["strategy"] == report["document"]["strategy"]
    assert candidates["page"]["error"] == "skipped: document has no pages"
    r1100 = candidates["recursive_1100"]
    assert all(r1100[m] is not None for m in ("rc", "icc", "dcc", "bi", "sc", "rt"))
    assert r1100["rc_backend"] == "heuristic" and set(r1100["metric_ms"]) == {"rc", "icc", "dcc", "bi", "sc", "rt"}
    assert r1100["shape"]["tokens_max"] <= 1100 and r1100["shape"]["units"] > 0
    assert report["why"][0].startswith(f"{chosen[0]['strategy']} won with ")
    assert not any("weights have changed" in line for line in report["why"]), "explain reads the same .env"
    assert candidates["page"]["rc"] is None and candidates["page"]["rc_backend"] is None

    table = subprocess.run(connector_cmd("explain", str(report["document"]["id"]), "--dsn", dsn), env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert table.returncode == 0 and "no LLM endpoint configured" in table.stdout and "yes" in table.stdout
    assert "RC by the heuristic coreference backend" in table.stdout
    assert " instead would change: " in table.stdout and " chunks instead of " in table.stdout
    report = subprocess.run(connector_cmd("report", "--json", "--dsn", dsn), env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    rows = {r["strategy"]: r for r in json.loads(report.stdout)}
    assert rows["adaptive"]["documents"] == sum(r["wins"] for n, r in rows.items() if n != "adaptive")
    assert all(0 <= rows[n]["rt"] <= 1 for n in ("adaptive", "recursive_1100")), "the report shows RT"
    missing = subprocess.run(connector_cmd("explain", "nope.txt", "--dsn", dsn), env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 1 and "no document with id or source key 'nope.txt'" in missing.stderr


def test_help_shows_flags_without_a_type() -> None:
    """typer prints `<bool>` beside flags unless told not to; every command's help is checked (in-process: the
    help is the same text the command line prints)."""
    from typer.testing import CliRunner

    from connector.cli import app

    runner = CliRunner()
    listing = runner.invoke(app, ["--help"], terminal_width=100)
    assert listing.exit_code == 0 and "<bool>" not in listing.output
    rows = [line for line in listing.output.splitlines() if line.startswith("│ ") and line[2] not in " -"]
    commands = [row.split()[1] for row in rows]
    assert {"run", "search", "ingest", "eval"} <= set(commands), listing.output
    for command in commands:
        out = runner.invoke(app, [command, "--help"], terminal_width=100)
        assert out.exit_code == 0 and "--" in out.output, (command, out.output)
        assert "<bool>" not in out.output, (command, out.output)


def test_what_documents_say_is_printed_as_text_never_as_markup_or_terminal_escapes(tmp_path: Path, dsn: str) -> None:
    """A chunk holding `[/usr/bin]` made rich read it as a closing tag: `connector search` failed with a
    MarkupError; keys like `[red]tools.md` (in `ingest`'s progress bar and failure lines, `status`, `retry`) were
    printed as colours. Escape sequences in a document reached the terminal."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "[red]tools.md").write_text("# [bold]Tools[/bold]\n\n" + "Install the flux tools into [/usr/bin] "
                                                "and \x1b[31mcheck\x1b[0m them. " * 20)  # fmt: skip
    (folder / "[b]oops.pdf").write_bytes(b"%PDF-1.4\n[/broken]")
    result = ingest(tmp_path, dsn, folder)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "failed [b]oops.pdf: " in result.stderr and "1 done" in result.stderr, result.stderr
    with psycopg.connect(dsn) as conn:
        text = conn.execute("SELECT string_agg(text, '') FROM connector.chunks").fetchone()[0]
    assert "[/usr/bin]" in text and "\x1b" not in text and "[31m" not in text, "escape sequences are not content"
    with psycopg.connect(dsn, autocommit=True) as conn:  # what an older version (or a hand-made row) stored
        conn.execute("UPDATE connector.chunks SET text = text || ' \x1b]0;pwned\x07\x1b[2J'")
    env = child_env(tmp_path) | {"COLUMNS": "250"}
    run = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 120}
    found = subprocess.run(connector_cmd("search", "flux tools", "--dsn", dsn, "--embedder", "fake"), **run)
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr
    assert "[red]tools.md" in found.stdout and "\x1b" not in found.stdout, found.stdout
    assert "[bold]Tools[/bold]" in found.stdout, "a section named in markup is shown as written"
    asked = subprocess.run(connector_cmd("search", "[/usr/bin]", "--dsn", dsn, "--embedder", "fake"), **run)
    assert asked.returncode == 0 and "search: [/usr/bin]" in asked.stdout, asked.stderr
    status = subprocess.run(connector_cmd("status", "--dsn", dsn), **run)
    assert status.returncode == 0 and "[b]oops.pdf" in status.stdout, status.stderr
    retried = subprocess.run(connector_cmd("retry", "[b]oops.pdf", "--dsn", dsn), **run)
    assert retried.returncode == 0 and "requeued" in retried.stderr and "[b]oops.pdf" in retried.stderr, retried.stderr
