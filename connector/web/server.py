"""Uvicorn on a background thread, serving `connector.web.app` on the sidecar's HTTP port.

The socket is bound when the server is made, in the caller's thread: a port in use fails there (`FatalError`), and
port 0 reports the port it got. Uvicorn runs without its signal handlers (the sidecar owns SIGTERM and SIGINT; off
the main thread uvicorn would not install them anyway), without an access log, and with its own log lines at
WARNING and above only. `stop()` leaves no thread behind: uvicorn's, the thread pools' and the connection pool's
are all joined.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn

from connector import observe
from connector.embedders import Embedder
from connector.errors import FatalError
from connector.search.models import ActiveModel
from connector.settings import ScoringSettings, Settings
from connector.web.app import PATHS, build_app
from connector.web.hosts import AllowedHosts
from connector.web.pool import POOL_SIZE, DatabasePool
from connector.web.searcher import Searcher

log = logging.getLogger(__name__)

UI_THREADS = 2
"""Pages read and rendered at once (the others wait); searches and probes have their own threads."""

_STARTUP_SECONDS = 10.0
_SHUTDOWN_SECONDS = 5.0
"""How long requests still running at `stop()` may take before uvicorn cancels them."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # the sidecar's SIGTERM/SIGINT handlers stay in place
        yield


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        health: observe.Health,
        dsn: str,
        embedder: Embedder,
        settings: Settings | None = None,
    ):
        # Searches use the database's active model: this one, or (with `settings`) the one a reembed switched to.
        self._models = ActiveModel(settings, loaded=embedder)
        self._pool = DatabasePool(dsn)
        self._searcher = Searcher(self._pool, self._models)
        self.ui = settings.http_ui if settings is not None else True
        self._socket = _bind(host, port)
        self._address = self._socket.getsockname()  # still known once the socket is closed
        self._health_pool = ThreadPoolExecutor(2, thread_name_prefix="http-health")
        self._search_pool = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="http-search")
        # The pages have their own threads: rendering a long document never delays a search or a probe.
        self._ui_pool = ThreadPoolExecutor(UI_THREADS, thread_name_prefix="http-ui")
        hosts = AllowedHosts([host, *(settings.allowed_hosts if settings is not None else ())])
        extra = []
        if self.ui:
            from connector.web import ui

            weights = settings.weights if settings is not None else ScoringSettings()
            extra = ui.routes(self._pool, self._searcher, weights, self._ui_pool, hosts)
        app = build_app(health, self._searcher, self._health_pool, self._search_pool, extra, hosts)
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                loop="asyncio", http="h11", ws="none", server_header=False,
                                timeout_graceful_shutdown=_SHUTDOWN_SECONDS)  # fmt: skip
        self._server = _Server(config)
        self._thread = threading.Thread(target=self._serve, name="http-server", daemon=True)

    @property
    def port(self) -> int:
        return self._address[1]

    @property
    def url(self) -> str:
        host = self._address[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the HTTP server on {self.url} did not start")
            time.sleep(0.01)
        log.info("health, metrics and search on %s (%s)", self.url, ", ".join(PATHS))
        if self.ui:
            log.info("web UI on %sui/", self.url)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=_SHUTDOWN_SECONDS + 5)
        self._socket.close()
        self._search_pool.shutdown(wait=True, cancel_futures=True)
        self._ui_pool.shutdown(wait=True, cancel_futures=True)
        self._health_pool.shutdown(wait=True, cancel_futures=True)
        self._pool.close()
        self._models.close()

    def _serve(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        except BaseException:  # uvicorn exits with SystemExit on a startup failure; start() reports it
            log.exception("HTTP server stopped")


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, *_ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:  # a port in use, an address not of this machine: the settings are wrong
        raise FatalError(
            f"cannot serve HTTP on {host}:{port} (CONNECTOR_HTTP_HOST, CONNECTOR_HTTP_PORT): {exc.strerror or exc}"
        ) from None
