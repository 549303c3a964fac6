"""`connector.Client(dsn).search(...)`: search from Python with the database's own model, loaded once.

The client holds one connection and one embedder; calls are serialised (a psycopg connection serves one thread at
a time). It checks at start that the configured embedder made the stored vectors.
"""

from __future__ import annotations

import threading

from connector.db.database import connect
from connector.embedders import embedder_class, load
from connector.search import Result, check_model, search
from connector.settings import Settings


class Client:
    def __init__(self, dsn: str, settings: Settings | None = None):
        self.settings = settings or Settings()
        self._conn = connect(dsn, autocommit=True)
        try:
            check_model(self._conn, embedder_class(self.settings.embedder))
            self._embedder = load(self.settings.embedder, self.settings.embed_batch_size)
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
            return search(self._conn, self._embedder, question, k=k, hybrid=hybrid, filter=filter or {},
                          context=context)  # fmt: skip

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
