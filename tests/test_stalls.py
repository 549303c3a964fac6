"""A connection behind a proxy that stops passing bytes on (`tests.pgproxy`): the proxy's kernel answers keepalives,
so only a look from a new connection tells a lost statement from a long one (`connector.db.stall`)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector.db.database import connect
from tests.conftest import output_of, wait_for
from tests.pgproxy import Proxy
from tests.test_faults import FAST, _counts, _insert_rows

# A silence of 2 s is looked into (the keepalives' span: idle + interval * count); a look connects within 2 s.
QUICK = {"keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "1"}


@pytest.fixture
def proxy(migrated_dsn):
    folder = Path(tempfile.mkdtemp(prefix="pgstall-"))  # short: a unix socket's path is limited to 107 bytes
    proxy = Proxy(migrated_dsn, folder, **QUICK, connect_timeout="3")
    yield proxy
    proxy.stop()
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _at_most(conn: psycopg.Connection, seconds: float):
    """The test's own bound on what it waits for: past `seconds`, `conn`'s socket is shut down (as `stall` does),
    so that a statement left waiting fails the test rather than hanging it; says whether that was needed."""
    fired = threading.Event()

    def cut() -> None:
        fired.set()
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, cut)
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
        timer.join()


def _sessions(dsn: str, pid: int) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]


def test_a_long_statement_is_left_alone_and_a_lost_one_closed(proxy, migrated_dsn, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="connector.db.stall")
    with connect(proxy.dsn, autocommit=True) as conn:
        assert conn.session is not None and conn.session.silence_s == 2
        conn.execute("SELECT pg_sleep(5)")  # silent for 5 s, looked into twice, running each time
        assert "still running on the server: left alone" in caplog.text
        assert "connection is lost" not in caplog.text
        pid = conn.info.backend_pid
        proxy.hold(existing=True, new=False)  # the existing connection's path is dead; a new one gets through
        with _at_most(conn, 30) as waited_too_long, pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        assert not waited_too_long.is_set() and conn.broken
    assert "connection is lost: heard nothing for 2 s in a statement, and the server is idle" in caplog.text
    # Its server session, still there behind the proxy, was ended (its locks freed), not left for the keepalives.
    wait_for(lambda: _sessions(migrated_dsn, pid) == 0, timeout=10, what="the lost session ended on the server")


def test_nothing_gets_through_at_all(proxy, caplog) -> None:
    """The proxy passes nothing on, new connections included, and throws away what it is sent (as toxiproxy's
    `timeout` toxic): the look cannot connect either."""
    with connect(proxy.dsn, autocommit=True) as conn:
        proxy.hold(existing=True, new=True, drop=True)
        with _at_most(conn, 30) as waited_too_long, pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        assert not waited_too_long.is_set()
    assert "a new connection cannot reach the server either" in caplog.text


def test_a_long_statement_is_left_alone_when_the_server_refuses_the_look(migrated_dsn, caplog) -> None:
    """A role whose connection limit its own connections fill (as a server at `max_connections`): the server refuses
    the look's connection, so the path to it works and nothing is known of the statement. It was cut before (a
    refusal was taken for a server out of reach), and a long statement failed for a full connection table."""
    caplog.set_level(logging.DEBUG, logger="connector.db.stall")
    role = f"stall_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(migrated_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 1").format(sql.Identifier(role)))
    try:
        with connect(make_conninfo(migrated_dsn, user=role, **QUICK), autocommit=True) as conn:
            assert conn.session is not None
            with _at_most(conn, 30) as waited_too_long:
                assert conn.execute("SELECT pg_sleep(5), 1").fetchone()[1] == 1  # looked into twice, refused
            assert not waited_too_long.is_set()
        assert "could not be looked into" in caplog.text and "connection is lost" not in caplog.text
    finally:
        with psycopg.connect(migrated_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_lost_connection_whose_socket_is_numbered_past_1023_is_closed(proxy) -> None:
    """A process with many files open (an HTTP server's clients, a watched folder's files): `select()` cannot take a
    descriptor past 1023, and the look raised ValueError into the statement instead of closing the connection."""
    fillers = []
    try:
        while len(fillers) < 1100:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        with connect(proxy.dsn, autocommit=True) as conn:
            assert conn.pgconn.socket > 1023
            proxy.hold(existing=True, new=False)
            with _at_most(conn, 30) as waited_too_long, pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
            assert not waited_too_long.is_set() and conn.broken
    finally:
        for fd in fillers:
            os.close(fd)


def test_a_listening_connection_waiting_for_notifications_is_not_looked_into(proxy, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="connector.db.stall")
    with connect(proxy.dsn, autocommit=True) as conn:
        conn.execute("LISTEN connector_test")
        assert list(conn.notifies(timeout=5)) == []  # 5 s with nothing in flight: nothing to look into
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert "stall" not in caplog.text and "lost" not in caplog.text


def _sidecar_mid_run(dsn: str, proxy: Proxy, start_process):
    """A sidecar on 300 queued rows through `proxy`, once 20 of them are done."""
    _insert_rows(dsn, 300)
    env = {**FAST, "CONNECTOR_BATCH_SIZE": "8", "CONNECTOR_LEASE_SECONDS": "10"}
    proc = start_process("run", "--no-watch", "--dsn", proxy.dsn, "--embedder", "fake", **env)
    with psycopg.connect(dsn, autocommit=True) as watch:
        done = "SELECT count(*) >= 20 FROM connector.documents WHERE status = 'done'"
        wait_for(lambda: watch.execute(done).fetchone()[0], timeout=120, interval=0.02, what="20 documents done")
    return proc


def test_a_sidecar_whose_proxy_loses_its_connections_carries_on(proxy, migrated_dsn, start_process) -> None:
    """A failover behind a proxy: the connections the proxy had stop passing anything, for good, while new ones get
    through. Before, the sidecar's workers waited in their statements for ever, and no document was done again."""
    dsn = migrated_dsn
    proc = _sidecar_mid_run(dsn, proxy, start_process)
    proxy.hold(existing=True, new=False)
    assert _counts(dsn).get("done", 0) < 300, "the hold must land mid-run for this test to mean anything"
    wait_for(lambda: _counts(dsn) == {"done": 300}, timeout=180, what="every document done")
    assert "the database connection is lost" in output_of(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, output_of(proc)


def test_a_sidecar_behind_a_proxy_that_drops_everything_for_a_while(proxy, migrated_dsn, start_process) -> None:
    """Everything the proxy is sent for 12 s is thrown away, then it passes bytes again: the connections that were
    waiting then never get their answer (it was dropped), and waited for ever before."""
    dsn = migrated_dsn
    proc = _sidecar_mid_run(dsn, proxy, start_process)
    proxy.hold(existing=True, new=True, drop=True)
    assert _counts(dsn).get("done", 0) < 300, "the hold must land mid-run for this test to mean anything"
    release = threading.Timer(12, proxy.release)
    release.start()
    try:
        wait_for(lambda: _counts(dsn) == {"done": 300}, timeout=240, what="every document done")
    finally:
        release.cancel()
        release.join()
    assert "the database connection is lost" in output_of(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, output_of(proc)


def test_the_look_goes_to_the_host_the_connection_reached(migrated_dsn) -> None:
    """With several hosts in the DSN, a look at whichever answered first could land on another server, find no such
    session there and take a healthy statement for lost: it goes to the host this connection reached."""
    params = conninfo_to_dict(migrated_dsn)
    nowhere = tempfile.mkdtemp(prefix="pgnone-")  # no server listens there: libpq goes on to the next host
    try:
        port = params.get("port", "5432")
        dsn = make_conninfo(migrated_dsn, host=f"{nowhere},{params['host']}", port=f"{port},{port}")
        with connect(dsn, autocommit=True) as conn:
            assert conn.info.host == params["host"]
            assert conn.session is not None and conn.session.probe is not None
            assert conn.session.probe.kwargs["host"] == params["host"]
            assert conn.session.probe.kwargs["port"] == port
    finally:
        shutil.rmtree(nowhere, ignore_errors=True)


@pytest.mark.parametrize("size", [100_000, 300_000], ids=["in-the-buffers", "filling-them"])
def test_a_statement_sent_over_a_slow_link_is_left_alone(proxy, caplog, size) -> None:
    """A link that carries 20 kB a second: a statement of 100 kB waits for its answer while the server still reads
    it, one of 300 kB waits seconds at a time for room in its socket's buffer; either way the server waits for the
    rest of it (`ClientRead`). Before, that was taken for a connection lost both ways: ended 3 s into it, the
    batch's COPY of a worker over such a link the same (measured: batches of 128 documents over a 20 kB/s
    link cut 3 times, 344 of 400 documents tried twice)."""
    caplog.set_level(logging.DEBUG, logger="connector.db.stall")
    with connect(proxy.dsn, autocommit=True) as conn:
        proxy.throttle(up=20_000)
        with _at_most(conn, 60) as waited_too_long:
            assert conn.execute("SELECT length(%s)", ("x" * size,)).fetchone() == (size,)
        assert not waited_too_long.is_set()
    assert "connection is lost" not in caplog.text


def test_a_connection_lost_in_the_middle_of_a_large_copy_reads_as_broken(proxy, caplog) -> None:
    """The proxy stops passing the client's bytes on in the middle of a COPY too large for the sockets' buffers. The
    connection was closed while psycopg waited for room to send, and its wait failed ("connection socket closed")
    with libpq still taking the connection for open, in the middle of a command (3 times in 4, over a unix socket):
    `broken` false, so a worker took it for one document's failure, wrote its batch again one document at a time on
    the same connection, every statement refused ("another command is already in progress": measured, a batch of
    128 documents, 132 warnings and that sentence 17,427 times in the log). Three COPYs, each on a new connection."""
    for _ in range(3):
        with connect(proxy.dsn, autocommit=True) as conn:
            conn.execute("CREATE TEMP TABLE t (x text)")
            with (
                _at_most(conn, 30) as waited_too_long,
                pytest.raises(psycopg.OperationalError),  # noqa: PT012
                conn.cursor().copy("COPY t FROM STDIN") as copy,
            ):
                for i in range(2000):
                    if i == 100:
                        proxy.hold(existing=True, new=False, direction="up")
                    copy.write_row(["x" * 1000])
            assert not waited_too_long.is_set()
            assert conn.broken, "a lost connection that reads as open, in the middle of a command"
        proxy.release()
    assert "connection is lost" in caplog.text
