"""The CPU pool (`connector.pool`) against a real Postgres and real processes: documents chosen in pool processes
are written as the worker's own, a bad one fails alone across the process boundary, and a pool process killed with
SIGKILL loses nothing: what it had in flight is claimed again alone, and a document that kills its process every
time fails after its tries while the others go through."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import string
import threading
import time

import psycopg
import pytest

from connector.db.database import connect
from connector.embedders.fake import FakeEmbedder
from connector.pipeline import Pipeline
from connector.pool import CpuPool, size_of, usable_cores
from connector.settings import Settings
from connector.worker import Worker
from tests.conftest import FIXTURES, wait_for
from tests.dbchecks import assert_consistent
from tests.test_batches import PARAGRAPHS, CorruptingPipeline, _insert, _spoil, _status

BIG = (FIXTURES / "apache-2.0.txt").read_text() * 40  # ~450 KB of text: seconds in a pool process


@pytest.fixture
def pool(settings: Settings):
    made = CpuPool(settings, 2)
    yield made
    pids = made.pids()
    made.close()
    assert not [p for p in pids if _alive(p)], "no pool process outlives the pool"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_the_pool_size_follows_the_cores_the_cgroup_quota_and_the_setting(settings: Settings, tmp_path) -> None:
    cores = usable_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert size_of(settings.model_copy(update={"cpu_processes": None})) == (cores if cores > 1 else 0)
    assert size_of(settings.model_copy(update={"cpu_processes": 0})) == 0
    assert size_of(settings.model_copy(update={"cpu_processes": 3})) == 3
    cpu_max = tmp_path / "cpu.max"  # cgroup v2's file, as a container limited to 1.5 CPUs has it
    cpu_max.write_text("150000 100000\n")
    assert usable_cores(cpu_max) == min(2, len(os.sched_getaffinity(0)))
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == len(os.sched_getaffinity(0))
    cpu_max.write_text("50000 100000\n")
    assert usable_cores(cpu_max) == 1


def test_documents_chosen_in_pool_processes_are_written_and_a_bad_one_fails_alone(settings, pool) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 12)
        _spoil(conn, unwritable=ids[3], corrupt=ids[6])
        s = settings.model_copy(update={"batch_size": 12, "max_attempts": 1})
        pipeline = CorruptingPipeline(s, FakeEmbedder(), pool=pool)
        assert pipeline.in_flight == 64
        # Groups of sixteen, fewer where a small batch would leave a pool process idle.
        assert [pipeline.group_of(n) for n in (1, 2, 3, 4, 7, 8, 12, 32, 128)] == [1, 1, 1, 2, 3, 4, 6, 16, 16]
        results: dict[int, str] = {}
        tasks = pool.tasks
        Worker(conn, pipeline, []).drain(threading.Event(), lambda row, result: results.__setitem__(row.id, result))
        # Short rows went to the pool six at a time (a batch of 12, two pool processes), each with its own outcome
        # (the unwritable one was in a group): rows 1-6, 8-12, then the PDF (not short: it goes alone, after the
        # batch's short rows).
        assert pool.tasks - tasks == 3
        assert results[ids[3]] == "failed" and results[ids[6]] == "failed"
        assert [results[i] for i in ids if i not in (ids[3], ids[6])] == ["done"] * 10
        errors = dict(conn.execute("SELECT id, last_error FROM connector.documents WHERE status = 'failed'"))
        assert "PDF" in errors[ids[6]], "the conversion error crossed the process boundary with its message"
        assert "0x00" in errors[ids[3]] or "NUL" in errors[ids[3]], errors[ids[3]]
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (10,)
        assert_consistent(conn)
        # The stages ran elsewhere; their time is still this pipeline's (`connector bench`, /metrics).
        assert pipeline.totals.ms["convert"] > 0 and pipeline.totals.ms["metric:sc"] > 0
        assert len(pool.pids()) == 2 and os.getpid() not in pool.pids()
        # The same documents chosen here, in this thread, win with the same strategies and scores.
        here = Pipeline(s, FakeEmbedder())
        stored = dict(conn.execute("SELECT id, score FROM connector.documents WHERE status = 'done'").fetchall())
        for doc_id in list(stored)[:3]:
            source = Store_row_source(conn, doc_id)
            assert here.choose(source).winner.score == pytest.approx(stored[doc_id], abs=1e-9)


def test_a_document_that_fails_in_the_pool_fails_alone_in_its_group(settings: Settings, pool: CpuPool) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 8)
        # Short, so grouped with three others; nothing visible in it, so its conversion raises in the pool process.
        conn.execute("UPDATE connector.documents SET content = %s WHERE id = %s", ("\u200b" * 40, ids[2]))
        s = settings.model_copy(update={"batch_size": 8, "max_attempts": 3})
        results: dict[int, str] = {}
        tasks = pool.tasks
        Worker(conn, Pipeline(s, FakeEmbedder(), pool=pool), []).drain(
            threading.Event(), lambda row, result: results.__setitem__(row.id, result)
        )
        assert pool.tasks - tasks == 2, "eight short rows, two groups"
        assert results == {i: "failed" if i == ids[2] else "done" for i in ids}
        error = conn.execute("SELECT last_error FROM connector.documents WHERE id = %s", (ids[2],)).fetchone()[0]
        assert "no visible text" in error
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (7,)
        assert_consistent(conn)


def test_a_pool_process_killed_with_a_group_in_flight_loses_none_of_it(settings: Settings, pool: CpuPool) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 8)
        pool.warm()
        killed: list[int] = []

        class KillingPipeline(Pipeline):
            def start_many(self, sources, while_waiting):
                if killed:
                    return super().start_many(sources, while_waiting)
                # The processes are stopped before the group reaches them, and killed once it is theirs: it can
                # neither finish first nor be missed.
                pids = pool.pids()
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                futures = super().start_many(sources, while_waiting)
                killed.extend(_kill_pool(pool))
                return futures

        s = settings.model_copy(update={"batch_size": 8, "max_attempts": 3})
        worker = Worker(conn, KillingPipeline(s, FakeEmbedder(), pool=pool), [])
        results: list[tuple[int, str]] = []
        while worker.drain(threading.Event(), lambda row, result: results.append((row.id, result))):
            pass
        assert len(killed) == 2 and pool.restarts >= 1
        assert _status(conn) == {"done": 8}, "nothing lost"
        claims = dict(conn.execute("SELECT id, attempts FROM connector.documents").fetchall())
        # The first group was in the dead process: each of its documents claimed again, alone, and done. (The
        # second may have been handed to the pool before its death was noticed: then it went the same way.)
        assert [claims[i] for i in ids[:4]] == [2, 2, 2, 2] and all(claims[i] in (1, 2) for i in ids[4:])
        for i in ids:
            assert [r for j, r in results if j == i] == ["retry", "done"][2 - claims[i] :]
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (8,)
        assert_consistent(conn)


def test_a_suspect_arriving_while_a_group_enters_the_pool_stalls_neither(settings, pool, monkeypatch) -> None:
    """A group enters the pool in one step. Were its documents entered one by one, a suspect arriving between two of
    them would wait for the first (which cannot finish before the group is handed over) and the rest of the group
    for the suspect, both until SUSPECT_WAIT_S ran out. Seen, not timed: the group never waits (its `while_waiting`
    is called only while a document waits for its turn), and the suspect runs alone once the group is done."""
    import connector.pool as pool_module
    from connector.models import SourceDocument

    # Short, so that the deadlock, were it back, ends and the test fails on what it saw rather than hanging; it
    # cannot be reached otherwise: the group enters before the suspect arrives, and a suspect has no deadline.
    monkeypatch.setattr(pool_module, "SUSPECT_WAIT_S", 2.0)
    pool.warm()

    def doc(key: str) -> SourceDocument:
        data = f"Document {key}. It has two sentences.".encode()
        return SourceDocument(0, "sql", key, None, data, "text/plain", "")

    suspect: list = []
    enter = pool._enter

    def enter_then_a_suspect_arrives(alone, key, while_waiting, count=1):
        enter(alone, key, while_waiting, count)
        if key == "g0":  # the group's first (or only) entry: a suspect arrives now, from another thread
            thread = threading.Thread(target=lambda: suspect.append(pool.submit(doc("s"), alone=True)))
            thread.start()
            wait_for(lambda: pool._suspects_waiting or suspect, timeout=120, what="the suspect waiting its turn")
            suspect.append(thread)

    submitted: list[tuple[str | None, int]] = []  # who is in the pool as each task is handed over
    submit = pool._submit

    def record_then_submit(fn, arg):
        submitted.append((pool._alone, pool._shared))
        return submit(fn, arg)

    monkeypatch.setattr(pool, "_enter", enter_then_a_suspect_arrives)
    monkeypatch.setattr(pool, "_submit", record_then_submit)
    group_waited: list[int] = []
    group = pool.submit_many([doc(f"g{i}") for i in range(4)], lambda: group_waited.append(1))
    assert all(f.result(timeout=120).winner for f in group)
    thread = next(x for x in suspect if isinstance(x, threading.Thread))
    thread.join(120)
    assert next(x for x in suspect if not isinstance(x, threading.Thread)).result(timeout=120).winner
    assert not group_waited, "the group waited for the suspect, which waited for the group"
    assert submitted == [(None, 4), ("s", 0)], "the group handed over whole, then the suspect alone"
    assert (pool._shared, pool._alone, pool._suspects_waiting) == (0, None, 0)


def _doc(key: str, text: str = "A short document. It has two sentences."):
    from connector.models import SourceDocument

    return SourceDocument(0, "sql", key, None, text.encode(), "text/plain", "")


def _running(pool: CpuPool, keys: set[str]) -> dict[int, list[str]]:
    """Wait until the pool's processes run the documents `keys`; pid -> what each runs, as seen then (read again,
    a fast machine may have finished one meanwhile)."""

    def seen() -> dict[int, list[str]] | None:
        now = pool.running()
        return now if {k for ks in now.values() for k in ks} >= keys else None

    return wait_for(seen, timeout=60, interval=0.005, what=f"{keys} running")


def test_a_pool_process_death_costs_only_what_that_process_ran(pool) -> None:
    """Each pool process says which document it runs: when one dies, only its document is to blame (and becomes a
    suspect); the one running beside it and those queued go on in a fresh pool, at no cost."""
    from concurrent.futures.process import BrokenProcessPool

    pool.warm()
    culprit, beside = pool.submit(_doc("culprit", BIG)), pool.submit(_doc("beside", BIG))
    queued = [pool.submit(_doc(f"queued{i}")) for i in range(6)]
    pid = next(pid for pid, keys in _running(pool, {"culprit", "beside"}).items() if keys == ["culprit"])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(BrokenProcessPool):
        culprit.result(timeout=60)
    assert beside.result(timeout=180).winner
    assert all(f.result(timeout=60).winner for f in queued)
    assert pool.restarts == 1
    assert (pool._shared, pool._alone) == (0, None)


def test_a_pool_process_that_dies_between_documents_blames_every_one_not_running_elsewhere(pool) -> None:
    """A process that dies with no document marked as its own died between two (reading the next one, maybe): any
    document not running in another process could be the cause. Here the idle process is stopped while it waits
    on the pool's queue (it holds the queue's lock: the document submitted next stays in the pipe), then killed."""
    from concurrent.futures.process import BrokenProcessPool

    pool.warm()
    running = pool.submit(_doc("running", BIG))
    busy = next(iter(_running(pool, {"running"})))
    idle = next(pid for pid in pool.pids() if pid != busy)
    os.kill(idle, signal.SIGSTOP)
    try:
        unread = pool.submit(_doc("unread"))
        time.sleep(0.5)
    finally:
        os.kill(idle, signal.SIGKILL)
    with pytest.raises(BrokenProcessPool):
        unread.result(timeout=60)
    assert running.result(timeout=180).winner, "it ran in a process that did not die: it goes on, at no cost"
    assert pool.restarts == 1


def test_a_task_submitted_as_a_process_dies_is_answered(pool, monkeypatch) -> None:
    """Python 3.11's executor checks that its pool is whole, then adds the task: a process that dies in between
    leaves that task to be added after the executor's thread failed the ones it had (or while it fails them, which
    kills that thread). Nobody would answer it: a worker would wait on it for good, and the suspects of that death
    for the pool to empty (`CpuPool._reap`). The window is a few bytecodes wide; here the task waits in it."""
    import concurrent.futures.process as cfp
    from concurrent.futures.process import BrokenProcessPool

    pool.warm()
    in_the_window, widen = threading.Event(), threading.Event()

    class WorkItem(cfp._WorkItem):
        def __init__(self, *args, **kwargs):
            if widen.is_set():  # `submit` holds the pool's lock and has found it whole
                widen.clear()
                in_the_window.set()
                time.sleep(1.5)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cfp, "_WorkItem", WorkItem)
    running = pool.submit(_doc("big", BIG))
    pid = next(iter(_running(pool, {"big"})))
    late: list = []
    widen.set()
    submitter = threading.Thread(target=lambda: late.append(pool.submit(_doc("late"))))
    submitter.start()
    assert in_the_window.wait(10)
    os.kill(pid, signal.SIGKILL)
    submitter.join(30)
    with pytest.raises(BrokenProcessPool):
        running.result(timeout=60)
    assert late[0].result(timeout=120).winner, "answered: it never ran, so it went to the fresh pool"
    assert (pool._shared, pool._alone) == (0, None), "the pool is free for the suspects"


def test_a_group_resolves_each_document_on_its_own() -> None:
    from concurrent.futures import CancelledError, Future
    from concurrent.futures.process import BrokenProcessPool

    from connector.errors import DocumentError
    from connector.pool import _resolve

    def group(n: int) -> list[Future]:
        futures = [Future() for _ in range(n)]
        for f in futures:
            f.set_running_or_notify_cancel()
        return futures

    task: Future = Future()
    task.set_result([(True, "a"), (False, DocumentError("bad")), (True, "c")])
    futures = group(3)
    _resolve(task, futures)
    assert futures[0].result() == "a" and futures[2].result() == "c"
    assert isinstance(futures[1].exception(), DocumentError)
    task = Future()
    task.set_exception(BrokenProcessPool("a process died"))
    futures = group(2)
    _resolve(task, futures)
    assert all(isinstance(f.exception(), BrokenProcessPool) for f in futures)
    task = Future()
    task.cancel()  # the pool shut down before the group started
    futures = group(2)
    _resolve(task, futures)
    for f in futures:
        with pytest.raises(CancelledError):
            f.result()


def Store_row_source(conn: psycopg.Connection, doc_id: int):  # noqa: N802 - reads like the row it builds
    from connector.models import SourceDocument

    key, content = conn.execute(
        "SELECT source_key, content FROM connector.documents WHERE id = %s", (doc_id,)
    ).fetchone()
    return SourceDocument(doc_id, "sql", key, None, content.encode(), "text/plain", "")


def _running_alone(conn: psycopg.Connection, doc_id: int) -> int | None:
    """The claim token of `doc_id` while it is held (live lease) and every other row is finished: the rows of its
    batch are written before a long document starts, so it is then the one in the pool."""
    row = conn.execute("""
        SELECT attempts FROM connector.documents
        WHERE id = %(id)s AND status = 'processing' AND lease_expires_at > now()
          AND NOT EXISTS (SELECT 1 FROM connector.documents WHERE id <> %(id)s AND status IN ('pending', 'processing'))
    """, {"id": doc_id}).fetchone()  # fmt: skip
    return row[0] if row else None


def _kill_pool(pool: CpuPool) -> list[int]:
    return _kill(pool.pids())


def _kill(pids: list[int]) -> list[int]:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _running_it(pool: CpuPool, key: str) -> list[int]:
    """The pool processes running the document `key` now (as each says in its slot), not loading its models or
    waiting for it."""
    return [pid for pid, keys in pool.running().items() if key in keys]


def test_a_pool_process_killed_mid_batch_loses_nothing(settings: Settings, pool: CpuPool) -> None:
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        ids = _insert(conn, 16)
        big = conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('big', %s) RETURNING id",
                           (BIG,)).fetchone()[0]  # fmt: skip
        s = settings.model_copy(update={"batch_size": 32, "max_attempts": 3})
        pipeline = Pipeline(s, FakeEmbedder(), pool=pool)
        killed: list[int] = []

        def kill_while_the_big_one_runs() -> None:
            with psycopg.connect(dsn, autocommit=True) as watch:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not killed:
                    if _running_alone(watch, big) and _running_it(pool, "big"):  # in a process, not on its way
                        killed.extend(_kill_pool(pool))
                    time.sleep(0.01)

        killer = threading.Thread(target=kill_while_the_big_one_runs)
        killer.start()
        results: list[tuple[int, str]] = []
        worker = Worker(conn, pipeline, [])
        try:
            while worker.drain(threading.Event(), lambda row, result: results.append((row.id, result))):
                pass
        finally:
            killer.join()
        assert killed, "a pool process was killed while it ran the big document"
        assert pool.restarts >= 1
        assert _status(conn) == {"done": 17}, "nothing lost"
        claims = dict(conn.execute("SELECT id, attempts FROM connector.documents").fetchall())
        assert claims[big] == 2, "the document in flight was claimed again (alone), once"
        assert ("retry" in {r for i, r in results if i == big}) and [r for i, r in results if i == big][-1] == "done"
        assert all(claims[i] == 1 for i in ids), "the short rows were written before the big one started"
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (17,)
        assert_consistent(conn)


def test_a_document_that_kills_its_pool_process_every_time_fails_alone(settings: Settings, pool: CpuPool) -> None:
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        ids = _insert(conn, 6)
        poison = conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('poison', %s) "
                              "RETURNING id", (BIG,)).fetchone()[0]  # fmt: skip
        s = settings.model_copy(update={"batch_size": 32, "max_attempts": 3, "retry_base_seconds": 0.0})
        worker = Worker(conn, Pipeline(s, FakeEmbedder(), pool=pool), [])
        stop = threading.Event()
        kills = []

        def kill_whenever_the_poison_runs() -> None:  # as a document that crashes a native library would
            with psycopg.connect(dsn, autocommit=True) as watch:
                while not stop.is_set():
                    token = _running_alone(watch, poison)
                    # Once it runs in a process, not a fixed time after its claim: a pool started after a death
                    # loads its models first (a process killed then has run nothing), and on a fast machine the
                    # document may finish within such a time.
                    if token and token not in [k for k, _ in kills] and (running := _running_it(pool, "poison")):
                        kills.append((token, _kill(running)))
                    time.sleep(0.01)

        killer = threading.Thread(target=kill_whenever_the_poison_runs)
        killer.start()
        try:
            deadline = time.monotonic() + 120
            while _status(conn) != {"done": 6, "failed": 1} and time.monotonic() < deadline:
                worker.drain(threading.Event())
        finally:
            stop.set()
            killer.join()
        assert _status(conn) == {"done": 6, "failed": 1}
        status, error = conn.execute("SELECT status, last_error FROM connector.documents WHERE id = %s",
                                     (poison,)).fetchone()  # fmt: skip
        assert status == "failed" and "gave up after 3 tries" in error and "CPU process" in error, error
        assert len(kills) == 3, "killed on each of its tries, and then never run again"
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (6,)
        assert set(dict(conn.execute("SELECT id, status FROM connector.documents WHERE status = 'done'"))) == set(ids)
        assert_consistent(conn)


def test_a_pool_that_cannot_load_its_models_retries_with_backoff_and_kills_no_document(settings, tmp_path) -> None:
    """A pool process whose models cannot load (here: the models folder is a file) is not a document killing its
    process: each document gets the loading error as a transient failure, with backoff, and no try is blamed on a
    death."""
    (tmp_path / "file").write_text("not a folder")
    broken = settings.model_copy(update={"models_dir": tmp_path / "file" / "models"})
    pool = CpuPool(broken, 1)
    try:
        with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
            ids = _insert(conn, 3)
            s = settings.model_copy(update={"max_attempts": 5, "retry_base_seconds": 60.0})
            results: dict[int, str] = {}
            Worker(conn, Pipeline(s, FakeEmbedder(), pool=pool), []).drain(
                threading.Event(), lambda row, result: results.__setitem__(row.id, result)
            )
            assert results == {i: "retry" for i in ids}
            rows = conn.execute("SELECT status, retries, retry_after > now() + interval '30 seconds', last_error "
                                "FROM connector.documents ORDER BY id").fetchall()  # fmt: skip
            for status, retries, backing_off, error in rows:
                assert (status, retries, backing_off) == ("pending", 1, True)
                assert "could not load its models" in error and "NotADirectoryError" in error, error
            assert pool.restarts == 0, "the pool did not break: its process stayed up and answered"
    finally:
        pool.close()


def test_with_two_worker_threads_only_the_document_that_kills_its_process_fails(settings, pool) -> None:
    """Documents in flight when a pool process dies are suspects: each is claimed again alone and runs alone in the
    pool, so when the culprit kills its process again, no document of another worker thread is in there with it."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        ids = _insert(conn, 4, "a") + _insert(conn, 4, "b")
        poison = conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('poison', %s) "
                              "RETURNING id", (BIG,)).fetchone()[0]  # fmt: skip
        ids += _insert(conn, 8, "c")
    s = settings.model_copy(update={"batch_size": 4, "max_attempts": 3, "retry_base_seconds": 0.0})
    stop = threading.Event()
    kills: list[int] = []

    def kill_whenever_the_poison_runs() -> None:
        with psycopg.connect(dsn, autocommit=True) as watch:
            while not stop.is_set():
                row = watch.execute("SELECT attempts FROM connector.documents WHERE id = %s AND status = "
                                    "'processing' AND lease_expires_at > now()", (poison,)).fetchone()  # fmt: skip
                # A document that crashes its process does so while it runs: on its first try beside others, then
                # alone (a suspect waits for the pool to empty, and that wait must not be mistaken for running).
                # Alone, it must be the poison that has the pool: the documents that were in flight beside it at the
                # first death are suspects too, and each of them also runs alone.
                # The whole pool is killed: at the first death, what runs beside the poison is caught too.
                if (row and row[0] not in kills and (not kills or pool.running_alone == "poison")
                        and _running_it(pool, "poison")):  # fmt: skip
                    kills.append(row[0])
                    _kill_pool(pool)
                time.sleep(0.01)

    def work() -> None:
        with connect(dsn, autocommit=True) as own:
            worker = Worker(own, Pipeline(s, FakeEmbedder(), pool=pool), [])
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                if not worker.drain(stop):
                    time.sleep(0.1)

    killer = threading.Thread(target=kill_whenever_the_poison_runs)
    workers = [threading.Thread(target=work) for _ in range(2)]
    for t in [killer, *workers]:
        t.start()
    try:
        with connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            while _status(conn) != {"done": 16, "failed": 1} and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        stop.set()
        for t in [killer, *workers]:
            t.join()
    with connect(dsn, autocommit=True) as conn:
        assert _status(conn) == {"done": 16, "failed": 1}
        error = conn.execute("SELECT last_error FROM connector.documents WHERE id = %s", (poison,)).fetchone()[0]
        assert "gave up after 3 tries" in error, error
        assert len(kills) == 3
        claims = dict(conn.execute("SELECT id, attempts FROM connector.documents WHERE id <> %s", (poison,)).fetchall())
        # Only the first death can catch another document in the pool (the culprit was not yet a suspect).
        assert all(claims[i] <= 2 for i in ids), claims
        assert_consistent(conn)


def test_the_leases_of_documents_in_the_pool_are_renewed_while_the_worker_waits(settings, pool) -> None:
    """A 1-second lease and a document that takes seconds in the pool: the worker renews it (from its own thread,
    while it waits), so nobody could claim it meanwhile and its result is written, not dropped.

    The pool's processes are stopped (SIGSTOP) for 3 s while the document is in the pool, as a starved or paused
    process would be, so that it outlives its lease several times on a machine of any speed."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        big = conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('big', %s) RETURNING id",
                           (BIG,)).fetchone()[0]  # fmt: skip
        s = settings.model_copy(update={"lease_seconds": 1})
        expired: list[bool] = []
        stop = threading.Event()

        def watch() -> None:
            with psycopg.connect(dsn, autocommit=True) as other:
                while not stop.is_set():
                    row = other.execute("SELECT status = 'processing' AND lease_expires_at < now() "
                                        "FROM connector.documents WHERE id = %s", (big,)).fetchone()  # fmt: skip
                    expired.append(bool(row and row[0]))
                    time.sleep(0.1)

        paused: list[int] = []

        def pause() -> None:
            with psycopg.connect(dsn, autocommit=True) as other:
                while not stop.is_set():
                    row = other.execute("SELECT status FROM connector.documents WHERE id = %s", (big,)).fetchone()
                    if row == ("processing",) and pool.pids():
                        break
                    time.sleep(0.02)
            if stop.is_set():
                return
            paused.extend(pool.pids())
            try:
                for pid in paused:
                    os.kill(pid, signal.SIGSTOP)
                stop.wait(3)
            finally:
                for pid in paused:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)

        threads = [threading.Thread(target=watch), threading.Thread(target=pause)]
        for t in threads:
            t.start()
        results: list[str] = []
        try:
            Worker(conn, Pipeline(s, FakeEmbedder(), pool=pool), []).drain(
                threading.Event(), lambda row, result: results.append(result)
            )
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert paused, "the pool's processes were stopped while the document was in the pool"
        assert len(expired) > 25, "the watcher looked at the lease for the 3 s the pool was stopped"
        assert results == ["done"] and not any(expired), "its lease never ran out"
        assert conn.execute("SELECT attempts FROM connector.documents WHERE id = %s", (big,)).fetchone() == (1,)


def test_a_chosen_document_crosses_processes_with_every_field_of_every_object(tmp_path, models_dir) -> None:
    """The stage values pickle as (class, field values) (`models._pickled_by_value`): a field left out, or given to
    the wrong parameter, would reach the sidecar wrong without an error."""
    import dataclasses
    import pickle

    from connector.models import SourceDocument
    from connector.pipeline import Chooser

    settings = Settings(data_dir=tmp_path, models_dir=models_dir)
    data = (FIXTURES / "dockerfile-reference.md").read_bytes()[:20_000]
    source = SourceDocument(7, "folder", "docs/dockerfile.md", None, data, "text/markdown", "hash")
    chosen = Chooser.load(settings, parallel=False).choose(source)
    again = pickle.loads(pickle.dumps(chosen, protocol=pickle.HIGHEST_PROTOCOL))
    assert dataclasses.astuple(pickle.loads(pickle.dumps(source))) == dataclasses.astuple(source)
    assert dataclasses.astuple(again.document) == dataclasses.astuple(chosen.document)
    assert [dataclasses.astuple(s) for s in again.scored] == [dataclasses.astuple(s) for s in chosen.scored]
    assert dataclasses.astuple(again.winner) == dataclasses.astuple(chosen.winner)
    assert len(chosen.document.blocks) > 10 and any(len(s.candidate.chunks) > 3 for s in chosen.scored)


def _slow_row(i: int) -> str:
    """A short row (under 20 KB) that takes a pool process a few tenths of a second, where a row of prose takes
    milliseconds: one 19,000-letter word, which the BPE tokenizer merges slowly."""
    rng = random.Random(i)
    return "".join(rng.choice(string.ascii_letters) for _ in range(19_000))


def _insert_slow(conn: psycopg.Connection, ids: list[int]) -> None:
    for doc_id in ids:
        conn.execute("UPDATE connector.documents SET content = %s WHERE id = %s", (_slow_row(doc_id), doc_id))


def test_a_slow_document_holds_up_none_of_those_finished_behind_it(settings, pool, monkeypatch) -> None:
    """The worker used to wait for the documents in flight oldest first: rows finished behind a slow one waited for
    it, however long it took, and their write with them (the second pool process meanwhile idle). Now each is taken
    as it finishes and written once the first has waited FLUSH_SECONDS."""
    import connector.worker

    monkeypatch.setattr(connector.worker, "FLUSH_SECONDS", 0.05)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 8)
        # Rows 1-4 run as one group in one process, two slow ones first (so that the group is seen running before
        # it ends); rows 5-8 in the other.
        _insert_slow(conn, ids[:2])
        first = conn.execute("SELECT source_key FROM connector.documents WHERE id = %s", (ids[0],)).fetchone()[0]
        pool.warm()  # both processes up with their models: neither takes what the other would
        pipeline = Pipeline(settings.model_copy(update={"batch_size": 8}), FakeEmbedder(), pool=pool)
        drained: list[int] = []

        def drain() -> None:
            with connect(settings.dsn.get_secret_value(), autocommit=True) as own:
                drained.append(Worker(own, pipeline, []).drain(threading.Event()))

        worker = threading.Thread(target=drain)
        worker.start()
        # However fast or slow the machine, the slow group's process is held still until rows 5-8 are committed:
        # before, they waited for it (then forever here); now they are written FLUSH_SECONDS after finishing.
        held = next(pid for pid, keys in _running(pool, {first}).items() if first in keys)
        os.kill(held, signal.SIGSTOP)
        try:
            behind = "SELECT count(*) = 4 FROM connector.documents WHERE id = ANY(%s) AND status = 'done'"
            wait_for(lambda: conn.execute(behind, (ids[4:],)).fetchone()[0], timeout=60, what="rows 5-8 written")
        finally:
            os.kill(held, signal.SIGCONT)
            worker.join(120)
        assert drained == [8]
        assert _status(conn) == {"done": 8}
        at = dict(conn.execute("SELECT id, processed_at FROM connector.documents").fetchall())
        assert max(at[i] for i in ids[4:]) < min(at[i] for i in ids[:2]), "rows 5-8 were committed before the slow"
        assert_consistent(conn)


def test_rows_claimed_behind_a_long_document_are_written_before_it_starts(settings, pool, tmp_path) -> None:
    """A document that is not short runs alone and its worker waits for it; the rows claimed after it in the same
    batch used to wait too, locked where no other worker could take them: 29 short rows held a minute behind a 3 MB
    changelog while another worker did the rest of the queue. Now a batch's short rows go first, then the others
    smallest first (files as well)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    files = {"a-large.txt": BIG[:120_000], "b-small.txt": PARAGRAPHS[0], "c-small.txt": PARAGRAPHS[1]}
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        before = _insert(conn, 2, "before")
        conn.execute("INSERT INTO connector.documents (source_key, content) VALUES ('long', %s)", (BIG,))
        after = _insert(conn, 6, "after")
        for name, text in files.items():  # the large file queued first, as a scan of the folder would
            (inbox / name).write_text(text)
            conn.execute("INSERT INTO connector.documents (source, source_key, file_path, file_size) "
                         "VALUES ('folder', %s, %s, %s)", (name, str(inbox / name), len(text.encode())))  # fmt: skip
        keys = dict(conn.execute("SELECT id, source_key FROM connector.documents").fetchall())
        pipeline = Pipeline(settings.model_copy(update={"batch_size": 32}), FakeEmbedder(), pool=pool)
        order: list[str] = []
        worker = Worker(conn, pipeline, [inbox])
        assert worker.drain(threading.Event(), lambda row, result: order.append(keys[row.id])) == 12
        assert _status(conn) == {"done": 12}
        shorts = {keys[i] for i in before + after}
        assert set(order[:8]) == shorts, f"every short row was written before the long ones started: {order}"
        assert order[8:] == ["b-small.txt", "c-small.txt", "a-large.txt", "long"], "then the others, smallest first"
        assert_consistent(conn)


def test_stopped_mid_batch_the_rows_never_started_go_back_at_once_and_the_finished_are_written(
    settings, pool, monkeypatch
) -> None:
    """Stopped while both pool processes are busy with slow rows, the worker hands back the rows it never handed to
    the pool at once (it used to hold them, leases renewed, until the rows in flight were done: the whole grace
    period), then writes each row in flight as it finishes."""
    import connector.pipeline
    import connector.worker

    monkeypatch.setattr(connector.worker, "FLUSH_SECONDS", 3600.0)  # only stopping writes before the batch's end
    monkeypatch.setattr(connector.pipeline, "GROUP", 4)  # groups of four: 16 rows in flight, half the batch's 32
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 32)
        _insert_slow(conn, ids[:8])  # two groups of four slow rows: each pool process has one
        pool.warm()  # both processes up with their models: neither takes what the other would
        pipeline = Pipeline(settings.model_copy(update={"batch_size": 32}), FakeEmbedder(), pool=pool)
        worker = Worker(conn, pipeline, [])
        stop = threading.Event()
        results: dict[int, str] = {}
        done = threading.Thread(target=worker.drain, args=(stop, lambda row, r: results.__setitem__(row.id, r)))
        done.start()
        try:
            # The worker keeps 16 rows in flight: rows 17-32 wait for room while the slow groups run.
            wait_for(lambda: pool.tasks >= 4, timeout=60, interval=0.01, what="four groups handed to the pool")
            stop.set()
        finally:
            done.join(120)
        with connect(settings.dsn.get_secret_value(), autocommit=True) as check:
            found = check.execute("SELECT id, status, claimed_by, updated_at, processed_at FROM connector.documents")
            rows = {doc_id: rest for doc_id, *rest in found}
        back = [i for i in ids if rows[i][0] == "pending"]
        written = [i for i in ids if rows[i][0] == "done"]
        assert back and written and len(back) + len(written) == 32, rows
        assert ids[:8] == written[:8], "what was in the pool when the worker stopped was written"
        assert all(rows[i][1] is None for i in back), "handed back: nobody holds them"
        assert max(rows[i][2] for i in back) < min(rows[i][3] for i in written), "handed back before any write"
        assert set(results) == set(written), "the rows handed back are not reported as processed"
        assert_consistent(conn)


def test_stopped_while_the_pool_answers_nothing_the_rows_never_started_still_go_back_at_once(
    settings, pool, monkeypatch
) -> None:
    """The worker waiting for room in the pool woke on a finished document or on its next heartbeat (a third of the
    lease), not on a stop: with every pool process busy with long documents (another thread's, say), the rows it
    had not handed over stayed in its hands that long after a SIGTERM. Here the pool processes are held still."""
    import connector.pipeline
    import connector.worker

    monkeypatch.setattr(connector.worker, "FLUSH_SECONDS", 3600.0)
    monkeypatch.setattr(connector.pipeline, "GROUP", 4)  # groups of four: 16 rows in flight, half the batch's 32
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 32)
        pool.warm()
        # A lease of 20 minutes: the next heartbeat, which would also wake the worker, is minutes away.
        lease = settings.model_copy(update={"batch_size": 32, "lease_seconds": 1200})
        worker = Worker(conn, Pipeline(lease, FakeEmbedder(), pool=pool), [])
        stop = threading.Event()
        done = threading.Thread(target=worker.drain, args=(stop,))
        held = pool.pids()
        for pid in held:  # before the first document reaches them: nothing the worker hands over finishes
            os.kill(pid, signal.SIGSTOP)
        done.start()
        try:
            wait_for(lambda: pool.tasks >= 4, timeout=60, interval=0.01, what="four groups handed to the pool")
            stop.set()
            with connect(settings.dsn.get_secret_value(), autocommit=True) as check:
                back = "SELECT count(*) FROM connector.documents WHERE status = 'pending' AND claimed_by IS NULL"
                # 16 rows are in the pool (held still): the other 16 go back while it still answers nothing.
                wait_for(lambda: check.execute(back).fetchone()[0] == 16, timeout=60, what="the 16 never started back")
        finally:
            for pid in held:
                os.kill(pid, signal.SIGCONT)
            done.join(120)
        assert not done.is_alive()
        assert _status(conn) == {"done": 16, "pending": 16}
        assert_consistent(conn)


def test_a_document_that_hangs_its_pool_process_is_stopped_at_its_deadline_and_fails_after_its_tries(
    settings: Settings, tmp_path
) -> None:
    """A document that hangs its pool process (a parser caught in a loop; here the process is stopped with SIGSTOP
    each time it runs the document) held its row, a pool process and a worker thread for as long as the sidecar
    lived: its lease renewed all along, `/health` saying ok. Past its deadline (`document_timeout_seconds`, plus
    60 s a MB) the process is killed; the document is tried again alone, and fails after its tries with the reason,
    while the others go through."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    text = BIG[:60_000]  # a tenth of a second or so in a pool process: long enough to be seen running
    (inbox / "hangs.txt").write_text(text)  # a file: never short, so it runs as a task of its own
    s = settings.model_copy(
        update={"document_timeout_seconds": 2.0, "batch_size": 32, "max_attempts": 2, "retry_base_seconds": 0.0}
    )
    pool = CpuPool(s, 2)
    stopped: list[int] = []
    done = threading.Event()

    def stop_whoever_runs_it() -> None:
        while not done.is_set():
            for pid in _running_it(pool, "hangs.txt"):
                if pid not in stopped:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.01)

    stopper = threading.Thread(target=stop_whoever_runs_it)
    stopper.start()
    try:
        with connect(s.dsn.get_secret_value(), autocommit=True) as conn:
            ids = _insert(conn, 6)
            hung = conn.execute(
                "INSERT INTO connector.documents (source, source_key, file_path, file_size) "
                "VALUES ('folder', 'hangs.txt', %s, %s) RETURNING id",
                (str(inbox / "hangs.txt"), len(text.encode())),
            ).fetchone()[0]
            worker = Worker(conn, Pipeline(s, FakeEmbedder(), pool=pool), [inbox])
            results: list[tuple[int, str]] = []

            def drain() -> None:
                while worker.drain(threading.Event(), lambda row, result: results.append((row.id, result))):
                    pass

            draining = threading.Thread(target=drain)
            draining.start()
            draining.join(timeout=120)
            if draining.is_alive():  # it waits for the stopped process for good: free it to end the test
                done.set()
                _kill(stopped)
                draining.join()
            assert [r for i, r in results if i == hung] == ["retry", "retry", "failed"], results
            status, retries, error = conn.execute(
                "SELECT status, retries, last_error FROM connector.documents WHERE id = %s", (hung,)
            ).fetchone()
            assert (status, retries) == ("failed", 2)
            assert error.startswith("gave up after 2 tries"), error
            assert "the last time: it ran past its deadline (6 s" in error and "DOCUMENT_TIMEOUT_SECONDS" in error, (
                error
            )
            assert all(r == "done" for i, r in results if i in ids) and _status(conn) == {"done": 6, "failed": 1}
            assert_consistent(conn)
    finally:
        done.set()
        stopper.join()
        pids = pool.pids()
        pool.close()
    assert len(stopped) == 2, "stopped on each of its two tries"
    assert not [p for p in stopped + pids if _alive(p)], (
        "the hung processes were killed, and no process outlives the pool"
    )


def _under(pid: int) -> set[int]:
    """The processes under `pid` now (its children and theirs)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    return set()


def test_a_pool_process_stopped_at_its_deadline_leaves_no_process_of_its_document_behind(
    tmp_path, models_dir, monkeypatch
) -> None:
    """A PDF's conversion runs in processes of its own (OCR of its scans here: two, for six scanned pages). The
    deadline's SIGKILL stopped the pool process alone: its OCR processes lived on for good, waiting on a queue
    nobody writes to any more (or spinning in a parser caught in a loop: the case the deadline is for)."""
    import pymupdf

    from connector.convert import ocr
    from connector.models import SourceDocument
    from connector.pool import DocumentTimedOut

    if not ocr.available():
        pytest.skip("Tesseract is not installed")
    if usable_cores() < 2:
        pytest.skip("OCR runs in processes of its own only with two cores")
    scan = pymupdf.open(FIXTURES / "real" / "scanned-lppl-p1.pdf")
    pdf = pymupdf.open()
    for _ in range(6):  # six pages of OCR: seconds, past a deadline of one
        pdf.insert_pdf(scan)
    data = pdf.tobytes()
    monkeypatch.setattr("connector.pool.TIMEOUT_PER_PDF_MB_S", 0.0)  # the deadline: the setting alone
    pool = CpuPool(Settings(data_dir=tmp_path / "state", document_timeout_seconds=1.0), 1)
    seen: set[int] = set()
    try:
        pool.submit(SourceDocument(0, "sql", "warm", None, b"a few words", "text/plain", "w")).result()
        pid = pool.pids()[0]
        future = pool.submit(SourceDocument(1, "sql", "scan.pdf", None, data, "application/pdf", "s"))
        while not future.done():
            seen |= _under(pid)
            time.sleep(0.02)
        assert isinstance(future.exception(), DocumentTimedOut)
        assert seen, "the document's own processes were seen running"
        wait_for(lambda: not [p for p in seen if _alive(p)], timeout=10)
    finally:
        pool.close()
        left = _kill([p for p in seen if _alive(p)])
    assert not left, f"{len(left)} processes of the stopped document left behind"


def test_a_process_whose_task_ended_as_its_deadline_stop_came_takes_no_blame_for_the_next(
    tmp_path, models_dir, monkeypatch
) -> None:
    """The deadline watch reads which task each process runs, then stops that process. A task that ended in
    between (at its deadline, give or take) left the stop to the next task the process took: that one failed as
    "ran past its deadline", a try lost for a document that ran for a moment. Here the watch is held between the
    two (in its log line) until the process runs the next document."""
    import logging

    from connector.models import SourceDocument

    pool = CpuPool(Settings(data_dir=tmp_path / "state", document_timeout_seconds=0.1), 1)
    held: list[str] = []
    first = SourceDocument(1, "sql", "first", None, (BIG * 3).encode(), "text/plain", "1")
    second = SourceDocument(2, "sql", "second", None, BIG.encode(), "text/plain", "2")

    class HoldTheWatch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "ran past its deadline" in record.getMessage() and "first" in record.getMessage():
                wait_for(lambda: [pid for pid, keys in pool.running().items() if "second" in keys], 60, 0.01)
                held.append(record.getMessage())

    hold = HoldTheWatch()
    logging.getLogger("connector.pool").addHandler(hold)
    try:
        pool.submit(SourceDocument(0, "sql", "warm", None, b"a few words", "text/plain", "w")).result()
        monkeypatch.setattr("connector.pool.TIMEOUT_PER_MB_S", 0.0)
        finished = pool.submit(first)  # seconds: past its deadline, finished as it is stopped
        monkeypatch.undo()  # the next one has its full deadline (a minute and more)
        behind = pool.submit(second)
        assert finished.result(timeout=120).winner.candidate.chunks
        assert behind.result(timeout=120).winner.candidate.chunks, "the next document goes on in a fresh pool"
        assert held, "the first document ran past its deadline"
    finally:
        logging.getLogger("connector.pool").removeHandler(hold)
        pids = pool.pids()
        pool.close()
    assert not [p for p in pids if _alive(p)]


def test_a_tasks_deadline_grows_with_its_content_and_more_for_a_pdf(settings: Settings) -> None:
    """Text takes about a second a MB; a scanned PDF's pages 2-4 s each to OCR (65-113 KB a page at 300 dpi), so a
    PDF's allowance per MB is ten times a text's: a long scan was killed on every try at 60 s a MB."""
    from connector.models import SourceDocument
    from connector.pool import deadline_s

    s = settings.model_copy(update={"document_timeout_seconds": 300.0})
    text = SourceDocument(1, "sql", "t", None, b"x" * 2_000_000, "text/plain", "")
    pdf = SourceDocument(2, "folder", "p.pdf", None, b"x" * 2_000_000, "application/pdf", "")
    assert deadline_s(s, text) == 300 + 2 * 60
    assert deadline_s(s, pdf) == 300 + 2 * 600
    assert deadline_s(s, [text, pdf]) == 300 + 2 * 60 + 2 * 600, "a group: its documents' allowances, one base"
    assert deadline_s(settings.model_copy(update={"document_timeout_seconds": 0.0}), pdf) is None
