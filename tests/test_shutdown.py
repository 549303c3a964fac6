"""Stopping keeps its promises, with real processes: SIGTERM waits at most the grace period, whatever the document
in hand is doing (a big one in the candidate pool included), and hands it back; a second SIGTERM stops at once and
hands it back too; a sidecar killed with SIGKILL leaves no helper process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import FIXTURES, output_of, wait_for

AUSTEN = (FIXTURES / "austen-northanger-abbey.txt").read_text()
# Long enough (> candidates.PARALLEL_MIN_CHARS) that every strategy runs in the candidate pool's processes, and slow
# enough that the signal, sent 2 s after its claim, lands while it is in hand, with the 3 s grace after it: 3.5 MB,
# about 17 s on a machine where three volumes (1.3 MB) took 6.4 s, which a machine twice as fast would finish inside
# the grace.
BIG = "\n\n".join(f"Volume {i}.\n\n{AUSTEN}" for i in range(8))
ENV = {"CONNECTOR_POLL_INTERVAL": "1", "CONNECTOR_SHUTDOWN_GRACE_SECONDS": "3", "CONNECTOR_LEASE_SECONDS": "30"}


def _insert_big(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('big', %s)", (BIG,))


def _row(dsn: str) -> tuple:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT status, claimed_by, lease_expires_at FROM connector.documents "
            "WHERE source_key IN ('big', 'big.txt')"
        ).fetchone() or (None, None, None)


def _processing(dsn: str) -> bool:
    return _row(dsn)[0] == "processing"


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: children first found by their parent, recursively)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("signals", "watch", "sig"),
    [(1, False, signal.SIGTERM), (2, False, signal.SIGTERM), (1, True, signal.SIGTERM), (1, False, signal.SIGHUP)],
    ids=["one-sigterm", "two-sigterms", "watching", "hangup"],
)
def test_sigterm_keeps_the_grace_and_hands_the_document_back(
    migrated_dsn, start_process, tmp_path: Path, signals: int, watch: bool, sig: signal.Signals
) -> None:
    """SIGHUP (the terminal of a `make run` closed, an ssh session dropped) stops it as SIGTERM does: it killed the
    sidecar at once, its rows left to their leases (a try counted) and the embedded Postgres running. The terminal
    sends it to the whole process group: the CPU pool's processes get it too, and leave stopping to the sidecar."""
    dsn = migrated_dsn
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    source = ("--watch", str(inbox)) if watch else ("--no-watch",)
    proc = start_process("run", *source, "--dsn", dsn, "--embedder", "fake", **ENV)
    wait_for(lambda: "connector running" in output_of(proc), timeout=120, what="sidecar start")
    if watch:  # the folder watcher has to stop within the grace too
        (inbox / "big.txt").write_text(BIG)
        for i in range(200):
            (inbox / f"small-{i:03d}.txt").write_text(f"Small file {i}. " * 30)
    else:
        _insert_big(dsn)
    wait_for(lambda: _processing(dsn), timeout=30, what="the big document claimed")
    time.sleep(2)  # well inside the pipeline now
    helpers = _descendants(proc.pid)
    for _ in range(signals):
        for pid in [proc.pid, *helpers] if sig == signal.SIGHUP else [proc.pid]:  # a hangup reaches the group
            os.kill(pid, sig)
        time.sleep(0.3)
    code = _exit_code(proc)
    out = output_of(proc)
    assert "exception not rethrown" not in out and code in (0, 130), (code, out)
    # The grace kept, seen in what the sidecar did rather than timed: it handed the document back unfinished
    # (waiting for it, it would have stored it), and left without finishing it (a pool left to finish it would have
    # had its result dropped, the claim no longer the sidecar's).
    status, claimed_by, lease = _row(dsn)
    assert (status, claimed_by, lease) == ("pending", None, None), "handed back to the queue, lease cleared"
    assert "returned to the queue unfinished" in out, out
    assert "result dropped" not in out, "the document was finished after all, past the grace"
    assert "crash, kill or out of memory" not in out, "a pool stopped by the sidecar is no crash"
    wait_for(lambda: not any(_alive(p) for p in helpers), timeout=10, what="helper processes gone")


def test_sigkill_leaves_no_helper_process_behind(migrated_dsn, start_process) -> None:
    dsn = migrated_dsn
    proc = start_process("run", "--no-watch", "--dsn", dsn, "--embedder", "fake", **ENV)
    wait_for(lambda: "connector running" in output_of(proc), timeout=120, what="sidecar start")
    _insert_big(dsn)
    wait_for(lambda: _processing(dsn), timeout=30, what="the big document claimed")
    helpers = wait_for(lambda: _descendants(proc.pid), timeout=30, what="the candidate pool started")
    time.sleep(1)
    helpers = _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    try:
        wait_for(lambda: not any(_alive(p) for p in helpers), timeout=15, what="orphaned helpers exit")
    finally:
        for p in helpers:  # whatever this test finds, it leaves nothing running
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _pool_processes(pid: int) -> set[int]:
    """The CPU pool's processes under the sidecar `pid` (not multiprocessing's resource tracker)."""
    found = set()
    for child in _descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command and _alive(child):
            found.add(child)
    return found


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_a_pool_process_killed_takes_its_partner_with_it_and_sigterm_still_stops(
    migrated_dsn, start_process, busy: bool
) -> None:
    """One pool process of two dies (the OOM killer, say): Python's executor then tears the broken pool down by
    sending SIGTERM to the process left and waiting for it. The pool processes used to ignore SIGTERM (a group's
    SIGTERM is the sidecar's to handle), so that one stayed behind for good, the executor waited on it, and the
    sidecar could no longer stop. Now it exits with the pool (a SIGTERM from anyone else is still ignored), the next
    documents get a fresh pool, and SIGTERM stops the sidecar within its grace."""
    dsn = migrated_dsn
    proc = start_process("run", "--no-watch", "--dsn", dsn, "--embedder", "fake", CONNECTOR_CPU_PROCESSES="2", **ENV)
    wait_for(lambda: "connector running" in output_of(proc), timeout=120, what="sidecar start")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO connector.documents (source_key, content) SELECT 'row-' || i, repeat('Words of row ' || i || "
            "'. ', 40) FROM generate_series(1, 20) i"
        )
    wait_for(lambda: len(_pool_processes(proc.pid)) == 2, timeout=120, what="the pool started")
    wait_for(lambda: _done(dsn) == 20, timeout=120, what="the rows done")
    first = _pool_processes(proc.pid)
    for pid in first:  # a SIGTERM from someone else (a process group's, systemd's) does not stop the pool
        os.kill(pid, signal.SIGTERM)
    time.sleep(1)
    assert _pool_processes(proc.pid) == first
    if busy:  # the other one has a document in hand when it happens
        _insert_big(dsn)
        wait_for(lambda: _processing(dsn), timeout=30, what="the big document claimed")
        time.sleep(2)
    os.kill(_victim(first), signal.SIGKILL)
    wait_for(lambda: not (first & _pool_processes(proc.pid)), timeout=15, what="the pool's other process gone too")
    if busy:  # the document in hand went back to the queue and through a fresh pool
        wait_for(lambda: _row(dsn)[0] == "done", timeout=240, what="the big document done")
        assert len(_pool_processes(proc.pid)) <= 2
    proc.send_signal(signal.SIGTERM)
    assert _exit_code(proc) == 0, output_of(proc)
    assert "sidecar stopped" in output_of(proc)


EXIT_GUARD_S = 120
"""How long a test waits for a signalled sidecar to exit: a guard against a hang stalling the suite, not a measure
(with a 3 s grace, it exits in about 3 s, or at once when idle)."""


def _exit_code(proc) -> int:
    """The sidecar's exit status once it has exited; it fails the test, saying so, if it has not after EXIT_GUARD_S
    (the process is then killed by the fixture)."""
    try:
        return proc.wait(EXIT_GUARD_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"the sidecar did not stop ({EXIT_GUARD_S} s after the signal)\n{output_of(proc)}"
        ) from None


def _victim(pool: set[int]) -> int:
    """The pool process reading the task queue (in a pipe read, holding the queue's lock, the other one waiting for
    that lock): killed, it leaves the other waiting for the lock for good, the case where a process that ignores the
    executor's SIGTERM never exits. Idle processes only; else (or where the kernel does not say) the lowest pid."""
    for pid in sorted(pool):
        try:
            if "pipe_read" in Path(f"/proc/{pid}/wchan").read_text():
                return pid
        except OSError:
            pass
    return min(pool)


def _done(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone()[0]


def test_two_ctrl_c_with_the_embedded_server_stop_it_with_no_outage_reported(tmp_path: Path, start_process) -> None:
    """`make run`, a big document in hand, Ctrl-C twice: the embedded server stops at once with the sidecar. An idle
    worker thread, still polling, met the server going away and logged "database unavailable (server closed the
    connection unexpectedly...); retrying in 1 s" (2 of 3 tries by hand): an outage where there was none."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    env = {**ENV, "CONNECTOR_WORKERS": "4"}  # idle threads polling: each a chance to meet the server leaving
    proc = start_process("run", "--watch", str(inbox), "--embedder", "fake", **env)
    wait_for(lambda: "query the chunks with" in output_of(proc), timeout=120, what="sidecar start")
    (inbox / "big.txt").write_text(BIG)
    dsn = f"postgresql://postgres:@/postgres?host={tmp_path / 'state' / 'pgdata'}"
    wait_for(lambda: _processing(dsn), timeout=60, what="the big document claimed")
    time.sleep(2)  # in the pipeline, the other worker thread polling
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    assert _exit_code(proc) == 130, output_of(proc)
    out = output_of(proc)
    assert "returned to the queue unfinished" in out and "stopped at once" in out
    assert "database unavailable" not in out and "Traceback" not in out, out
    assert not (tmp_path / "state" / "pgdata" / "postmaster.pid").exists(), "embedded server left running"
