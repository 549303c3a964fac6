"""The test suite's own database backends, as the README promises them."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg

from tests import pgbackends
from tests.conftest import REPO


def run_suite_part(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_TEST_")}
    # the metrics model this session built: a child session need not distil its own (half a minute each)
    clean["CONNECTOR_TEST_MODELS_DIR"] = os.environ["CONNECTOR_MODELS_DIR"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_migrations.py"],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_docker_backend_fails_fast_with_a_clear_message_or_really_serves_pgvector() -> None:
    try:
        dsn, stop = pgbackends.start_docker()
    except pgbackends.BackendUnavailable as exc:
        message = str(exc)
        assert "needs a reachable Docker engine" in message and "CONNECTOR_TEST_DSN" in message
        result = run_suite_part({"CONNECTOR_TEST_BACKEND": "docker"})
        assert result.returncode == 3, result.stdout + result.stderr
        assert "needs a reachable Docker engine" in result.stdout + result.stderr
        return
    try:  # an engine is reachable here: the container must really serve pgvector
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        stop()


def test_an_external_server_given_by_dsn_is_used_as_is(pg_admin_dsn: str, tmp_path) -> None:
    result = run_suite_part({"CONNECTOR_TEST_DSN": pg_admin_dsn})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout
    # And it really is that server: one that does not exist makes the same tests error out.
    missing = run_suite_part({"CONNECTOR_TEST_DSN": f"host={tmp_path} dbname=postgres user=postgres"})
    assert missing.returncode != 0 and str(tmp_path) in missing.stdout
