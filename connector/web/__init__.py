"""The sidecar's HTTP port (`CONNECTOR_HTTP_PORT`): Starlette served by uvicorn on a background thread.

- `app`: the routes, `/health`, `/metrics` (`connector.observe`) and `/search`;
- `query`: a search request from a query string or a JSON body, checked, and the results as JSON;
- `searcher`: the sidecar's embedder, a small connection pool, `connector.search.search`;
- `server`: `HttpServer`, started and stopped by `connector.sidecar`.
"""

from connector.web.server import HttpServer

__all__ = ["HttpServer"]
