"""What the throughput benchmarks share: waiting for the queue to drain under worker processes, and stopping them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

# The oldest such row, read off the queue's partial index (migration 0001): it stops at the first entry still live.
# Polled every 20 ms, a count(*) of the queue (or an EXISTS, which the planner ran as a scan of the table) cost the
# database a tenth of a core, taken from the workers being measured.
PENDING = "SELECT id FROM connector.documents WHERE status IN ('pending', 'processing') ORDER BY id LIMIT 1"


def machine_busy_s(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds this machine has spent busy since boot, all cores together (user, nice, system, irq, softirq;
    not idle, I/O wait or steal); None where there is no /proc/stat. The difference over a run is what the run cost
    in CPU, whichever process spent it (the sidecar, its pool, the database, an embedding endpoint on the same
    machine), with whatever else the machine was doing: less sensitive to a noisy machine than wall time, not
    immune to it."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def wait_drained(conn: psycopg.Connection, procs) -> None:
    """Until no row is pending or processing; fails if every worker process died first."""
    while conn.execute(PENDING).fetchone() is not None:
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
