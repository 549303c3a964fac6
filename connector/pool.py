"""The CPU pool: processes that take whole documents up to their winner (convert, candidates and guards, the five
metrics, selection), so that one sidecar uses every core.

Those stages are Python and hold the GIL: worker threads of one process share one core, however many there are.
`CONNECTOR_CPU_PROCESSES` processes (default: one per core this process may use, its cgroup's CPU quota included;
none on a single core) each load the chunkers and the metric models once, then take documents as the worker threads
submit them. Embedding and writing stay in the sidecar: a pool process holds no connection and keeps no state
between documents.

A pool process that dies (killed, out of memory, a crash in a native library) breaks the whole pool:
`ProcessPoolExecutor` fails every document in flight with `BrokenProcessPool`, and the next submission starts a fresh
pool. Each process says in shared memory which task it runs, so only what the dead process ran can be to blame
(`CpuPool._reap`): those documents fail with `BrokenProcessPool`, and the worker treats each as if the sidecar had
died holding it (`Store.abandon`): claimed again alone, the death counting as a try, and run alone in the pool (a
suspect: see `CpuPool.submit`). The culprit fails after `max_attempts`. The other documents in flight go on in the
fresh pool, at no cost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker
from pathlib import Path

from connector import allocator, tokens
from connector.errors import ConnectorError, FatalError, TransientError
from connector.models import SourceDocument
from connector.settings import Settings

log = logging.getLogger(__name__)


def size_of(settings: Settings) -> int:
    """How many pool processes `settings` asks for: `cpu_processes`, or one per usable core (0 on one core, where a
    pool would only add the cost of shipping documents across; 0 with metrics model 'same')."""
    if settings.metrics.model == "same":
        # The metrics embed with the storage model itself: it lives in the sidecar (one copy, maybe an endpoint),
        # so the documents are chosen there too.
        return 0
    if settings.cpu_processes is not None:
        return settings.cpu_processes
    cores = usable_cores()
    return cores if cores > 1 else 0


def usable_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota (a container limited to
    2 CPUs on a 64-core node sees 64 in the affinity mask)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 here, or no quota: the affinity alone
        pass
    return cores


SUSPECT_WAIT_S = 120.0
MAX_MOVES = 3  # pools a task may leave at no cost (others' deaths) before it is a suspect too
LOADING = -1  # the token in the slot of a pool process that is still loading its models: nobody's fault
TORN_DOWN = 128 + signal.SIGTERM  # a pool process's exit code when its executor stopped it (`exit_when_torn_down`)
REAP_WAIT_S = 10.0  # how long a broken pool's executor thread has to fail its tasks (`CpuPool._reap`)
# Short documents a pool process takes as one task (`CpuPool.submit_many`). Sixteen rather than four: the sidecar
# process's CPU (the pool's messages: pickling, the executor's thread, futures) fell from 0.45-0.56 to 0.38-0.43 ms
# a 600-character row over a 3,000-row `connector bench`, and rows/s rose 757-839 -> 829-957 (five interleaved
# rounds); when a pool process dies, the others of its group are tried again alone, as before.
GROUP = 16
TIMEOUT_PER_MB_S = 60.0  # a task's deadline grows by this for each MB of its content (`document_timeout_seconds`)
# ... and by this for each MB of a PDF: its scanned pages may be read by OCR, 2-4 s a page on one core for a page of
# 65-113 KB (300 dpi, fax-compressed; measured), twice that per MB for JBIG2 scans, more on busy cores.
TIMEOUT_PER_PDF_MB_S = 600.0
WATCH_EVERY_S = 1.0  # how often the deadlines of the tasks running are looked at (`CpuPool._watch`)
_STRIDE = 3  # a pool process's slot: its pid, the token of the task it runs (0: none), when that task started (ms)


class DocumentTimedOut(BrokenProcessPool):
    """A task ran past its deadline and its pool process was stopped: a document that hangs (a parser caught in a
    loop, a pathological input) would otherwise hold its rows, and a pool process, for as long as the sidecar
    lives, its leases renewed all along. Handled as a pool process's death (the document is tried again alone, the
    stop counting as a try), with this as its reason."""


class CpuPool:
    """A `ProcessPoolExecutor` of `processes` started on first use, replaced when it breaks, shared by the worker
    threads of one process."""

    def __init__(self, settings: Settings, processes: int):
        self.settings = settings
        self.processes = processes
        self.restarts = 0  # pools replaced after one broke (read by tests and logs)
        self.tasks = 0  # tasks handed to the processes: a document, or a group of them (read by tests)
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Who is in the pool: documents side by side, or one suspect alone (see `submit`).
        self._turns = threading.Condition()
        self._shared = 0  # documents in flight side by side
        self._alone: str | None = None  # the source key of the suspect in flight, if one is
        self._suspects_waiting = 0
        # The tasks each pool has not answered yet: a pool that breaks may lose some for good (see `_reap`).
        # What each pool has in flight, and where its processes say what they run (see `_reap`).
        self._tasks: dict[ProcessPoolExecutor, dict[Future, _Task]] = {}
        self._slots: dict[ProcessPoolExecutor, object] = {}
        self._reaping: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()  # broken, handed to `_reap`
        self._reaped: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()  # and answered
        self._tokens = itertools.count(1)
        # Deadlines (`_watch`): the processes stopped for running past one, pid -> what the stop says.
        self._overdue: dict[int, tuple[int, str]] = {}  # and the token of the task it was stopped for
        self._watcher: threading.Thread | None = None
        self._stop_watching = threading.Event()

    def submit(
        self, source: SourceDocument, alone: bool = False, while_waiting: Callable[[], None] = lambda: None
    ) -> Future:
        """`Pipeline.choose` of `source` in a pool process; the future holds the `Chosen`, or the error the
        document raised, or `BrokenProcessPool` when the pool process running it died (see `_reap`).

        `alone`: a suspect (a document that was in flight when a pool process died) runs with nothing else in the
        pool, so that if it kills a process again no other document pays for it, whichever worker thread holds
        them. It waits for the documents in flight to finish; documents submitted meanwhile wait for it. Either
        wait can be long (a big document): `while_waiting` is called every second of it (the worker renews its
        leases)."""
        self._enter(alone, source.source_key, while_waiting)
        try:
            future = self._submit(_choose, source)
        except BaseException:
            self._leave(alone)
            raise
        future.add_done_callback(lambda _: self._leave(alone))
        return future

    def _enter(self, alone: bool, key: str, while_waiting: Callable[[], None], count: int = 1) -> None:
        # A document waits for a suspect at most SUSPECT_WAIT_S: one that hangs must not stall every worker thread
        # (past that wait, they share the pool with it again). A group (`count` documents) enters in one step: were
        # its documents entered one by one, a suspect arriving in between would wait for the first, which cannot
        # leave before the group is complete, and the rest of the group for the suspect.
        deadline = time.monotonic() + SUSPECT_WAIT_S

        def free() -> bool:
            if alone:
                return self._alone is None and self._shared == 0
            return (self._alone is None and self._suspects_waiting == 0) or time.monotonic() >= deadline

        with self._turns:
            self._suspects_waiting += alone
        try:
            while True:
                with self._turns:
                    if free() or (self._turns.wait(timeout=1.0) and free()):
                        if alone:
                            self._alone = key
                        else:
                            self._shared += count
                        return
                while_waiting()  # outside the lock: it may take a round trip to the database
        finally:
            with self._turns:
                self._suspects_waiting -= alone

    def _leave(self, alone: bool) -> None:
        with self._turns:
            if alone:
                self._alone = None
            else:
                self._shared -= 1
            self._turns.notify_all()

    def submit_many(self, sources: list[SourceDocument], while_waiting: Callable[[], None]) -> list[Future]:
        """`submit` for several short documents at once, as one task of one pool process: one message each way for
        the group instead of one per document. Each message costs the sidecar's threads a wake-up and a turn of the
        GIL, and a pool process that finished its document waited for them (measured with groups of GROUP: the two
        cores went from 1.73-1.76 to 1.81-1.83 busy, rows/s 0.94-1.14x in four interleaved rounds). Each document
        still gets its own future and its own outcome: one that raises fails alone; a pool process that dies running
        the group fails the whole group with `BrokenProcessPool`."""
        self._enter(False, sources[0].source_key, while_waiting, count=len(sources))
        try:
            task = self._submit(_choose_many, sources)
        except BaseException:
            for _ in sources:
                self._leave(False)
            raise
        futures: list[Future] = [Future() for _ in sources]
        for future in futures:
            future.set_running_or_notify_cancel()  # running: not to be cancelled by anyone (see the worker's NOTE)
            future.add_done_callback(lambda _: self._leave(False))
        task.add_done_callback(lambda done: _resolve(done, futures))
        return futures

    def _submit(self, fn: Callable, arg) -> Future:
        """`fn(arg)` in a pool process. The future answers for the task across pools: a pool that breaks fails it
        only if a process that died on its own was running it (see `_reap`); otherwise it goes to the next pool."""
        outer: Future = Future()
        outer.set_running_or_notify_cancel()  # running: not to be cancelled by anyone (see the worker's NOTE)
        self._dispatch(_Task(next(self._tokens), fn, arg, outer, deadline_s(self.settings, arg)))
        return outer

    def _dispatch(self, task: _Task) -> None:
        for _ in range(3):
            executor = self._current()
            try:
                with _spawning(executor, self.processes):
                    inner = executor.submit(_run, task.token, task.fn, task.arg)
            except BrokenProcessPool:  # broke since it was handed out: once more, on a fresh one
                self._replace(executor)
                continue
            except RuntimeError as exc:  # "cannot schedule new futures after shutdown": closed meanwhile
                raise TransientError("the CPU pool is stopped (the sidecar is shutting down)") from exc
            with self._lock:
                self.tasks += 1
                reaped = executor in self._reaped  # it broke, and was reaped, while this task went in: never run
                if not reaped:
                    self._tasks.setdefault(executor, {})[inner] = task
            if reaped:
                continue
            if getattr(executor, "_broken", False):
                # It broke while this task went in, maybe too late for the executor to answer it (`_reap`); no
                # other task of it need fail to say so.
                self._replace(executor)
            inner.add_done_callback(lambda f, ex=executor: self._answered(f, ex))
            return
        raise TransientError("the CPU pool broke three times in a row while starting its processes")

    def _current(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:  # the sidecar is leaving: no new pool for a document that is late
                raise TransientError("the CPU pool is stopped (the sidecar is shutting down)")
            if self._executor is None:
                # spawn: the sidecar holds threads (watcher, HTTP, heartbeats) and torch's pools, which do not
                # survive a fork.
                context = mp.get_context("spawn")
                slots = context.Array("q", _STRIDE * self.processes)  # (pid, token, started) for each: see `_run`
                self._executor = ProcessPoolExecutor(
                    max_workers=self.processes, mp_context=context, initializer=_start,
                    initargs=(self.settings, os.getpid(), slots),
                )  # fmt: skip
                self._slots[self._executor] = slots
                if self.settings.document_timeout_seconds and self._watcher is None:
                    self._watcher = threading.Thread(target=self._watch, name="cpu-pool-deadlines", daemon=True)
                    self._watcher.start()
            return self._executor

    def _watch(self) -> None:
        """Stop the pool process of a task that runs past its deadline (`deadline_s`): SIGKILL, which the executor
        takes for a death like any other (`_reap` answers the task with `DocumentTimedOut`). SIGKILL, not SIGTERM: a
        process caught in a native library's loop, or stopped (SIGSTOP), never handles a signal it may catch."""
        while not self._stop_watching.wait(WATCH_EVERY_S):
            with self._lock:
                executor = self._executor
                tasks = {t.token: t for t in self._tasks.get(executor, {}).values()} if executor else {}
                slots = self._slots.get(executor) if executor else None
            now = _now_ms()
            for pid, (token, started) in _started(slots).items():
                task = tasks.get(token)
                # `started` 0: the slot read as its process ended a task (the token read first, then the start
                # zeroed), not a task started at the clock's origin.
                if task is None or task.deadline_s is None or pid in self._overdue or not started:
                    continue
                if (now - started) / 1000 > task.deadline_s:
                    arg = task.arg if isinstance(task.arg, list) else [task.arg]
                    keys = ", ".join(getattr(source, "source_key", "?") for source in arg)
                    why = (f"it ran past its deadline ({task.deadline_s:.0f} s: CONNECTOR_DOCUMENT_TIMEOUT_SECONDS, "
                           f"plus {TIMEOUT_PER_MB_S:.0f} s a MB, {TIMEOUT_PER_PDF_MB_S:.0f} s a MB of PDF) and its "
                           "CPU pool process was stopped")  # fmt: skip
                    self._overdue[pid] = (token, why)  # `_reap` blames this task only if the process still ran it
                    log.warning("%s: %s (pid %d)", keys, why, pid)
                    kill_tree(pid)

    def _answered(self, inner: Future, executor: ProcessPoolExecutor) -> None:
        if not inner.cancelled() and isinstance(inner.exception(), BrokenProcessPool):
            self._replace(executor)
            with self._lock:
                if executor in self._reaping:  # `_reap` answers it
                    return
        with self._lock:
            task = self._tasks.get(executor, {}).pop(inner, None)
        if task is None:  # reaped already
            return
        if inner.cancelled():  # the pool was shut down before it started (`close`)
            _settle(task.outer, error=CancelledError())
        elif (error := inner.exception()) is not None:
            _settle(task.outer, error=error)
        else:
            result = inner.result()
            try:
                _settle(task.outer, result=result.load() if isinstance(result, _Packed) else result)
            except Exception as exc:  # a result that cannot be unpickled fails its own task, not the pool
                _settle(task.outer, error=exc)

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is not broken:  # another thread replaced it already
                return
            self._executor = None
            self.restarts += 1
            self._reaping.add(broken)
        # This runs in the executor's own thread, as it fails the tasks one by one: the rest is left to a thread
        # that waits for it to finish.
        try:
            threading.Thread(target=self._reap, args=(broken,), name="cpu-pool-reap", daemon=True).start()
        except RuntimeError:  # no thread to be had (memory short, as when a process is killed for it): all fail
            self._fail_all(broken, BrokenProcessPool("a CPU pool process died"))

    def _fail_all(self, executor: ProcessPoolExecutor, error: BaseException) -> None:
        """Answer every task `executor` has not answered with `error` (each document is then a suspect)."""
        with self._lock:
            tasks = self._tasks.pop(executor, {})
            self._slots.pop(executor, None)
            self._reaped.add(executor)
        for task in tasks.values():
            _settle(task.outer, error=error)

    def _reap(self, broken: ProcessPoolExecutor) -> None:
        """Answer the tasks of a broken pool, once its executor's thread is done with it: fail those that a process
        which died on its own was running (or could have been: see below), and hand the rest to the next pool.

        Python's executor fails every task it holds when one process dies, and stops the others: SIGTERM
        (`exit_when_torn_down`: exit code TORN_DOWN), or the end mark it then puts on their queue (exit code 0; a
        document that makes its process exit 0 itself is taken for stopped, and is a suspect only once it has left
        MAX_MOVES pools). Only what the dead process ran can have killed it: the tasks it had queued, and those of
        the processes it stopped, go on in a fresh pool at no cost. Each process says in shared memory which task
        it runs (`_run`); a process that died with none marked died between two tasks (its next one being
        unpickled, maybe), so every task not marked as running elsewhere could have been the cause; one that died
        loading its models (LOADING) ran none.

        Python 3.11's executor can also lose a task when a process dies: a `submit` that checked the pool was whole
        just before the executor's thread marked it broken adds its task after that thread failed the tasks it had
        (never answered), or while it fails them, which kills that thread mid-way ("dictionary changed size during
        iteration": every task after it is never answered, and the processes left are never stopped). Those are
        answered here too (seen in `test_with_two_worker_threads_only_the_document_that_kills_its_process_fails`:
        2 runs in 10 hung)."""
        manager = getattr(broken, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(timeout=REAP_WAIT_S)  # it fails what it has within milliseconds, then stops its processes
        processes = list((getattr(broken, "_processes", None) or {}).values())
        died, stopped = set(), set()
        for process in processes:
            if process.is_alive():  # its executor's thread died or hung before stopping it
                process.kill()
                process.join(timeout=5)
                stopped.add(process.pid)
            elif process.exitcode in (0, TORN_DOWN):  # stopped by its executor: SIGTERM, or its queue's end mark
                stopped.add(process.pid)
            else:  # killed, out of memory, a crash in a native library
                died.add(process.pid)
        with self._lock:
            tasks = self._tasks.pop(broken, {})
            slots = self._slots.pop(broken, None)
            self._reaped.add(broken)  # a task still going in goes to the next pool (`_dispatch`)
        running = _running(slots)
        overdue: dict[int, str] = {}  # token -> why, for the tasks stopped at their deadline
        for process in processes:
            said = self._overdue.pop(process.pid, None)
            if said is None or process.pid not in died:
                continue
            token, why = said
            if running.get(process.pid) == token:
                overdue[token] = why
            else:  # its task ended as it was stopped: it died of the stop, not of what it ran next (or of nothing)
                died.discard(process.pid)
                stopped.add(process.pid)
        dead_ran = {running[pid] for pid in died if pid in running}
        unknown = any(pid not in running for pid in died)  # died between two tasks
        elsewhere = {running[pid] for pid in stopped if pid in running}
        failed = again = 0
        for task in tasks.values():
            if task.outer.done():
                continue
            if task.token in overdue:
                failed += _settle(task.outer, error=DocumentTimedOut(overdue[task.token]))
                continue
            if task.token in dead_ran or (unknown and task.token not in elsewhere) or task.moved >= MAX_MOVES:
                failed += _settle(task.outer, error=BrokenProcessPool("its CPU pool process died running it"))
                continue
            task.moved += 1
            again += 1
            try:
                self._dispatch(task)
            except BaseException as exc:  # closed meanwhile, say: answered, whatever it is
                _settle(task.outer, error=exc if isinstance(exc, Exception) else TransientError(repr(exc)))
        how = ", ".join(f"pid {p.pid} {_exit(p.exitcode)}" for p in processes if p.pid in died) or "none found dead"
        log.warning("a CPU pool process died (%s): %d of the documents in flight go back to the queue, to run alone "
                    "(%s); %d go on in a fresh pool", how, failed, "what it ran" if not unknown else "it died between "
                    "two documents: every one not running in another process", again)  # fmt: skip
        broken.shutdown(wait=False, cancel_futures=True)

    @property
    def closed(self) -> bool:
        """Whether the sidecar is leaving (`close` or `terminate` called): what its processes ran was stopped, not
        lost to a crash."""
        return self._closed

    def close(self) -> None:
        """Stop the processes once the documents running in them are done (the sidecar is leaving); documents not
        yet started are cancelled."""
        with self._lock:
            executor, self._executor, self._closed = self._executor, None, True
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
            self._fail_all(executor, CancelledError())  # a task lost as it went in (see `_reap`), if any
        self._end_watch()

    def terminate(self) -> None:
        """Stop the processes now, abandoning what they run (a shutdown past its grace period: the documents have
        been handed back already)."""
        with self._lock:
            executor, self._executor, self._closed = self._executor, None, True
        if executor is not None:
            kill(executor)
            self._fail_all(executor, BrokenProcessPool("the CPU pool was stopped"))
        self._end_watch()

    def _end_watch(self) -> None:
        self._stop_watching.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)

    def warm(self, timeout: float = 300.0) -> None:
        """Start every process and wait until each has loaded its models (`connector bench`: outside the clock)."""
        ready: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(ready) < self.processes and time.monotonic() < deadline:
            executor = self._current()
            try:
                with _spawning(executor, self.processes):
                    started = [executor.submit(_ready) for _ in range(4 * self.processes)]
                ready |= {f.result(timeout=max(1.0, deadline - time.monotonic())) for f in started}
            except BrokenProcessPool:  # a process died meanwhile: again, on a fresh pool
                self._replace(executor)
            except TimeoutError:  # still loading at the deadline: the documents will wait for it
                return

    @property
    def running_alone(self) -> str | None:
        """The source key of the suspect that has the pool to itself now, if one has (tests kill its process
        then)."""
        with self._turns:
            return self._alone

    def running(self) -> dict[int, list[str]]:
        """pid -> the source keys of the task each process of the current pool runs now (tests kill one)."""
        with self._lock:
            executor = self._executor
            by_token = {t.token: t for t in self._tasks.get(executor, {}).values()} if executor else {}
            slots = self._slots.get(executor) if executor else None
        out = {}
        for pid, token in _running(slots).items():
            if (task := by_token.get(token)) is not None:
                arg = task.arg if isinstance(task.arg, list) else [task.arg]
                out[pid] = [getattr(source, "source_key", "?") for source in arg]
        return out

    def pids(self) -> list[int]:
        """The processes' ids (tests kill one)."""
        with self._lock:
            processes = (getattr(self._executor, "_processes", None) or {}) if self._executor else {}
            return [p.pid for p in processes.values()]


@dataclasses.dataclass
class _Task:
    """A task handed to the pool: `fn(arg)`, answered through `outer` across the pools it goes through."""

    token: int  # what its process writes in its slot while running it
    fn: Callable
    arg: object
    outer: Future
    deadline_s: float | None  # how long it may run in a pool process (`deadline_s`); None: as long as it takes
    moved: int = 0  # broken pools it left at no cost (another document's death)


def deadline_s(settings: Settings, arg) -> float | None:
    """How long a task may run in a pool process: `document_timeout_seconds`, plus TIMEOUT_PER_MB_S for each MB of
    its documents' content (a long text takes about a second a MB), TIMEOUT_PER_PDF_MB_S for a PDF's (OCR of its
    scanned pages). None: no limit."""
    if not settings.document_timeout_seconds:
        return None
    sources = [s for s in (arg if isinstance(arg, list) else [arg]) if isinstance(s, SourceDocument)]
    allowance = sum(
        len(s.data) * (TIMEOUT_PER_PDF_MB_S if (s.mime_type or "").endswith("pdf") else TIMEOUT_PER_MB_S)
        for s in sources
    )
    return settings.document_timeout_seconds + allowance / 1_000_000


def _settle(future: Future, result: object = None, error: BaseException | None = None) -> bool:
    """Answer `future`, unless it was answered meanwhile (False)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        return False
    return True


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _running(slots) -> dict[int, int]:
    """pid -> the token of the task it runs now (or ran when it died), from a pool's slots."""
    return {pid: token for pid, (token, _) in _started(slots).items()}


def _started(slots) -> dict[int, tuple[int, int]]:
    """pid -> the token of the task it runs now (or ran when it died) and when that task started (`_now_ms`; 0 while
    loading), from a pool's slots."""
    if slots is None:
        return {}
    values = list(slots.get_obj())
    return {
        values[i]: (values[i + 1], values[i + 2]) for i in range(0, len(values), _STRIDE) if values[i] and values[i + 1]
    }


def _now_ms() -> int:
    """CLOCK_MONOTONIC in milliseconds: one clock for every process of the machine (a pool process writes when its
    task started, the sidecar reads it)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000)


def kill_tree(pid: int) -> None:
    """SIGKILL a pool process and every process under it. A document's conversion runs in processes of its own (a
    PDF's text extraction, OCR of its scans: two each); killed alone, the pool process left them behind for good,
    waiting on a queue nobody writes to again, or still spinning in the parser that hung. Stopped first (SIGSTOP),
    it starts none while they are looked for."""
    import psutil

    try:
        os.kill(pid, signal.SIGSTOP)
        below = psutil.Process(pid).children(recursive=True)
    except (ProcessLookupError, psutil.Error):
        below = []
    for process in below:
        with contextlib.suppress(psutil.Error):
            process.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill(executor: ProcessPoolExecutor) -> None:
    # NOTE: ProcessPoolExecutor only gained a public way to do this in Python 3.14 (`terminate_workers`), which
    # does the same: signal every process of `_processes`, then shut down without waiting for their results.
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=5)


def one_core() -> None:
    """In a pool process: native libraries compute on this process's own thread. The pool already runs one
    process per core; a second thread of OpenBLAS (a metric's matrix product) or of the tokenizers' thread pool
    (the static model's word pieces) only takes time from the process beside it, and their waiting threads spin."""
    import numpy  # noqa: F401 (loads the OpenBLAS to limit: threadpoolctl sees only loaded libraries)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read by `tokenizers` when it batches


def numpy_on_one_thread() -> None:
    """In the sidecar: OpenBLAS (numpy's) computes on the calling thread. Its matrix products here are small (a
    short document's span vectors, in worker threads when there is no pool), and a second BLAS thread spinning after
    each one doubled their CPU time. The embedding models bring their own thread pools (ONNX Runtime's, torch's
    MKL), left as they are."""
    import numpy  # noqa: F401 (loads the OpenBLAS to limit: threadpoolctl sees only loaded libraries)
    from threadpoolctl import ThreadpoolController

    ThreadpoolController().select(internal_api="openblas").limit(limits=1)


def exit_when_torn_down(parent: int) -> None:
    """In a pool process: ignore a SIGTERM from anyone but the sidecar that started it, and exit at once on one from
    the sidecar.

    Ctrl-C reaches the whole process group, and so does a SIGTERM sent to it (systemd's default): the sidecar
    decides what stops and when, not its pool. But the sidecar sends one too: when a pool process dies, Python's
    `ProcessPoolExecutor` tears the broken pool down by sending SIGTERM to the processes left, then waits for each
    to exit. One that ignored it stayed behind for good (a result it was sending nobody reads; or waiting for a
    queue lock the dead one held), with the executor's thread waiting on it, so the sidecar could no longer stop and
    each death left one more process.

    So one thread reads SIGTERM (`sigwaitinfo`, which tells who sent it) while every other thread blocks it. They
    all must, or the kernel hands the signal to one that does not (which dies of it): the process was started with
    SIGTERM blocked (`_spawning`), before any thread of its imports (OpenBLAS starts some) existed, and threads inherit
    their creator's mask. A process that did not start that way (or a platform without `sigwaitinfo`: macOS) ignores
    SIGTERM, as before; `CpuPool._replace` then kills what a broken pool leaves once its documents have failed."""
    inherited = hasattr(signal, "sigwaitinfo") and signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if not inherited:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return

    def watch() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(TORN_DOWN)

    threading.Thread(target=watch, name="teardown-watch", daemon=True).start()


@contextlib.contextmanager
def _spawning(executor: ProcessPoolExecutor, processes: int):
    """Around a call that may start a pool process (with the spawn method, `ProcessPoolExecutor.submit` starts one
    whenever none is idle, up to `processes`): SIGTERM blocked in this thread, a mask that they inherit through fork
    and exec (see `exit_when_torn_down`). A SIGTERM sent to the sidecar meanwhile waits, or goes to another of its
    threads. Once the pool is full, nothing: the resource tracker's check below costs it a wake-up each time."""
    if not hasattr(signal, "pthread_sigmask") or len(getattr(executor, "_processes", None) or {}) >= processes:
        yield
        return
    # multiprocessing's resource tracker is started (again, if it died) before each process: starting it, it unblocks
    # SIGTERM in the calling thread. Started here first, it is found running there.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def exit_with_parent(parent: int) -> None:
    """In a pool process: exit as soon as the sidecar that started it is gone (killed with SIGKILL, say), so no
    pool process (nor the resource tracker, which lives as long as any of them) is left running under init."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# In each pool process: what `_start` loaded, used by every document it takes (or why it could not load).
_chooser = None
_start_error: ConnectorError | None = None
_settings: Settings | None = None
_slot: tuple | None = None  # this process's slot: (the pool's shared values, the index of its token)


def _start(settings: Settings, parent: int, slots) -> None:
    global _settings, _slot
    # Ctrl-C (and a hangup) reaches the whole process group: the sidecar decides what stops and when, not its pool
    # (SIGTERM: see `exit_when_torn_down`, first, so that every thread of this process starts with it blocked). A
    # SIGKILLed sidecar is noticed by `exit_with_parent`.
    exit_when_torn_down(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal's hangup, sent to the group: as Ctrl-C
    exit_with_parent(parent)
    with slots.get_lock():  # this process's slot: the first free one (slots of processes that died stay taken)
        values = slots.get_obj()
        free = next((i for i in range(0, len(values), _STRIDE) if values[i] == 0), None)
        if free is not None:
            values[free], values[free + 1] = os.getpid(), LOADING
    _slot = None if free is None else (values, free + 1)  # none: its deaths blame every task (see `_reap`)
    from connector import secrets

    allocator.tune()
    one_core()
    from connector.logs import handler

    secrets.register(settings)  # masked in this process's log lines too
    logging.basicConfig(level=logging.WARNING, handlers=[handler(settings.log_format)])
    _settings = settings
    _load()
    if _slot is not None:
        _slot[0][_slot[1]] = 0  # loaded: a death from now on is a task's, or between two


def _load() -> None:
    global _chooser, _start_error
    try:
        from connector.pipeline import Chooser

        _chooser = Chooser.load(_settings, parallel=False)  # documents run side by side: strategies one by one
        _start_error = None
        allocator.freeze_loaded()  # the models and chunkers live as long as the process
    except Exception as exc:
        # Not a document's fault, and not a dying process (which would cost every document in flight a try): the
        # document is answered with this error, transient (retried with backoff) unless it is a configuration's;
        # the next document tries loading again (memory may have been short only while every process loaded).
        log.warning("a CPU pool process could not load its models: %s: %s", type(exc).__name__, exc)
        kind = FatalError if isinstance(exc, FatalError) else TransientError
        _start_error = kind(f"a CPU pool process could not load its models: {type(exc).__name__}: {exc}")


def _run(token: int, fn: Callable, arg):
    """`fn(arg)`, with this process's slot saying meanwhile that it runs task `token` (read by the sidecar when
    this process dies: `CpuPool._reap`). A long document's result goes back `_Packed`, its memory released first."""
    if _slot is None:
        return _released(fn(arg), arg)
    values, at = _slot
    values[at + 1] = _now_ms()  # before the token: whoever sees the token sees when it started (`CpuPool._watch`)
    values[at] = token
    try:
        return _released(fn(arg), arg)
    finally:
        values[at] = 0
        values[at + 1] = 0


@dataclasses.dataclass(frozen=True)
class _Packed:
    """A result pickled in the pool process, so that the objects it was made of could be freed, and their memory
    given back, before it is sent (the executor pickles what a task returns only after the task has returned)."""

    data: bytes

    def load(self):
        return pickle.loads(self.data)


def _released(result, arg):
    sources = arg if isinstance(arg, list) else [arg]
    read = sum(len(s.data) for s in sources if isinstance(s, SourceDocument))
    pairs = result if isinstance(arg, list) else [(True, result)]  # `_choose_many`'s (ok, Chosen or exception)
    text = sum(allocator.text_size(value) for ok, value in pairs if ok)
    del pairs  # nothing but `result` may hold it when it is freed below
    if max(read, text) < allocator.RELEASE_AFTER_BYTES:
        return result
    packed = _Packed(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    del result
    tokens.forget()  # the document's one encoding and line tables: 200 MB for 50 MB of text, kept till the next
    allocator.release()
    return packed


def _ready() -> int:
    if _chooser is None:
        _load()
    return os.getpid()


def _choose(source: SourceDocument):
    if _chooser is None:
        _load()
    if _chooser is None:
        raise _start_error or TransientError("a CPU pool process has no pipeline")
    try:
        return _chooser.choose(source).shipped()
    except Exception as exc:
        try:  # an exception the sidecar could not unpickle would break the pool for every document in flight
            pickle.loads(pickle.dumps(exc))
        except Exception:
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        raise
    except BaseException as exc:  # a library calling sys.exit(): this document's error, not the worker thread's
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


def _choose_many(sources: list[SourceDocument]) -> list[tuple[bool, object]]:
    """`_choose` of each document of a group: (True, its `Chosen`) or (False, the exception it raised)."""
    out: list[tuple[bool, object]] = []
    for source in sources:
        try:
            out.append((True, _choose(source)))
        except Exception as exc:  # `_choose` made it one the sidecar can unpickle
            out.append((False, exc))
    return out


def _resolve(task: Future, futures: list[Future]) -> None:
    """Each document's future from its group's task: its own result or error, or the task's error for all."""
    if task.cancelled():  # the pool was shut down before the group started
        error: BaseException | None = CancelledError()
    else:
        error = task.exception()
    if error is not None:
        for future in futures:
            future.set_exception(error)
        return
    for future, (ok, value) in zip(futures, task.result(), strict=True):
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
