"""The sidecar's HTTP port (`CONNECTOR_HTTP_PORT`): Starlette served by uvicorn on a background thread.

- `app`: the routes, `/health`, `/metrics` (`connector.observe`) and `/search`;
- `query`: a search request from a query string or a JSON body, checked, and the results as JSON;
- `pool`: the server's one small connection pool, shared by searches and pages;
- `searcher`: the database's active model and `connector.search.search_vector`;
- `ui`: the web UI under `/ui/` (documents, a document's candidates and cuts, a chunk, search, queue);
- `server`: `HttpServer`, started and stopped by `connector.sidecar`.
"""

from connector.web.server import HttpServer

__all__ = ["HttpServer"]
