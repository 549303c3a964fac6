"""Searches for the HTTP server: the database's active model (the sidecar's own, or the one a reembed switched to),
a small connection pool opened on the first search, and `connector.search.search` (the one search path).
Blocking: call it from a worker thread."""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from connector import search as searching
from connector.db.database import check_dsn, connect
from connector.errors import TransientError
from connector.search.models import ActiveModel
from connector.secrets import one_line
from connector.web.query import SearchRequest

log = logging.getLogger(__name__)

POOL_SIZE = 4
"""Connections the searches share (at most this many run at once; the others wait for one)."""

WAIT_SECONDS = 3.0
"""How long a search waits for a connection (a new one, or a free one) before answering 503."""


class DatabaseUnavailable(Exception):
    """No connection to the database, or it was lost during the search (answered 503, with this message)."""


class Searcher:
    def __init__(self, dsn: str, models: ActiveModel):
        check_dsn(dsn)  # as `connect()` does: a DSN libpq would misread never reaches it
        self.dsn = dsn
        self.models = models
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._closed = False

    def search(self, request: SearchRequest) -> list[searching.Result]:
        pool = self._opened()
        try:
            spec_and_model = self.models.last
            if spec_and_model is None:
                with pool.connection(timeout=WAIT_SECONDS) as conn:
                    spec_and_model = self.models.current(conn)
            for _ in range(3):
                spec, embedder = spec_and_model
                # Embedded first: a connection is held only for the query, never while waiting for the model.
                vector = searching.query_vector(embedder, request.query)
                with pool.connection(timeout=WAIT_SECONDS) as conn:
                    results = searching.search_vector(
                        conn, vector, request.query, k=request.k, hybrid=request.hybrid, filter=request.filter,
                        context=request.context, model=spec,
                    )  # fmt: skip
                    if results is not None:
                        return results
                    spec_and_model = self.models.current(conn)  # switched to another model since: embed again
            raise TransientError("the embedding model changed three times during one search: try again")
        except PoolTimeout:  # (an OperationalError too) the pool could not connect in time, or is all in use
            raise DatabaseUnavailable(self._why_no_connection()) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # lost during the search
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
                kwargs: dict = {"autocommit": True}
                if "connect_timeout" not in conninfo_to_dict(self.dsn):  # never a pool thread stuck connecting
                    kwargs["connect_timeout"] = 5
                self._pool = ConnectionPool(
                    self.dsn, kwargs=kwargs, min_size=1, max_size=POOL_SIZE, num_workers=1, name="http-search",
                    configure=_register_vector, check=ConnectionPool.check_connection, open=False,
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


STATEMENT_TIMEOUT_MS = 30_000
"""A search query running longer is cancelled (and answered 500 with Postgres's reason), so that a pathological
query cannot hold one of the pool's connections for good."""


def _register_vector(conn: psycopg.Connection) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
