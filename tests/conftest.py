"""Shared fixtures: one real Postgres+pgvector per test session, a fresh database per test."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from connector.db.database import migrate
from connector.settings import Settings
from tests import pgbackends

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One static metrics model per test session (built once, ~15 s), shared by every Settings and child process
    through CONNECTOR_MODELS_DIR; a temporary folder, never the user's ./.connector."""
    from connector.metrics.vectors import static_model_path

    # CONNECTOR_TEST_MODELS_DIR: a folder kept between local runs (built there on first use)
    path = Path(os.environ.get("CONNECTOR_TEST_MODELS_DIR") or tmp_path_factory.mktemp("models"))
    static_model_path(path)  # built here, once: no test's time budget pays for it
    previous = os.environ.get("CONNECTOR_MODELS_DIR")
    os.environ["CONNECTOR_MODELS_DIR"] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop("CONNECTOR_MODELS_DIR", None)
        else:
            os.environ["CONNECTOR_MODELS_DIR"] = previous


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    try:
        dsn, stop = pgbackends.start()
    except pgbackends.BackendUnavailable as exc:
        pytest.exit(str(exc), returncode=3)
    try:
        yield dsn
    finally:
        stop()


@pytest.fixture
def dsn(pg_admin_dsn: str) -> Iterator[str]:
    """An empty database of its own for each test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(pg_admin_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def migrated_dsn(dsn: str) -> str:
    migrate(dsn, 384)
    return dsn


@pytest.fixture
def settings(migrated_dsn: str, tmp_path: Path) -> Settings:
    return Settings(
        dsn=migrated_dsn,
        data_dir=tmp_path / "state",
        watch_dir=tmp_path / "inbox",
        embedder="fake",
        settle_seconds=0.3,
        poll_interval=0.5,
    )


@pytest.fixture
def db(migrated_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        yield conn


def connector_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "connector", *args]


def child_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a child `connector` process: never the user's ./.connector, never the network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    env.update(CONNECTOR_DATA_DIR=str(tmp_path / "state"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if "CONNECTOR_MODELS_DIR" in os.environ:
        env["CONNECTOR_MODELS_DIR"] = os.environ["CONNECTOR_MODELS_DIR"]
    return env


@pytest.fixture
def start_process(tmp_path: Path):
    """Start `connector ...` as a child process; every one is stopped (and reaped) when the test ends."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, **env: str) -> subprocess.Popen:
        log = open(tmp_path / f"proc-{len(procs)}.log", "w+")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            connector_cmd(*args), cwd=tmp_path, env={**child_env(tmp_path), **env}, stdout=log, stderr=log
        )
        proc.log = log  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.log.close()  # type: ignore[attr-defined]


def output_of(proc: subprocess.Popen) -> str:
    proc.log.flush()  # type: ignore[attr-defined]
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read()  # type: ignore[attr-defined]


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def work(fn: Callable[[], object]) -> int:
    """How much Python `fn()` runs, counted rather than timed: the lines and calls the tracer sees, in this thread.
    The same input gives the same count on any machine however loaded, so a test can run n and 2n items and assert
    the count about doubles, where a quadratic step (work per item that grows with the items before it) makes it
    about four times. Work inside C code (a regular expression's backtracking) is not seen: see
    `test_convert_hostile`."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def assert_linear(convert_n: Callable[[int], object], n: int, what: str) -> None:
    """`convert_n(2 * n)` does about twice the work of `convert_n(n)` (see `work`): measured 1.99-2.07 times on
    linear code; a step quadratic in the items made it 2.7-3.1 times at these sizes, and more the larger they are."""
    convert_n(2)  # imports, caches and compiled patterns are not counted against the first size
    small, large = work(lambda: convert_n(n)), work(lambda: convert_n(2 * n))
    assert large < 2.3 * small, f"{what}: {2 * n} items took {large / small:.2f} times the work of {n}"


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves threads running (watchdog's lesson: leaks hide in long-running services)."""
    # tqdm's monitor is a process-wide singleton started by the first progress bar any library draws.
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive() and t.name != "tqdm_monitor"]
        if not leaked:
            return
        time.sleep(0.1)
    pytest.fail(f"test leaked threads: {leaked}")


# --- the web UI's browser -----------------------------------------------------------------------------------------
# Debian's chromium driven by Playwright (never a browser downloaded at run time). CI installs it and sets
# CONNECTOR_TEST_REQUIRE_BROWSER=1, so that a missing browser fails there; elsewhere the browser tests are not run,
# and the run says so in one line at the end.


NO_BROWSER = "no chromium: apt-get install chromium"


def chromium_path() -> str | None:
    import shutil

    return os.environ.get("CONNECTOR_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is not None and not os.access(path, os.X_OK):
        pytest.fail(f"CONNECTOR_TEST_CHROMIUM={path} is not an executable")
    if path is None:
        if os.environ.get("CONNECTOR_TEST_REQUIRE_BROWSER"):
            pytest.fail("no chromium found (CONNECTOR_TEST_REQUIRE_BROWSER is set): apt-get install chromium")
        pytest.skip(NO_BROWSER)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        chromium = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.hookimpl(trylast=True)  # after pytest's own summary: the run's last line but one
def pytest_terminal_summary(terminalreporter) -> None:
    not_run = [r for r in terminalreporter.stats.get("skipped", []) if NO_BROWSER in str(r.longrepr)]
    if not_run:
        terminalreporter.write_line(
            f"web UI: {len(not_run)} browser test(s) NOT RUN: no chromium on this machine "
            "(apt-get install chromium, or CONNECTOR_TEST_CHROMIUM=/path/to/chromium)",
            yellow=True,
            bold=True,
        )
