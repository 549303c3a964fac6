"""The HTTP server's connections: one small psycopg pool, opened on the first request, shared by the searches and
the web UI's pages. Every failure to get or keep a connection becomes `DatabaseUnavailable` (answered 503). Blocking:
use it from a worker thread."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from connector.db import stall
from connector.db.database import check_dsn, configure_session, connect, connection_options
from connector.errors import TransientError
from connector.secrets import one_line

POOL_SIZE = 4
"""Connections the requests share (at most this many run at once; the others wait for one)."""

WAIT_SECONDS = 3.0
"""How long a request waits for a connection (a new one, or a free one) before answering 503."""

STATEMENT_TIMEOUT_MS = 30_000
"""A query running longer is cancelled (and answered 500 with Postgres's reason), so that a pathological query
cannot hold one of the pool's connections for good."""


class DatabaseUnavailable(Exception):
    """No connection to the database, or it was lost during the request (answered 503, with this message)."""


class DatabasePool:
    def __init__(self, dsn: str):
        check_dsn(dsn)  # as `connect()` does: a DSN libpq would misread never reaches it
        self.dsn = dsn
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection (pgvector's types registered) for the duration of the block."""
        pool = self._opened()
        try:
            with pool.connection(timeout=WAIT_SECONDS) as conn:
                yield conn
        except PoolTimeout:  # (an OperationalError too) the pool could not connect in time, or is all in use
            raise DatabaseUnavailable(self._why_no_connection()) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # lost during the request
            raise DatabaseUnavailable(f"database unreachable: {one_line(str(exc))}") from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5)

    def _opened(self) -> ConnectionPool:
        with self._lock:
            if self._closed:
                raise DatabaseUnavailable("the server is stopping")
            if self._pool is None:
                # As every connection of the sidecar: keepalives, a TCP user timeout, named `connector`.
                kwargs: dict = {**connection_options(self.dsn), "autocommit": True}
                if "connect_timeout" not in conninfo_to_dict(self.dsn):  # never a pool thread stuck connecting
                    kwargs["connect_timeout"] = 5
                self._pool = ConnectionPool(
                    self.dsn, kwargs=kwargs, min_size=1, max_size=POOL_SIZE, num_workers=1, name="http",
                    connection_class=stall.Watched,  # a statement behind a proxy that lost it: closed, not waited on
                    configure=functools.partial(_configure, dsn=self.dsn), check=ConnectionPool.check_connection,
                    open=False,
                )  # fmt: skip
                self._pool.open(wait=False)  # a database that is down now answers 503, and the pool keeps trying
            return self._pool

    def _why_no_connection(self) -> str:
        """libpq's reason, from one direct attempt; or, when that one connects, that every connection is busy."""
        try:
            with connect(self.dsn, connect_timeout=3):
                pass
        except TransientError as exc:
            return f"database unreachable: {one_line(str(exc.__cause__ or exc))}"
        return f"every database connection of this server is busy (waited {WAIT_SECONDS:g} s): try again"


def _configure(conn: psycopg.Connection, dsn: str) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    configure_session(conn, dsn)  # the server's keepalives; a lease set to 'infinity' by hand: /ui/queue shows it
    conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
