"""What the throughput benchmarks share: waiting for the queue to drain under worker processes, and stopping them."""

from __future__ import annotations

import time

import psycopg

PENDING = "SELECT count(*) FROM connector.documents WHERE status IN ('pending', 'processing')"


def wait_drained(conn: psycopg.Connection, procs) -> None:
    """Until no row is pending or processing; fails if every worker process died first."""
    while conn.execute(PENDING).fetchone()[0]:
        if not any(p.is_alive() for p in procs):
            raise RuntimeError("every benchmark worker process exited before the queue was drained")
        time.sleep(0.02)


def stop_all(stop, procs, timeout: float) -> None:
    """Ask the worker processes to stop (their sidecar loop's event), then kill what outlives `timeout`."""
    stop.set()
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
