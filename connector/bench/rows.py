"""`connector bench --rows N PATH...`: pgai's kind of work, as a user would compare the two.

The workload: N text rows of about `chars` characters each, made of consecutive paragraphs of the text and Markdown
files under PATH (the corpus read again with the grouping shifted by one paragraph each pass, so no two rows are
the same). Worker processes running the sidecar's own loop are started first (models loaded, outside the clock);
then the rows are inserted as SQL rows in one transaction, and the clock runs from its commit until none is pending
or processing.
Each process reports its per-stage time and its memory when it stops.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

from connector import candidates
from connector.bench.processes import machine_busy_s, stop_all, wait_drained
from connector.db.database import connect, ensure_embedding_model, migrate
from connector.db.scratch import scratch_database
from connector.embedders import close, load_configured
from connector.errors import FatalError
from connector.ingest import select
from connector.settings import Settings

TEXT_TYPES = ("text/plain", "text/markdown")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Row:
    title: str
    body: str


@dataclass(frozen=True)
class ProcessReport:
    documents: int
    cores: list[int]  # the CPUs this process (and its pool) was allowed
    stages_ms: dict[str, float]  # summed over the process's documents
    rss_start_mb: float  # after loading, before the first row
    rss_end_mb: float
    peak_rss_mb: float
    pool_rss_mb: list[tuple[float, float]] = field(default_factory=list)  # each CPU pool process: start, end


@dataclass(frozen=True)
class RowsRun:
    workers: int
    rows: int
    chars: int
    done: int
    failed: int
    chunks: int
    wall_s: float
    processes: list[ProcessReport] = field(default_factory=list)
    busy_cpu_s: float | None = None  # the machine's CPU seconds spent busy during wall_s (`machine_busy_s`)
    cores_per_worker: int | None = None  # each process pinned to this many CPUs of its own, as a pod's CPU limit

    @property
    def rows_per_s(self) -> float:
        return self.done / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_ms_per_row(self) -> float | None:
        """The machine's CPU per row done, every process together (the database's too, when it runs here)."""
        return self.busy_cpu_s * 1000 / self.done if self.busy_cpu_s is not None and self.done else None

    @property
    def cores_busy(self) -> float | None:
        return self.busy_cpu_s / self.wall_s if self.busy_cpu_s is not None and self.wall_s else None

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.wall_s if self.wall_s else 0.0

    @property
    def chars_per_s(self) -> float:
        return self.chars / self.wall_s if self.wall_s else 0.0

    def stage_ms_per_row(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for p in self.processes:
            for stage, ms in p.stages_ms.items():
                total[stage] = total.get(stage, 0.0) + ms
        return {stage: ms / max(self.done, 1) for stage, ms in total.items()}


def workload(paths: list[Path], rows: int, chars: int) -> list[Row]:
    """`rows` rows of consecutive paragraphs, about `chars` characters each, from the text files under `paths`."""
    paragraphs: list[tuple[str, str]] = []  # (file key, paragraph)
    for ref in select(paths).refs:
        if ref.mime in TEXT_TYPES:
            text = ref.path.read_text(encoding="utf-8", errors="replace")
            paragraphs += [(ref.key, p.strip()) for p in _PARAGRAPH.split(text) if p.strip()]
    if not paragraphs:
        raise FatalError("no text or Markdown file under the given paths to make rows of")
    out: list[Row] = []
    i, shift = 0, 0
    while len(out) < rows:
        key, body, size = paragraphs[i % len(paragraphs)][0], [], 0
        while not body or size + len(paragraphs[i % len(paragraphs)][1]) // 2 < chars:
            body.append(paragraphs[i % len(paragraphs)][1])
            size += len(body[-1]) + 2
            i += 1
            if i % len(paragraphs) == 0:  # the corpus read again: group differently this time
                shift += 1
                i += shift % len(paragraphs)
        out.append(Row(f"{key} #{len(out) + 1}", "\n\n".join(body)))
    return out


def _rss_mb(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:  # a pool process that is gone
        return 0.0


def _pool_rss(pool) -> dict[int, float]:
    return {pid: _rss_mb(pid) for pid in pool.pids()} if pool is not None else {}


def placements(workers: int, cores_per_worker: int | None) -> list[set[int] | None]:
    """The CPUs each worker process is pinned to: `cores_per_worker` of this process's own, a different set for each
    process (as replicas with a CPU limit each get theirs); None: unpinned. The database, the bench itself and an
    embedding endpoint on this machine stay unpinned, and run on whichever core is free."""
    if cores_per_worker is None:
        return [None] * workers
    mine = sorted(os.sched_getaffinity(0))
    if workers * cores_per_worker > len(mine):
        raise FatalError(
            f"{workers} worker process(es) with {cores_per_worker} core(s) each need {workers * cores_per_worker} "
            f"cores; this process may use {len(mine)}"
        )
    return [set(mine[i * cores_per_worker : (i + 1) * cores_per_worker]) for i in range(workers)]


def _worker_child(settings: Settings, dsn: str, cores: set[int] | None, ready: mp.Queue, stop, out: mp.Queue) -> None:
    if cores is not None:  # first: the pool's size and the embedder's threads are read off the affinity
        os.sched_setaffinity(0, cores)
    from connector import allocator, sidecar
    from connector.models import SourceDocument
    from connector.pipeline import Pipeline
    from connector.pool import CpuPool, numpy_on_one_thread, size_of

    allocator.tune()  # as `connector run` does
    numpy_on_one_thread()

    pipelines: list[Pipeline] = []
    embedder = load_configured(settings)
    processes = size_of(settings)
    pool = CpuPool(settings, processes) if processes else None  # what `connector run` starts

    def make() -> Pipeline:
        pipelines.append(Pipeline(settings, embedder, pool=pool))
        return pipelines[-1]

    make()  # load the metrics model before the clock starts
    if pool is not None:  # and the pool's processes, each with its own
        pool.warm()
        warm = SourceDocument(0, "sql", "warm-up", None, b"Warm up.", "text/plain", "")
        for future in [pool.submit(warm) for _ in range(processes * 4)]:
            future.result()
    allocator.freeze_loaded()  # as `connector run` does once its models are loaded
    ready.put(True)
    start = _rss_mb()
    pool_start = _pool_rss(pool)
    first = [pipelines[0]]
    try:
        sidecar.run(settings, dsn, lambda: first.pop() if first else make(), stop, watch=False)
    finally:
        candidates.shutdown_pool()  # a process started by multiprocessing waits for its pool's children
        pool_end = _pool_rss(pool)  # the same processes unless one died (then a fresh one's)
        if pool is not None:
            pool.close()
        close(embedder)
    stages: dict[str, float] = {}
    for p in pipelines:
        for stage, ms in p.totals.ms.items():
            stages[stage] = stages.get(stage, 0.0) + ms
    done = sum(p.runs for p in pipelines)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    pools = [(pool_start.get(pid, 0.0), rss) for pid, rss in pool_end.items()]
    out.put(ProcessReport(done, sorted(os.sched_getaffinity(0)), stages, start, _rss_mb(), peak, pools))


def run(settings: Settings, dsn: str, rows: list[Row], workers: int, cores_per_worker: int | None) -> RowsRun:
    """Insert `rows` into a scratch database served by `workers` sidecar processes (each pinned to
    `cores_per_worker` CPUs of its own, unless None); time queued (the insert's commit) → every row committed."""
    pins = placements(workers, cores_per_worker)
    settings = settings.model_copy(update={"poll_interval": 0.5, "http_port": None})
    ctx = mp.get_context("spawn")
    with scratch_database(dsn, f"bench_rows_{workers}") as scratch:
        model = load_configured(settings)
        try:
            migrate(scratch, model.dim)
            with connect(scratch, autocommit=True) as conn:
                ensure_embedding_model(conn, model)
        finally:
            close(model)
        ready, stop, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_worker_child, args=(settings, scratch, pin, ready, stop, out)) for pin in pins]
        for p in procs:
            p.start()
        reports: list[ProcessReport] = []
        try:
            for _ in procs:
                ready.get(timeout=300)
            with connect(scratch, autocommit=True) as conn:
                # One transaction: the workers see no row before all are queued, and the clock starts then, as
                # pgai's does once its rows are in (`tests/pgai_compare.py`): the insert took 2% of a 2,000-row run.
                with conn.cursor().copy("COPY connector.documents (source_key, title, content) FROM STDIN") as copy:
                    for n, row in enumerate(rows):
                        copy.write_row((f"bench/{n + 1}", row.title, row.body))
                t0, busy0 = time.perf_counter(), machine_busy_s()
                wait_drained(conn, procs)
                wall, busy1 = time.perf_counter() - t0, machine_busy_s()
                done, failed, chunks = conn.execute(
                    "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), "
                    "(SELECT count(*) FROM connector.chunks) FROM connector.documents"
                ).fetchone()
        finally:
            stop_all(stop, procs, 60)
            while len(reports) < len(procs):
                try:
                    reports.append(out.get(timeout=1))
                except Exception:  # a process that was killed reports nothing
                    break
    busy = busy1 - busy0 if busy0 is not None and busy1 is not None else None
    chars = sum(len(r.body) for r in rows)
    return RowsRun(workers, len(rows), chars, done, failed, chunks, wall, reports, busy, cores_per_worker)
