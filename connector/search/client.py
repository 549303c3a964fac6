"""`connector.Client(dsn).search(...)`: search from Python with the database's own model.

The client holds one connection and the database's active model (loaded at start, and again after `connector reembed
--switch`); calls are serialised (a psycopg connection serves one thread at a time).
"""

from __future__ import annotations

import threading

from connector.db.database import connect
from connector.search import Result, search
from connector.search.models import ActiveModel
from connector.settings import Settings


class Client:
    def __init__(self, dsn: str, settings: Settings | None = None):
        self.settings = settings or Settings()
        self._conn = connect(dsn, autocommit=True)
        self._models = ActiveModel(self.settings)
        try:
            self._models.current(self._conn)  # loaded now: the first search does not wait for it
        except BaseException:
            self._conn.close()
            raise
        self._lock = threading.Lock()

    def search(
        self,
        question: str,
        k: int = 10,
        *,
        hybrid: bool = True,
        filter: dict | None = None,  # noqa: A002 - the SQL function's parameter name
        context: int = 0,
    ) -> list[Result]:
        """The best `k` chunks for `question` (hybrid by default), each with `context` neighbours on either side
        joined into a passage when asked."""
        with self._lock:
            return search(self._conn, self._models, question, k=k, hybrid=hybrid, filter=filter or {},
                          context=context)  # fmt: skip

    def close(self) -> None:
        self._conn.close()
        self._models.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
