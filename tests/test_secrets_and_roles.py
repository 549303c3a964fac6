"""No output carries a secret; every command fails in one line when the database cannot be reached; an owner role
migrates and a runtime role that may only read and write rows runs the sidecar (`--no-migrate`).

Real `connector` processes against the test server; roles are created on it and dropped afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector.db.database import head_revision
from tests.conftest import FIXTURES, REPO, child_env, connector_cmd, output_of, wait_for

README = REPO / "README.md"


def _run(tmp_path: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        connector_cmd(*args),
        cwd=tmp_path,
        env={**child_env(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_one_line_error(proc: subprocess.CompletedProcess, status: int, *, starts: str = "error: ") -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out
    assert "Traceback" not in out and "╭" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(starts), out
    return errors[0]


def _assert_hidden(out: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in out, f"{secret!r} printed:\n{out}"


# (DSN, strings that must never be printed, how the error line starts, exit status)
BAD_DSNS = [
    # bad percent-encoding in the URL's userinfo (the reproduction)
    ("postgresql://app:S3cr3t%ZZpw@127.0.0.1:5/db", ["S3cr3t%ZZpw", "S3cr3t"], "error: invalid DSN", 2),
    # an unencoded '@' in the password: libpq would take 'ssw0rd@127.0.0.1' for the host name and print it
    ("postgresql://app:P@ssw0rd@127.0.0.1:5/db", ["P@ssw0rd", "ssw0rd"], "error: invalid DSN", 2),
    # spaces in an unquoted key=value password: libpq echoes the piece after the space
    ("host=127.0.0.1 port=5 user=app password=Pa55 w0rdz", ["Pa55 w0rdz", "w0rdz"], "error: invalid DSN", 2),
    # a quoted password with spaces, in a DSN malformed elsewhere
    ("host=127.0.0.1 port=5 password='Qu0ted pa55' user", ["Qu0ted pa55", "Qu0ted", "pa55"], "error: invalid DSN", 2),
    # valid but unreachable: percent-encoded '@' and space, and a key=value password
    ("postgresql://app:Enc%40ded%20pw@127.0.0.1:5/db", ["Enc%40ded%20pw", "Enc@ded pw"], "error: cannot connect", 1),
    ("host=127.0.0.1 port=5 user=app password=S3cr3t%ZZpw dbname=db", ["S3cr3t%ZZpw"], "error: cannot connect", 1),
    # the client key's passphrase is a password too, in both forms
    ("host=127.0.0.1 port=5 user=app password=pw1234 sslpassword=KeyPass99", ["pw1234", "KeyPass99"],
     "error: cannot connect", 1),
    ("postgresql://app:Pw1234x@127.0.0.1:5/db?sslpassword=KeyPass99", ["Pw1234x", "KeyPass99"],
     "error: cannot connect", 1),
    # a value libpq refuses only when connecting
    ("postgresql://app:Tm0utPw@127.0.0.1:5/db?connect_timeout=abc", ["Tm0utPw"], "error: invalid DSN", 2),
]  # fmt: skip

COMMANDS = [
    ("status",),
    ("migrate",),
    ("run", "--once", "--no-watch", "--embedder", "fake"),
    ("ingest", "--embedder", "fake", "doc.txt"),
]


@pytest.mark.parametrize(
    ("dsn", "secrets", "starts", "status"), BAD_DSNS, ids=[f"dsn{i}" for i in range(len(BAD_DSNS))]
)
def test_no_command_prints_a_password_of_a_bad_or_unreachable_dsn(
    tmp_path: Path, dsn: str, secrets: list[str], starts: str, status: int
) -> None:
    (tmp_path / "doc.txt").write_text("Some text.\n")
    runs = [(args, {"CONNECTOR_DSN": dsn}) for args in COMMANDS] + [(("status", "--dsn", dsn), {})]
    for args, env in runs:
        proc = _run(tmp_path, *args, **env)
        line = _assert_one_line_error(proc, status, starts=starts)
        _assert_hidden(proc.stdout + proc.stderr, secrets)
        assert "***" in line or "cannot connect" in line, line


def test_every_command_gives_one_line_when_the_database_is_down(tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("Some text.\n")
    down = "postgresql://app:D0wnPw@127.0.0.1:5/db"
    for args in (
        *COMMANDS,
        ("retry", "--failed"),
        ("watch-table", "app.t", "--id", "id", "--text", "body"),
        ("report",),
        ("explain", "1"),
    ):
        proc = _run(tmp_path, *args, CONNECTOR_DSN=down)
        line = _assert_one_line_error(proc, 1, starts="error: cannot connect to user=app dbname=db host=127.0.0.1")
        assert "Connection refused" in line
        _assert_hidden(proc.stdout + proc.stderr, ["D0wnPw"])


@pytest.fixture
def password_role(pg_admin_dsn: str, dsn: str):
    """A role with a password that the server really checks: the embedded server trusts local connections, so a
    scram-sha-256 line for this role alone goes first in its pg_hba.conf (restored afterwards)."""
    role, password = f"pw_{uuid.uuid4().hex[:8]}", f"R1ght-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        if not (hba.exists() and os.access(hba, os.W_OK)):
            pytest.skip("the test server's pg_hba.conf is not writable here: cannot make it check passwords")
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        original = hba.read_text()
        hba.write_text(f"local all {role} scram-sha-256\nhost all {role} all scram-sha-256\n{original}")
        conn.execute("SELECT pg_reload_conf()")
    wrong = make_conninfo(dsn, user=role, password="Wr0ng-Pa55word")

    def rejected() -> bool:
        try:
            psycopg.connect(wrong).close()
        except psycopg.OperationalError as exc:
            return "password authentication failed" in str(exc)
        return False

    try:
        wait_for(rejected, timeout=10, what="the server to check passwords")
        yield role, password
    finally:
        hba.write_text(original)
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_wrong_password_is_one_line_and_never_printed(tmp_path: Path, dsn: str, password_role) -> None:
    role, _ = password_role
    (tmp_path / "doc.txt").write_text("Some text.\n")
    params = conninfo_to_dict(dsn)
    url = f"postgresql://{role}:Wr0ng-Pa55word@/{params['dbname']}?host={params['host']}"
    pairs = make_conninfo(dsn, user=role, password="Wr0ng-Pa55word")
    every = (*COMMANDS, ("retry", "--failed"), ("watch-table", "t", "--id", "id", "--text", "body"))
    for wrong, commands in ((pairs, every), (url, [("status",)])):
        for args in commands:
            proc = _run(tmp_path, *args, CONNECTOR_DSN=wrong)
            line = _assert_one_line_error(proc, 1, starts="error: cannot connect to ")
            assert "password authentication failed" in line, line
            _assert_hidden(proc.stdout + proc.stderr, ["Wr0ng-Pa55word"])


SCRIPT = textwrap.dedent(
    """
    import logging, sys, threading
    from connector.cli import _logging, _settings, app

    @app.command("boom")
    def boom(where: str) -> None:
        _logging(False)
        settings = _settings()
        dsn, key = settings.dsn.get_secret_value(), settings.chunking.llm.api_key.get_secret_value()
        logging.getLogger("connector.test").warning("connecting to %s with key %s", dsn, key)
        try:
            raise ValueError(f"inner {dsn}")
        except ValueError:
            logging.getLogger("connector.test").exception("failed with %r", key)
        if where == "thread":

            def fail() -> None:
                raise RuntimeError(f"thread {dsn} {key}")

            thread = threading.Thread(target=fail)
            thread.start()
            thread.join()
            return
        raise RuntimeError(f"uncaught: could not use {dsn} (key {key})")

    app(prog_name="connector")
    """
)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_log_records_and_uncaught_tracebacks_are_scrubbed(tmp_path: Path, log_format: str) -> None:
    env = {
        **child_env(tmp_path),
        "CONNECTOR_DSN": "postgresql://app:Tr4ce%ZZback@127.0.0.1:5/db",
        "CONNECTOR_LLM_API_KEY": "sk-Th1s1sAK3y",
        "CONNECTOR_LOG_FORMAT": log_format,
    }
    for where in ("main", "thread"):
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, "boom", where], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        out = proc.stdout + proc.stderr
        assert "connecting to postgresql://app:***@127.0.0.1:5/db with key ***" in out, out
        assert ("uncaught: could not use" if where == "main" else "thread postgresql://app:***@") in out, out
        assert "inner postgresql://app:***@" in out, out  # the logged exception's traceback
        _assert_hidden(out, ["Tr4ce", "Th1s1sAK3y"])


# Least privilege: the README's snippet, pasted as it is.


def _readme_sql(after: str) -> str:
    text = README.read_text()
    start = text.index(after)
    return re.search(r"```sql\n(.*?)```", text[start:], re.DOTALL).group(1)


@pytest.fixture
def readme_roles(pg_admin_dsn: str, dsn: str):
    """The README's roles (connector_owner, connector_app) in the test database, made by its snippet verbatim."""
    roles = ("connector_owner", "connector_app")

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for role in roles:
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            for role in roles:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))

    drop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_readme_sql("### Roles"))
        assert not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = 'connector_owner'").fetchone()[0]
    try:
        yield make_conninfo(dsn, user="connector_owner"), make_conninfo(dsn, user="connector_app")
    finally:
        drop()


def _queue_row(dsn: str, key: str, text: str = "A runtime role processes this row. ") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "INSERT INTO connector.documents (source_key, content) VALUES (%s, %s) RETURNING id",
            (key, text * 20),
        ).fetchone()[0]


def _status(dsn: str, doc: int) -> tuple:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, last_error, (SELECT count(*) FROM connector.chunks WHERE document_id = d.id) "
            "FROM connector.documents d WHERE id = %s",
            (doc,),
        ).fetchone()


def test_a_runtime_role_runs_the_sidecar_and_an_owner_migrates(tmp_path: Path, dsn: str, readme_roles) -> None:
    owner, app = readme_roles
    fake = ("--embedder", "fake")
    # Before any migration: the runtime role is told what to run, in one line, with or without --no-migrate.
    proc = _run(tmp_path, "run", "--once", "--no-watch", "--no-migrate", *fake, CONNECTOR_DSN=app)
    line = _assert_one_line_error(proc, 2)
    assert "never migrated" in line and "`connector migrate`" in line and "owns the connector schema" in line
    proc = _run(tmp_path, "run", "--once", "--no-watch", *fake, CONNECTOR_DSN=app)
    line = _assert_one_line_error(proc, 2, starts="error: this role may not migrate")
    assert "run `connector migrate` as the role that owns the connector schema" in line, line

    # The owner (no superuser, no CREATE on the database) migrates, part of the way first.
    proc = _run(tmp_path, "migrate", "--revision", "0003", CONNECTOR_DSN=owner)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = _run(tmp_path, "run", "--once", "--no-watch", "--no-migrate", *fake, CONNECTOR_DSN=app)
    line = _assert_one_line_error(proc, 2)
    assert f"at schema revision 0003, this connector needs {head_revision()}" in line, line
    proc = _run(tmp_path, "ingest", "--no-migrate", *fake, str(tmp_path), CONNECTOR_DSN=app)
    assert "at schema revision 0003" in _assert_one_line_error(proc, 2)
    proc = _run(tmp_path, "migrate", CONNECTOR_DSN=owner)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The runtime role: a row inserted with SQL is processed end to end, with --no-migrate and without.
    for flags in (("--no-migrate",), ()):
        doc = _queue_row(app, f"runtime-{len(flags)}")
        proc = _run(tmp_path, "run", "--once", "--no-watch", *flags, *fake, CONNECTOR_DSN=app)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        status, error, chunks = _status(owner, doc)
        assert (status, error) == ("done", None) and chunks > 0, (status, error, proc.stderr)
    proc = _run(tmp_path, "status", CONNECTOR_DSN=app)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Watching a table installs triggers: the owner's work. The runtime role is told so in one line (it was a
    # traceback of psycopg's InsufficientPrivilege).
    with psycopg.connect(dsn, autocommit=True) as conn:  # an application's table
        conn.execute("CREATE TABLE app_notes (id int PRIMARY KEY, body text)")
    proc = _run(tmp_path, "watch-table", "app_notes", "--id", "id", "--text", "body", CONNECTOR_DSN=app)
    line = _assert_one_line_error(proc, 2, starts="error: permission denied")
    assert "this database role may not do that (README: Roles" in line, line

    # The runtime role may not create an index on the owner's table, yet the chunks' HNSW index is built once the
    # table is large enough (migration 0015's SECURITY DEFINER function), here at 1 chunk; owned by the owner.
    index = "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass('connector.chunks_embedding_hnsw')"
    with psycopg.connect(app, autocommit=True) as conn:
        assert conn.execute(index).fetchone() is None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE INDEX ON connector.chunks (strategy)")
    proc = _run(tmp_path, "run", "--once", "--no-watch", "--no-migrate", *fake, CONNECTOR_DSN=app,
                CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS="1")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with psycopg.connect(app, autocommit=True) as conn:
        assert conn.execute(index).fetchone() == ("connector_owner",), proc.stderr


def test_a_read_only_runtime_role_is_told_which_grants_are_missing(tmp_path: Path, dsn: str, readme_roles) -> None:
    """A runtime role that may only read (or lost its write grants): the sidecar started, then each worker died
    on its first claim with a traceback and `permission denied for table documents`, naming neither the
    privilege nor the grant. It now stops before starting, in one line saying what is missing and what to run."""
    owner, app = readme_roles
    proc = _run(tmp_path, "migrate", CONNECTOR_DSN=owner)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = ("run", "--once", "--no-watch", "--no-migrate", "--embedder", "fake")
    first = _queue_row(owner, "while-it-could-write")  # the embedding model is recorded: the start checks pass
    assert _run(tmp_path, *args, CONNECTOR_DSN=app).returncode == 0 and _status(owner, first)[0] == "done"
    doc = _queue_row(owner, "read-only")
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA connector FROM connector_app")
    line = _assert_one_line_error(_run(tmp_path, *args, CONNECTOR_DSN=app), 2, starts="error: role connector_app")
    assert "lacks INSERT on" in line and "connector.documents" in line and "UPDATE on" in line, line
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA connector TO connector_app" in line, line
    assert _status(owner, doc)[0] == "pending", "nothing was claimed"

    with psycopg.connect(owner, autocommit=True) as conn:  # the grant the message names
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA connector TO connector_app")
    # An administrator's table in the schema that the sidecar never touches (a backup made by another role, which
    # the owner's GRANT could not even fix) does not keep it from starting.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE connector.documents_backup AS SELECT id FROM connector.documents")
    try:
        proc = _run(tmp_path, *args, CONNECTOR_DSN=app)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _status(owner, doc)[0] == "done"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE connector.documents_backup")
    # Without the schema's USAGE every statement fails though each table's grants are there: it says so.
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE USAGE ON SCHEMA connector FROM connector_app")
    try:
        line = _assert_one_line_error(_run(tmp_path, *args, CONNECTOR_DSN=app), 2, starts="error:")
        assert "GRANT USAGE ON SCHEMA connector TO connector_app" in line, line
    finally:
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("GRANT USAGE ON SCHEMA connector TO connector_app")


def _health(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # degraded answers 503
        return json.loads(exc.read())
    except OSError:
        return {}


def _degraded_by(port: int, privilege: str) -> bool:
    health = _health(port)
    return health.get("status") == "degraded" and any(f"lacks {privilege} on" in p for p in health["problems"])


def test_a_grant_revoked_while_running_is_waited_for_and_costs_no_try(
    tmp_path: Path, dsn: str, readme_roles, start_process
) -> None:
    """INSERT revoked under a running sidecar: the watcher logged a traceback per file, /health said ok, and the file
    waited for the periodic rescan (300 s; never, here). UPDATE revoked: the sidecar died with a traceback (exit 2).
    Now either is one line naming the privilege and the grant, /health is degraded while it lasts, nothing is charged
    a try, and the files and rows go through once the grant is back."""
    owner, app = readme_roles
    assert _run(tmp_path, "migrate", CONNECTOR_DSN=owner).returncode == 0
    first = _queue_row(owner, "records-the-model")  # the embedding model is recorded: the start checks pass
    assert _run(tmp_path, "run", "--once", "--no-watch", "--embedder", "fake", CONNECTOR_DSN=app).returncode == 0
    assert _status(owner, first)[0] == "done"
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    inbox = tmp_path / "inbox"
    proc = start_process("run", "--no-migrate", "--embedder", "fake", CONNECTOR_DSN=app,
                         CONNECTOR_WATCH_DIR=str(inbox), CONNECTOR_HTTP_PORT=str(port),
                         CONNECTOR_RESCAN_SECONDS="3600", CONNECTOR_SETTLE_SECONDS="0.3")  # fmt: skip
    wait_for(lambda: _health(port).get("status") == "ok", timeout=60, what="the sidecar up")
    grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA connector TO connector_app"

    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE INSERT ON ALL TABLES IN SCHEMA connector FROM connector_app")
    shutil.copy(FIXTURES / "real" / "asciidoctor-syntax.adoc", inbox / "syntax.adoc")
    wait_for(lambda: _degraded_by(port, "INSERT"), timeout=60, what="/health degraded, naming INSERT")
    assert grant in " ".join(_health(port)["problems"])
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("GRANT INSERT ON ALL TABLES IN SCHEMA connector TO connector_app")
    key = "SELECT status, retries FROM connector.documents WHERE source_key = %s"

    def state(source_key: str) -> tuple | None:
        with psycopg.connect(owner, autocommit=True) as conn:
            return conn.execute(key, (source_key,)).fetchone()

    wait_for(lambda: state("syntax.adoc") == ("done", 0), timeout=90, what="the file queued once INSERT is back")
    wait_for(lambda: _health(port).get("status") == "ok", timeout=60, what="/health ok again")

    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE UPDATE ON ALL TABLES IN SCHEMA connector FROM connector_app")
    row = _queue_row(owner, "while-update-is-revoked")
    wait_for(lambda: _degraded_by(port, "UPDATE"), timeout=60, what="/health degraded, naming UPDATE")
    assert proc.poll() is None, output_of(proc)
    assert state("while-update-is-revoked") == ("pending", 0)
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(grant)
    wait_for(lambda: _status(owner, row)[0] == "done", timeout=90, what="the row written once UPDATE is back")
    assert state("while-update-is-revoked") == ("done", 0)
    wait_for(lambda: _health(port).get("status") == "ok", timeout=60, what="/health ok again")

    # The embedding cache's table alone: it was taken for an outage (skipped a minute at a time, the document
    # written without it, /health ok), so a grant revoked there was never seen. It is a missing grant like any other.
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE INSERT ON connector.embedding_cache FROM connector_app")
    row = _queue_row(owner, "while-the-cache-is-read-only", "Text the cache has not seen yet. ")
    wait_for(lambda: _degraded_by(port, "INSERT"), timeout=60, what="/health degraded, naming INSERT on the cache")
    assert any("embedding_cache" in p for p in _health(port)["problems"]), _health(port)
    assert state("while-the-cache-is-read-only") == ("pending", 0)
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(grant)
    wait_for(lambda: _status(owner, row)[0] == "done", timeout=90, what="the row written, the grant back")
    assert state("while-the-cache-is-read-only") == ("done", 0)
    out = output_of(proc)
    assert "Traceback" not in out and "could not queue" not in out, out
    errors = [line for line in out.splitlines() if " ERROR " in line]
    assert errors and all("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES" in line for line in errors), out
