"""A watched table never makes the application's statement fail, the connector's own tables cannot be watched, and
the connector never rewrites a document's user metadata (the page count has its own column)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from connector.db.database import migrate
from connector.sources import table as tables
from tests.conftest import FIXTURES, child_env, connector_cmd, output_of, wait_for


def _docs(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT source_key, content FROM connector.documents WHERE source = 'table' ORDER BY source_key"
    ).fetchall()


def _warnings(conn: psycopg.Connection) -> list[str]:
    seen: list[str] = []
    conn.add_notice_handler(lambda diag: seen.append(f"{diag.severity_nonlocalized}: {diag.message_primary}"))
    return seen


def test_null_long_and_missing_values_never_fail_the_applications_statement(db: psycopg.Connection) -> None:
    db.execute("CREATE TABLE notes (id text, body text)")
    db.execute("INSERT INTO notes VALUES (NULL, 'before the watch'), ('1', 'one')")
    watched = tables.watch(db, "notes", "id", "body")
    assert (watched.queued, watched.skipped) == (1, 1)
    seen = _warnings(db)

    db.execute("INSERT INTO notes VALUES (NULL, 'no id yet')")  # failed before: source_key violates NOT NULL
    assert any("NULL id: it is not queued" in w and w.startswith("WARNING") for w in seen), seen
    db.execute("UPDATE notes SET id = '2' WHERE body = 'no id yet'")
    assert ("public.notes:2", "no id yet") in _docs(db)
    db.execute("UPDATE notes SET id = NULL WHERE id = '2'")  # the document of the old id goes
    assert [k for k, _ in _docs(db)] == ["public.notes:1"]
    db.execute("DELETE FROM notes WHERE id IS NULL")

    long_id = "x" * 20_000  # failed before: "index row size exceeds btree maximum"
    db.execute("INSERT INTO notes VALUES (%s, 'long id')", (long_id,))
    db.execute("INSERT INTO notes VALUES ('3', NULL)")  # a NULL text is queued; it fails visibly (no content)
    keys = [k for k, _ in _docs(db)]
    assert len(keys) == 3 and "public.notes:3" in keys
    hashed = next(k for k in keys if k.startswith("public.notes:sha256:"))
    db.execute("UPDATE notes SET body = 'long id, new text' WHERE id = %s", (long_id,))
    assert (hashed, "long id, new text") in _docs(db)
    db.execute("DELETE FROM notes WHERE id = %s", (long_id,))
    assert [k for k, _ in _docs(db)] == ["public.notes:1", "public.notes:3"]
    # Re-watching (the backfill) computes the same keys as the trigger.
    db.execute("INSERT INTO notes VALUES (%s, 'long again')", (long_id,))
    assert tables.watch(db, "notes", "id", "body").queued == 3
    assert len(_docs(db)) == 3


def test_the_connectors_own_tables_cannot_be_watched(db: psycopg.Connection, tmp_path: Path, migrated_dsn) -> None:
    for name in ("connector.documents", "connector.chunks"):
        with pytest.raises(tables.WatchError, match="connector's own tables"):
            tables.watch(db, name, "id", "content")
    proc = subprocess.run(
        connector_cmd("watch-table", "connector.documents", "--id", "id", "--text", "content"),
        cwd=tmp_path,
        env={**child_env(tmp_path), "CONNECTOR_DSN": migrated_dsn},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: connector.documents is one of the connector's own tables" in proc.stderr, proc.stderr
    # Attached by hand anyway: the function refuses to recurse, and the insert succeeds (it used to fail with
    # "stack depth limit exceeded").
    db.execute(
        "CREATE TRIGGER by_hand AFTER INSERT ON connector.documents FOR EACH ROW "
        "EXECUTE FUNCTION connector.watch_row('connector.documents', 'id', 'content', '')"
    )
    seen = _warnings(db)
    db.execute("INSERT INTO connector.documents (source_key, content) VALUES ('k', 'text')")
    assert db.execute("SELECT count(*) FROM connector.documents").fetchone()[0] == 1
    assert any("cannot be watched" in w for w in seen), seen


def test_downgrade_restores_the_0003_trigger_and_upgrade_the_hardened_one(migrated_dsn: str) -> None:
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id text, body text)")
        tables.watch(conn, "notes", "id", "body")
        migrate(migrated_dsn, 384, "0004", downgrade=True)
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute("INSERT INTO notes VALUES (NULL, 'x')")
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'documents' AND column_name = 'page_count'"
        ).fetchone() == (0,)
        migrate(migrated_dsn, 384)
        conn.execute("INSERT INTO notes VALUES (NULL, 'x')")


def test_user_metadata_is_never_rewritten_and_pages_have_their_own_column(migrated_dsn: str, tmp_path: Path) -> None:
    pdf = (FIXTURES / "booktabs-p2.pdf").read_bytes()
    rows = {
        "array": (Jsonb([1, 2]), "text/plain", None),
        "object": (Jsonb({"pages": "mine", "lang": "en"}), "text/plain", None),
        "pdf": (Jsonb({"pages": "mine"}), "application/pdf", pdf),
    }
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        for key, (meta, mime, data) in rows.items():
            conn.execute(
                "INSERT INTO connector.documents (source_key, content, content_bytes, mime_type, metadata) "
                "VALUES (%s, %s, %s, %s, %s)",
                (key, None if data else "Some text to chunk. " * 30, data, mime, meta),
            )
    proc = subprocess.run(
        connector_cmd("run", "--once", "--no-watch", "--embedder", "fake"),
        cwd=tmp_path,
        env={**child_env(tmp_path), "CONNECTOR_DSN": migrated_dsn},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(migrated_dsn) as conn:
        got = dict(
            (k, (s, m, p))
            for k, s, m, p in conn.execute("SELECT source_key, status, metadata, page_count FROM connector.documents")
        )
    assert got["array"] == ("done", [1, 2], None)
    assert got["object"] == ("done", {"pages": "mine", "lang": "en"}, None)
    assert got["pdf"][:2] == ("done", {"pages": "mine"}) and got["pdf"][2] >= 1


def _faq_answers() -> list[tuple[str, str]]:
    """(question, answer) pairs of a real FAQ: the rows of an application's table."""
    text = (FIXTURES / "real" / "rdiff-backup-FAQ.adoc").read_text()
    parts = text.split("\n== ")[1:]
    return [(p.split("\n", 1)[0], p.split("\n", 1)[1].strip()) for p in parts]


def _connector(dsn: str, tmp_path: Path, *args: str) -> str:
    proc = subprocess.run(
        connector_cmd(*args),
        cwd=tmp_path,
        env={**child_env(tmp_path), "CONNECTOR_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def _run_once(dsn: str, tmp_path: Path) -> None:
    _connector(dsn, tmp_path, "run", "--once", "--no-watch", "--embedder", "fake")


def test_watched_columns_renamed_are_followed_and_a_deleted_rows_chunks_go(migrated_dsn: str, tmp_path: Path) -> None:
    """Renamed, a watched column read as NULL: an edited row's document failed ("neither content nor
    content_bytes") and, with the id column renamed, a deleted row's document and chunks stayed searchable."""
    faq = _faq_answers()
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE faq (id text PRIMARY KEY, body text, headline text, lang text)")
        for i, (question, answer) in enumerate(faq[:3]):
            conn.execute("INSERT INTO faq VALUES (%s, %s, %s, 'en')", (f"q{i}", answer, question))
    watch = subprocess.run(
        connector_cmd("watch-table", "public.faq", "--id", "id", "--text", "body", "--title", "headline",
                      "--metadata", "lang"),
        cwd=tmp_path, env={**child_env(tmp_path), "CONNECTOR_DSN": migrated_dsn}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert watch.returncode == 0, watch.stderr
    _run_once(migrated_dsn, tmp_path)
    # As after a dump restored into another server: the table's oid is no longer the one watch-table stored. The
    # table is found by its name (it was reported "dropped or re-created", its renamed columns read as NULL).
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("UPDATE connector.watched_tables SET relid = (relid::bigint + 1000000)::oid")
    assert "dropped or re-created" not in _connector(migrated_dsn, tmp_path, "status")

    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        for old, new in [("body", "answer"), ("id", "faq_id"), ("headline", "question"), ("lang", "language")]:
            conn.execute(f"ALTER TABLE faq RENAME COLUMN {old} TO {new}")
        conn.execute("UPDATE faq SET answer = %s WHERE faq_id = 'q0'", (faq[3][1],))
        conn.execute("INSERT INTO faq VALUES ('q9', %s, %s, 'en')", (faq[4][1], faq[4][0]))
        conn.execute("DELETE FROM faq WHERE faq_id = 'q1'")
    _run_once(migrated_dsn, tmp_path)

    with psycopg.connect(migrated_dsn) as conn:
        docs = {
            key: (status, title, metadata, last_error)
            for key, status, title, metadata, last_error in conn.execute(
                "SELECT source_key, status, title, metadata, last_error FROM connector.documents"
            )
        }
        assert set(docs) == {"public.faq:q0", "public.faq:q2", "public.faq:q9"}, docs  # q1's went with its row
        assert {s for s, _, _, _ in docs.values()} == {"done"}, docs
        assert docs["public.faq:q9"][1:3] == (faq[4][0], {"lang": "en"})
        edited = conn.execute(
            "SELECT string_agg(c.text, ' ') FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "WHERE d.source_key = 'public.faq:q0'"
        ).fetchone()[0]
        assert faq[3][1][:200] in edited
        orphans = conn.execute(
            "SELECT count(*) FROM connector.chunks c WHERE NOT EXISTS "
            "(SELECT 1 FROM connector.documents d WHERE d.id = c.document_id)"
        ).fetchone()[0]
        assert orphans == 0


def test_a_watched_table_dropped_and_re_created_is_said_and_its_documents_can_go(
    migrated_dsn: str, tmp_path: Path, start_process
) -> None:
    """Dropped (and re-created) under a running sidecar, a watched table lost its trigger: its documents stayed
    searchable and the new table's rows were never read, and nothing (log, /health, status) said so."""
    faq = _faq_answers()
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE faq (id text PRIMARY KEY, body text)")
        for i, (_, answer) in enumerate(faq[:3]):
            conn.execute("INSERT INTO faq VALUES (%s, %s)", (f"q{i}", answer))
    _connector(migrated_dsn, tmp_path, "watch-table", "public.faq", "--id", "id", "--text", "body")
    _run_once(migrated_dsn, tmp_path)
    assert "dropped or re-created" not in _connector(migrated_dsn, tmp_path, "status")

    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE faq")
        conn.execute("CREATE TABLE faq (id text PRIMARY KEY, body text)")
        conn.execute("INSERT INTO faq VALUES ('q7', %s)", (faq[7][1],))
    said = " ".join(_connector(migrated_dsn, tmp_path, "status").split())
    assert "public.faq dropped or re-created" in said and "watch-table" in said, said
    sidecar = start_process("run", "--no-watch", "--embedder", "fake", CONNECTOR_DSN=migrated_dsn)
    wait_for(lambda: "public.faq dropped or re-created" in output_of(sidecar) or sidecar.poll() is not None,
             timeout=120, what="the sidecar's line about the table")  # fmt: skip
    assert "ERROR" in output_of(sidecar) and sidecar.poll() is None, output_of(sidecar)

    rewatched = _connector(migrated_dsn, tmp_path, "watch-table", "public.faq", "--id", "id", "--text", "body")
    assert "1 existing row(s) queued; 3 document(s) of rows no longer in it removed" in rewatched, rewatched
    assert "dropped or re-created" not in _connector(migrated_dsn, tmp_path, "status")
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        keys = [k for (k,) in conn.execute("SELECT source_key FROM connector.documents")]
        assert keys == ["public.faq:q7"]
        conn.execute("DROP TABLE faq")  # for good this time: its documents go with unwatch-table --purge
    # by its name alone too, as it was watched (the schema's name is no help once the table is gone)
    assert "document(s) removed" in _connector(migrated_dsn, tmp_path, "unwatch-table", "faq", "--purge")
    with psycopg.connect(migrated_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM connector.documents").fetchone() == (0,)
    assert "dropped or re-created" not in _connector(migrated_dsn, tmp_path, "status")
