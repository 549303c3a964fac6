"""Searches for the HTTP server: the database's active model (the sidecar's own, or the one a reembed switched to),
the server's connection pool, and `connector.search.search_vector` (the one search path). Blocking: call it from a
worker thread."""

from __future__ import annotations

from connector import search as searching
from connector.errors import TransientError
from connector.search.models import ActiveModel
from connector.web.pool import DatabasePool, DatabaseUnavailable
from connector.web.query import SearchRequest

__all__ = ["DatabaseUnavailable", "Searcher"]


class Searcher:
    def __init__(self, pool: DatabasePool, models: ActiveModel):
        self.pool = pool
        self.models = models

    def search(self, request: SearchRequest) -> list[searching.Result]:
        spec_and_model = self.models.last
        if spec_and_model is None:
            with self.pool.connection() as conn:
                spec_and_model = self.models.current(conn)
        for _ in range(3):
            spec, embedder = spec_and_model
            # Embedded first: a connection is held only for the query, never while waiting for the model.
            vector = searching.query_vector(embedder, request.query)
            with self.pool.connection() as conn:
                results = searching.search_vector(
                    conn, vector, request.query, k=request.k, hybrid=request.hybrid, filter=request.filter,
                    context=request.context, model=spec,
                )  # fmt: skip
                if results is not None:
                    return results
                spec_and_model = self.models.current(conn)  # switched to another model since: embed again
        raise TransientError("the embedding model changed three times during one search: try again")
