"""How a worker is woken: one notification per transaction that queues documents (migration 0016), read without
pause on a connection of its own (`sidecar._Wakeups`), so that a burst never leaves the server's listening backend
holding a snapshot (the database's xmin horizon) while the worker drains."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from connector.settings import NOTIFY_CHANNEL
from connector.sidecar import _Wakeups
from tests.conftest import wait_for

# Distinct payloads, so that Postgres cannot fold them: ~40 bytes each on the wire, over a megabyte in all, several
# times what a local (Unix) socket's buffer holds, where the test server is reached.
FLOOD = f"SELECT count(pg_notify('{NOTIFY_CHANNEL}', g::text)) FROM generate_series(1, 40000) g"


def _backend(conn: psycopg.Connection, pid: int) -> tuple[str | None, str | None]:
    """The state of server process `pid` and the xmin it holds back (None: none)."""
    row = conn.execute("SELECT state, backend_xmin::text FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def test_a_transaction_that_queues_many_rows_sends_one_notification(migrated_dsn: str) -> None:
    with (
        psycopg.connect(migrated_dsn, autocommit=True) as listen,
        psycopg.connect(migrated_dsn, autocommit=True) as conn,
    ):
        listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with conn.transaction():
            conn.execute(
                "INSERT INTO connector.documents (source_key, content) "
                "SELECT 'burst/' || g, 'row ' || g FROM generate_series(1, 500) g"
            )
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('alone', 'one more')")
        got = [(n.channel, n.payload) for n in listen.notifies(timeout=1.5)]
        assert got == [(NOTIFY_CHANNEL, ""), (NOTIFY_CHANNEL, "")]  # one per transaction, not 501
        # A row put back to pending (`connector retry`, a requeue) still wakes the workers.
        conn.execute("UPDATE connector.documents SET status = 'failed' WHERE source_key = 'alone'")
        assert [n.payload for n in listen.notifies(timeout=1.0)] == []
        conn.execute("UPDATE connector.documents SET status = 'pending' WHERE source_key = 'alone'")
        assert [n.payload for n in listen.notifies(timeout=1.5)] == [""]


def test_unread_notifications_hold_the_horizon_and_wakeups_reads_them_at_once(migrated_dsn: str) -> None:
    with (
        psycopg.connect(migrated_dsn, autocommit=True) as watch,
        psycopg.connect(migrated_dsn, autocommit=True) as sender,
        psycopg.connect(migrated_dsn, autocommit=True) as unread,
        psycopg.connect(migrated_dsn, autocommit=True) as read,
    ):
        # The control: a LISTEN connection nobody reads (how a worker's was, while it drained). Its backend sends
        # the notifications from inside a transaction and, its socket full, waits there with its snapshot.
        unread.execute(f"LISTEN {NOTIFY_CHANNEL}")
        sender.execute(FLOOD)
        held = wait_for(lambda: _backend(watch, unread.info.backend_pid)[1], timeout=10, what="the unread backend")
        time.sleep(1.0)
        assert _backend(watch, unread.info.backend_pid)[1] == held, "still holding the same snapshot"

        with _Wakeups(read, "test-listen") as wakeups:
            sender.execute(FLOOD)
            # Nobody calls `wait` meanwhile (a worker draining): its backend is soon idle, holding nothing.
            wait_for(lambda: _backend(watch, read.info.backend_pid) == ("idle", None), what="the reader's backend")
            assert wakeups.wait(0), "the flood woke it"
            wait_for(lambda: not wakeups.wait(0.3), what="every notification read")
            sender.execute(f"NOTIFY {NOTIFY_CHANNEL}")
            assert wakeups.wait(5), "and the next one wakes it again"
            assert not wakeups.wait(0.3)


def test_a_lost_listen_connection_is_raised_to_the_worker_and_its_thread_ends(migrated_dsn: str) -> None:
    before = set(threading.enumerate())
    with (
        psycopg.connect(migrated_dsn, autocommit=True) as admin,
        psycopg.connect(migrated_dsn, autocommit=True) as listen,
        _Wakeups(listen, "test-listen") as wakeups,
    ):
        assert not wakeups.wait(0.2)
        admin.execute("SELECT pg_terminate_backend(%s)", (listen.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            wakeups.wait(10)
    assert set(threading.enumerate()) <= before, "the reader thread is gone"
