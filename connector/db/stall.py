"""A statement that hears nothing back for as long as the keepalives take to give up is looked into from a new
connection; a connection found lost is closed, so that its caller reconnects instead of waiting for ever.

TCP keepalives and `tcp_user_timeout` (`database.connection_options`) see a lost path only where the kernel that
answers them is the server's. Behind a userspace proxy (PgBouncer, HAProxy, Envoy, cloud-sql-proxy, toxiproxy) the
proxy's kernel answers: its upstream gone (a failover, a host powered off, a proxy that drops what it should pass),
a worker waited for its statement's answer as long as the proxy kept the client's side open, for ever with some.
Over a unix socket there are no keepalives at all. Every connection of `database.connect` is a `Watched`: its
statements are timed while a command is in flight (never a LISTEN connection waiting for notifications), and one
silent for the keepalives' span (nothing to read, no room to write, and nothing it sent taken by the other end: a
statement still sent over a slow link is not silent) has its server session looked up, from a new connection, by
process id and start:

- running, or waiting for a lock or for I/O: a long statement, left alone (and looked up again a span later);
- idle (the answer was sent and never came), waiting on this client as this client waits on it (`ClientRead`,
  `ClientWrite`), or gone (ended, or the server restarted or failed over): lost;
- a new connection gets no answer either within the keepalives' probes' span: lost;
- a new connection is refused (too many clients, authentication, the server starting up, nothing listening, a proxy
  with no server behind it): nothing is known, the statement is left alone and looked into again a span later.

A lost connection's server session, where it is still there, is ended (its row locks are freed now rather than
after a lease), then this side's socket is shut down and libpq's connection closed: the caller gets an
`OperationalError`, and the connection reads as broken. An answer that arrives in the meantime (the server had just
sent it) saves the connection. Connections through a pooler that hides the server's process id are not watched.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import selectors
import socket
import struct
import termios
from dataclasses import dataclass, field
from datetime import datetime
from time import monotonic
from typing import NoReturn

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.waiting import Wait

from connector.db import queries

log = logging.getLogger(__name__)

IN_FLIGHT_GRACE_S = 1.0
"""How long an answer found on its way (the server's session idle at the look) may take to arrive before the
connection is taken for lost: far more than any path that still carries data needs."""
_LOST_STATES = ("idle", "idle in transaction", "idle in transaction (aborted)")
_WAITING_ON_CLIENT = ("ClientRead", "ClientWrite")


@dataclass(frozen=True)
class Session:
    """Who a connection is on the server, and how to look it up: its process and start (`pg_stat_activity`), the
    silence after which a statement is looked into, and how to open the connection that looks (`None` for that
    connection itself: when its own statement is silent that long, it is simply closed)."""

    pid: int
    started: datetime
    silence_s: float
    probe: Probe | None


@dataclass(frozen=True)
class Probe:
    dsn: str = field(repr=False)  # it may hold a password
    kwargs: dict  # connect options: keepalives, name, and a connect timeout


class Watched(psycopg.Connection):
    """psycopg's connection, its waits timed (see the module's docstring)."""

    session: Session | None = None

    def wait(self, gen, interval=0.1, timeout=None):
        if self.session is None:
            return super().wait(gen, interval, timeout)
        return super().wait(_watched(self, gen, self.session), interval, timeout)


def watch(conn: psycopg.Connection, silence_s: float, probe: Probe | None) -> None:
    """Start watching `conn` (a `Watched`; others are left as they are), once connected: one statement finds its
    server session. Behind a pooler whose process ids are not the server's, it is not watched."""
    if not isinstance(conn, Watched):
        return
    with conn.transaction():
        row = conn.execute(queries.OWN_SESSION).fetchone()
    if row is None or row[0] != conn.info.backend_pid or row[1] is None:
        log.debug("this connection's server session cannot be told apart (a pooler?): its statements are not timed")
        return
    conn.session = Session(row[0], row[1], silence_s, probe)


def _watched(conn: Watched, gen, session: Session):
    """`gen`, psycopg's generator of one operation, passed through; each time the wait wakes with nothing ready
    (every `interval`), the silence is measured. Bytes this side sent that the other end took meanwhile count as
    heard: over a slow link a large statement or COPY waits seconds at a time for room in the socket's buffer, or for
    its answer while the server still reads it (`ClientRead`), and was taken for lost."""
    heard = looked = monotonic()
    unsent = None  # measured on the wakes with nothing ready only: an answer that comes at once costs no system call
    try:
        waiting = gen.send(None)
        while True:
            ready = yield waiting
            now = monotonic()
            if ready:
                heard, unsent = now, None
                waiting = gen.send(ready)
                continue
            before, unsent = unsent, _unsent(conn)
            if unsent is not None and before is not None and unsent < before:
                heard = now
            elif (
                now - max(heard, looked) >= session.silence_s
                and conn.pgconn.transaction_status == TransactionStatus.ACTIVE
            ):
                looked = now
                _look_into(conn, session, waiting, now - heard)
                looked = monotonic()
            waiting = gen.send(ready)
    except StopIteration as ex:
        return ex.value


def _unsent(conn: Watched) -> int | None:
    """How many bytes sent on the connection's socket the other end has not taken yet (Linux: not yet acknowledged
    over TCP, not yet read over a unix socket); None where that cannot be told."""
    try:
        return struct.unpack("i", fcntl.ioctl(conn.pgconn.socket, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, psycopg.Error):
        return None


def _look_into(conn: Watched, session: Session, waiting: Wait, silent_s: float) -> None:
    if session.probe is None:
        _cut(conn, f"a look at the server's sessions heard nothing back for {silent_s:.0f} s")
    try:
        probe = Watched.connect(session.probe.dsn, **session.probe.kwargs, autocommit=True)
    except psycopg.errors.ConnectionTimeout:
        _cut(
            conn,
            f"heard nothing for {silent_s:.0f} s in a statement, and a new connection cannot reach the server either",
        )
    except psycopg.OperationalError:
        # Refused: psycopg gives no SQLSTATE to a failed connection, so a server at its connection limit (the role's,
        # the database's, `max_connections`) cannot be told from one out of reach but by its message; a long statement
        # was cut for a full connection table. Only silence says the path is gone.
        log.debug("a statement silent for %.0f s could not be looked into (a new connection was refused)", silent_s)
        return
    with probe:
        # The look's own statements are bounded: silent for the probe's span, it is closed (`session.probe` None).
        probe.session = Session(probe.info.backend_pid, session.started, session.silence_s, None)
        try:
            row = probe.execute(queries.SESSION_STATE, (session.pid, session.started)).fetchone()
        except psycopg.OperationalError:
            _cut(conn, f"heard nothing for {silent_s:.0f} s in a statement, and a new connection cannot either")
        why = _lost(row)
        if why is None:
            log.debug("a statement silent for %.0f s is still running on the server: left alone", silent_s)
            return
        if _answer_arrives(conn, waiting):
            return
        if row is not None:  # its locks freed now, not when its lease or the server's keepalives run out
            with contextlib.suppress(psycopg.Error):
                probe.execute(queries.END_OWN_SESSION, (session.pid, session.started, row[2]))
    _cut(conn, f"heard nothing for {silent_s:.0f} s in a statement, and {why}")


def _lost(row) -> str | None:
    """Why the server's view of the session says the connection is lost, or None where it is busy."""
    if row is None:
        return "its server session is gone (ended, or the server restarted or failed over)"
    state, wait_event, _ = row
    if state in _LOST_STATES:
        return f"the server is {state}: the statement or its answer was lost on the way"
    if state == "active" and wait_event in _WAITING_ON_CLIENT:
        return f"the server waits for this client ({wait_event}) as this client waits for it"
    return None


def _answer_arrives(conn: Watched, waiting: Wait) -> bool:
    """Whether what this side waits for turns ready within the grace: the server's answer was on its way."""
    # Not `select.select`: it refuses a descriptor past 1023, which a process with many files open hands libpq.
    events = (selectors.EVENT_READ if waiting & Wait.R else 0) | (selectors.EVENT_WRITE if waiting & Wait.W else 0)
    with selectors.DefaultSelector() as selector:
        selector.register(conn.pgconn.socket, events)
        return bool(selector.select(IN_FLIGHT_GRACE_S))


def _cut(conn: Watched, why: str) -> NoReturn:
    """Shut this side's socket down and close libpq's end of the connection, then fail the wait: the caller gets an
    `OperationalError`, the connection reads as broken, and it reconnects as after any outage.

    Left to libpq to notice the end of the stream, a connection shut down while psycopg waited for room to send (a
    large COPY, a large statement) failed its wait with libpq still taking it for open in the middle of a command:
    not `broken`, so a worker took the error for one document's and wrote its batch again one document at a time
    on that connection, every statement refused ("another command is already in progress")."""
    message = f"the database connection is lost: {why}"
    log.warning("%s; closing it (a proxy or network path that lost it)", message)
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)
    conn.pgconn.finish()
    raise psycopg.OperationalError(message)
