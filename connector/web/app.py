"""The Starlette app of the sidecar's HTTP port: `/health`, `/live`, `/metrics` and `/search` (and the web UI's
routes, `connector.web.ui`, when it is on).

Every endpoint does blocking work (a connection to count the queue, an embedding and a query): it runs on the
server's own thread pools, never on the event loop. Health checks have their own pool, so that slow searches
cannot make a liveness probe time out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from prometheus_client import CONTENT_TYPE_LATEST
from psycopg.errors import QueryCanceled
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from connector import observe
from connector.errors import TransientError
from connector.secrets import one_line
from connector.web import query
from connector.web.hosts import AllowedHosts
from connector.web.pool import DatabaseUnavailable
from connector.web.searcher import Searcher

log = logging.getLogger(__name__)

PATHS = ("/health", "/metrics", "/search", "/live")

MAX_BODY_BYTES = 64 * 1024
"""A search request is a question and a filter: a larger body is refused (400) before it is all read."""


async def _body(request: Request) -> bytes:
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_BODY_BYTES:
            raise query.BadRequest(f"the body is larger than {MAX_BODY_BYTES // 1024} KiB: a search needs a question")
    return bytes(body)


def build_app(
    health: observe.Health,
    searcher: Searcher,
    health_pool: Executor,
    search_pool: Executor,
    extra: list[BaseRoute],
    hosts: AllowedHosts,
) -> Starlette:
    """The JSON endpoints, and `extra` routes (the web UI's, when it is on). `/search` answers `hosts` only."""

    async def blocking(pool: Executor, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def health_endpoint(_request: Request) -> Response:
        report = await blocking(health_pool, health.snapshot)
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    async def live_endpoint(_request: Request) -> Response:
        # For a liveness probe: whether this process still serves, without the database. Restarting replicas
        # mends no outage (a sidecar waits for its database), and a probe on /health killed every replica once the
        # database, or a free connection to it, was gone for a few probes: they then exited at once on start
        # ("cannot connect") and waited out the kubelet's crash-loop backoff after the database was back.
        alive = health.workers_alive()
        ok = alive == health.workers
        report = {"status": "ok" if ok else "degraded", "workers": health.workers, "workers_alive": alive}
        return JSONResponse(report, status_code=200 if ok else 503)

    async def metrics_endpoint(_request: Request) -> Response:
        await blocking(health_pool, health.snapshot)  # the queue and database gauges are read at scrape time
        return Response(observe.prometheus(), media_type=CONTENT_TYPE_LATEST)

    async def search_endpoint(request: Request) -> Response:
        if not hosts.admit(request):
            return _error(421, "this server answers to its own host names only (CONNECTOR_HTTP_ALLOWED_HOSTS)")
        try:
            if request.method == "POST":
                wanted = query.from_body(await _body(request))
            else:
                wanted = query.from_query_string(request.query_params)
            results = await blocking(search_pool, searcher.search, wanted)
        except query.BadRequest as exc:
            return _error(400, str(exc))
        except DatabaseUnavailable as exc:
            return _error(503, str(exc))
        except (TransientError, QueryCanceled) as exc:  # the endpoint or the database gave up: try again later
            return _error(503, f"search failed for now: {one_line(str(exc))[:500]}")
        except Exception as exc:  # a bug, or the database refusing the query: said in one line, never a secret
            log.exception("search failed")
            return _error(500, f"search failed: {type(exc).__name__}: {one_line(str(exc))[:500]}")
        return JSONResponse(query.response(wanted, results))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            paths = (*PATHS, "/ui/") if extra else PATHS
            return _error(404, f"no such path {request.url.path}: the paths are {', '.join(paths)}")
        if exc.status_code == 405:
            return _error(405, f"{request.method} is not allowed on {request.url.path}", exc.headers)
        return _error(exc.status_code, exc.detail, exc.headers)

    return Starlette(
        routes=[
            Route("/health", health_endpoint, methods=["GET"]),
            Route("/live", live_endpoint, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/search", search_endpoint, methods=["GET", "POST"]),
            *extra,
        ],
        exception_handlers={HTTPException: http_error},
    )


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
