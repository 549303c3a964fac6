"""The long-running sidecar: a folder watcher and N workers sharing one queue (the `connector.documents` table).

Each worker thread has its own connections. It sleeps on LISTEN and wakes on the NOTIFY that every transaction
queueing rows sends, once however many it queues (a file the watcher queued, a user's INSERT, a watched table's
trigger; migration 0016), read at once by a thread of its own (`_Wakeups`); a poll every `poll_interval`
seconds covers notifications missed while the connection was down and retries whose backoff has passed. A lost
connection is re-opened with exponential backoff; on reconnecting, a worker gives back the rows it held.

Stopping (SIGTERM, Ctrl-C): no new claims; in-flight documents get `shutdown_grace_seconds` to finish, then go back
to the queue (their claim token is bumped, so a late result is dropped). `once=True` drains the queue and returns.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import psycopg

from connector import candidates
from connector.db.database import MissingPrivilege, connect, describe_missing, guard_session, missing_privileges
from connector.db.store import Store
from connector.errors import FatalError, TransientError
from connector.pipeline import Pipeline
from connector.settings import NOTIFY_CHANNEL, Settings
from connector.sources import table as tables
from connector.sources.folder import scan
from connector.sources.watcher import FolderWatcher
from connector.worker import Worker, worker_name

log = logging.getLogger(__name__)

_WAKE_CHECK = 0.5  # seconds between checks of the stop flag while waiting for notifications
_READ_CHECK = 0.1  # seconds between the LISTEN reader's checks of its own stop flag (each worker's stop waits on it)
_MAX_BACKOFF = 30.0
_TABLE_CHECK_SECONDS = 60.0  # between looks for watched tables dropped or re-created under the sidecar


def run(
    settings: Settings,
    dsn: str,
    make_pipeline: Callable[[], Pipeline],
    stop: threading.Event,
    *,
    watch: bool = True,
    once: bool = False,
) -> None:
    roots = [settings.watch_dir] if watch else []
    watcher = server = None
    workers: list[_WorkerThread] = []
    try:
        if watch and once:
            n = scan(settings, dsn)
            log.info("queued %d file(s) from %s", n, settings.watch_dir.resolve())
        elif watch:
            watcher = FolderWatcher(settings, dsn)
            watcher.start()
            log.info("watching %s", watcher.root)
        workers = [_WorkerThread(settings, dsn, make_pipeline(), stop, roots, i, once) for i in range(settings.workers)]
        _threads.update(workers)
        # Read by /health; only this loop updates them.
        watcher_problem = _Problem("folder watcher working again")
        table_problem = _Problem("every watched table feeds the queue again")
        server = _health_server(
            settings, dsn, workers, lambda: [p.now for p in (watcher_problem, table_problem) if p.now]
        )
        next_table_check = 0.0
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers) and not stop.is_set() and not any(w.fatal for w in workers):
            if watcher is not None:
                # check() restarts a watcher thread that died and says what is wrong (/health turns degraded)
                watcher_problem.update(watcher.check())
            if not once and time.monotonic() >= next_table_check:
                next_table_check = time.monotonic() + _TABLE_CHECK_SECONDS
                table_problem.update(_unread_tables(dsn, table_problem.now))
            stop.wait(0.2)
        stop.set()
        _shutdown(workers, dsn, settings.shutdown_grace_seconds)
        if fatal := next((w.fatal for w in workers if w.fatal), None):  # read after the grace: late ones count
            raise fatal
    except BaseException:  # a second Ctrl-C/SIGTERM, or an error: what is in hand goes back to the queue now
        stop.set()
        _release(workers, dsn)
        raise
    finally:
        if busy():
            # Past the grace period: documents still in the candidate pool or the CPU pool are abandoned (their rows
            # are back in the queue), so that no pool process keeps chunking for a sidecar that is leaving.
            candidates.terminate_pool()
            for pool in {id(w.pipeline.pool): w.pipeline.pool for w in workers if w.pipeline.pool}.values():
                pool.terminate()
        if watcher:
            watcher.stop()
        if server:
            server.stop()
    log.info("sidecar stopped")


class _Problem:
    """A condition the main loop watches (/health reads `now`): logged once when it appears, changes or clears, not
    on every look."""

    def __init__(self, cleared: str):
        self.now: str | None = None
        self._cleared = cleared

    def update(self, problem: str | None) -> None:
        if problem != self.now:
            if problem:
                log.error("%s", problem)
            else:
                log.info("%s", self._cleared)
        self.now = problem


def _unread_tables(dsn: str, previous: str | None) -> str | None:
    """`tables.unread_problem`, or what was known before when the database cannot say now (an outage has its own
    line). A table dropped under a running sidecar left its documents searchable and its new rows unread, unsaid."""
    try:
        with connect(dsn, autocommit=True, connect_timeout=3) as conn:
            return tables.unread_problem(conn)
    except (psycopg.Error, TransientError):  # TransientError: `connect`'s "cannot connect"
        return previous


# Every worker thread this process started (weakly: tests start many sidecars in one process).
_threads: weakref.WeakSet[_WorkerThread] = weakref.WeakSet()


def busy() -> bool:
    """Whether a worker thread is still inside a document (after `run` returned: one that outlived the grace)."""
    return any(t.is_alive() and t.worker is not None and t.worker.held for t in list(_threads))


def _health_server(settings: Settings, dsn: str, workers: list[_WorkerThread], loop_problems: Callable[[], list[str]]):
    """/health, /metrics and /search on `CONNECTOR_HTTP_PORT`; searches use the workers' embedder (one model, loaded
    once: every pipeline of `make_pipeline` shares it)."""
    if settings.http_port is None:
        return None
    from connector.observe import Health
    from connector.web import HttpServer

    def problems() -> list[str]:
        found = [f"worker thread {w.name} is not running" for w in workers if not w.is_alive()]
        found += list(dict.fromkeys(w.problem for w in workers if w.problem is not None))
        found += loop_problems()  # the folder watcher's, watched tables gone
        return found

    health = Health(dsn, lambda: sum(w.is_alive() for w in workers), len(workers), problems)
    server = HttpServer(settings.http_host, settings.http_port, health, dsn, workers[0].pipeline.embedder, settings)
    server.start()
    return server


def _shutdown(workers: list[_WorkerThread], dsn: str, grace: float) -> None:
    deadline = time.monotonic() + grace
    # NOTE: polled, not `Thread.join(timeout)`: a second signal interrupting a join makes CPython 3.11 mark the
    # still-running thread as stopped (bpo-45274), and the document it holds would then never be handed back.
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    _release(workers, dsn)


def _release(workers: list[_WorkerThread], dsn: str) -> None:
    """Hand back the documents still in the workers' hands (their claim token is bumped: late results are
    dropped)."""
    held = [row for w in workers if w.worker for row in list(w.worker.held)]
    if not held:
        return
    try:
        with connect(dsn, autocommit=True) as conn:
            store = Store(conn)
            for row in held:
                if row is not None and store.release(row):
                    log.warning("%s returned to the queue unfinished", row.source_key)
    except (psycopg.Error, TransientError) as exc:  # the database is gone too: the leases will expire
        log.warning("could not hand back %d document(s): %s", len(held), exc)


class _Wakeups:
    """LISTEN on a connection of its own, read without pause by a thread of its own; `wait` says whether a
    notification came.

    Reading it only between drains (as the worker thread did) left a burst's notifications unread for the whole
    drain: the server sends them from inside a transaction, and once they fill its socket's buffer it waits there,
    holding a snapshot, which kept the database's xmin horizon where it was for as long as the drain lasted (nothing
    vacuumed, every claim walking the dead entries of the queue's index; migration 0016)."""

    def __init__(self, conn: psycopg.Connection, name: str):
        self._conn = conn
        self._came = threading.Event()
        self._closing = threading.Event()
        self._error: BaseException | None = None
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")  # before the first drain: nothing committed after it is missed
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while not self._closing.is_set():
                for _ in self._conn.notifies(timeout=_READ_CHECK):
                    self._came.set()
        except Exception as exc:  # the connection lost: the worker thread reconnects when it next waits
            self._error = exc
            self._came.set()

    def wait(self, timeout: float) -> bool:
        """Whether a notification came since the last call, waiting up to `timeout` seconds for one. A notification
        that comes while the caller drains wakes the next call at once: its row may have been committed after the
        drain's last claim."""
        came = self._came.wait(timeout)
        if came:  # cleared only then: one set after a timed-out wait is left for the next call, not wiped
            self._came.clear()
        if self._error is not None:
            raise self._error
        return came

    def __enter__(self) -> _Wakeups:
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self._thread.join()


class _WorkerThread(threading.Thread):
    def __init__(
        self,
        settings: Settings,
        dsn: str,
        pipeline: Pipeline,
        stop: threading.Event,
        roots: list[Path],
        index: int,
        once: bool,
    ):
        # Daemon: past the grace period the process exits without waiting for a document still in the pipeline.
        super().__init__(name=f"worker-{index}", daemon=True)
        self.settings = settings
        self.dsn = dsn
        self.pipeline = pipeline
        self.stop = stop
        self.roots = roots
        self.once = once
        self.name_in_queue = worker_name(str(index))
        self.worker: Worker | None = None
        self.fatal: FatalError | None = None
        self.backoff = 1.0  # seconds before the next reconnection; doubles per failed one, back to 1 once connected
        self.suspects: list[int] = []  # rows whose write a lost connection cut short, not yet given back
        self.problem: str | None = None  # a grant it lacks (MissingPrivilege), until it has it again (/health)

    def run(self) -> None:
        try:
            self._loop()
        finally:
            self.pipeline.close()  # its embedding cache connection

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self._serve()
                if self.once:
                    return
            except FatalError as exc:
                self.fatal = exc
                return
            except MissingPrivilege as exc:
                # A grant revoked while running: the rows in hand went back (or go back on reconnecting, by name),
                # none charged a try; this thread waits for the grant, /health degraded meanwhile.
                problem = describe_missing(self.dsn, exc)
                if self.once:
                    self.fatal = FatalError(problem)
                    return
                if problem != self.problem:
                    log.error("worker %s waits for a grant: %s", self.name, problem)
                self.problem = problem
                self.stop.wait(self.backoff)
                self.backoff = min(self.backoff * 2, _MAX_BACKOFF)
            except (psycopg.Error, TransientError) as exc:
                if self.stop.is_set():
                    # Leaving, and the embedded server with us (a second Ctrl-C stops it at once): no outage to
                    # report or retry; what this thread held is handed back by `_release`.
                    return
                if isinstance(exc, psycopg.Error) and not self._lost(exc):
                    log.exception("worker %s stopped", self.name)
                    self.fatal = FatalError(f"worker {self.name} stopped: {type(exc).__name__}: {exc}")
                    return
                log.warning("database unavailable (%s); retrying in %.0f s", exc, self.backoff)
                self.stop.wait(self.backoff)
                self.backoff = min(self.backoff * 2, _MAX_BACKOFF)
            except Exception as exc:  # a read-only database, a missing privilege...: stop the process, loudly
                log.exception("worker %s stopped", self.name)
                self.fatal = FatalError(f"worker {self.name} stopped: {type(exc).__name__}: {exc}")
                return

    @staticmethod
    def _lost(exc: psycopg.Error) -> bool:
        """Whether `exc` means the session is gone (an outage, a terminated backend, an idle-in-transaction timeout,
        whose error is an InternalError), rather than something reconnecting will not mend."""
        return isinstance(exc, (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout))

    def _serve(self) -> None:
        with connect(self.dsn, autocommit=True) as work_conn:
            guard_session(work_conn, self.settings.lease_seconds)
            if self.problem is not None:  # waiting for a grant: nothing is claimed until the tables' grants are back
                if (missing := missing_privileges(work_conn)) is not None:
                    raise MissingPrivilege(missing)
                log.info("worker %s has its grants back", self.name)
                self.problem = None
            if self.worker is not None:  # kept until given back: this connection may be lost before that too
                self.suspects += self.worker.lost_while_writing
                self.worker.lost_while_writing = []
            reconnected = self.worker is not None
            self.worker = Worker(work_conn, self.pipeline, self.roots, name=self.name_in_queue)
            if reconnected:
                # Back from an outage: if it outlasted the lease, every replica's leases ran out, and the others
                # may still be waiting to reconnect (up to _MAX_BACKOFF) to hand theirs back. Their rows are not
                # their tries' fault; five such outages failed them.
                self.worker.forgive_abandoned_until = time.monotonic() + self.settings.lease_seconds + _MAX_BACKOFF
            error = "the database connection was lost while it was being written"
            if (given := self.worker.store.release_mine(self.name_in_queue, self.suspects, error)).total:
                # Counted from the rows, not from `suspects`: a write whose COMMIT went through before its reply was
                # lost left them done, and they are not tried again.
                alone = f" ({given.abandoned} being written then: each tried again alone)" if given.abandoned else ""
                log.info("gave back %d document(s) held before the connection or a grant was lost%s", given.total,
                         alone)  # fmt: skip
            self.suspects = []
            self.backoff = 1.0  # connected: the next outage starts its waits from a second again
            if self.once:
                self.worker.drain(self.stop, self._record)
                return
            with (
                connect(self.dsn, autocommit=True) as listen_conn,
                _Wakeups(listen_conn, f"{self.name}-listen") as wakeups,
            ):
                woken = True  # drain once at start: rows may have been queued while nobody listened
                last_poll = 0.0
                while not self.stop.is_set():
                    if woken or time.monotonic() - last_poll >= self.settings.poll_interval:
                        last_poll = time.monotonic()
                        self.worker.drain(self.stop, self._record)
                    woken = wakeups.wait(_WAKE_CHECK)

    def _record(self, row, result: str) -> None:
        from connector.observe import record

        timings = self.worker.timings_of(row) if self.worker else None
        record(result, timings if result == "done" else None)
