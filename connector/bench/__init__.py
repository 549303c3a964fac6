"""`connector bench`: what adaptive chunking costs compared with one fixed strategy, and how fast the sidecar drains.

Each arm runs in a fresh child process (so its peak memory is its own) against a scratch database: `adaptive` runs
every configured candidate, the guards, the metrics, the embedder and the writer; `single` forces `recursive_1100`
with the same embedder and writer. Model loading happens before the clock starts. The throughput part starts N
worker processes running the sidecar's own loop, queues every document as a row, and times queued → committed.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from connector import candidates, tokens
from connector.bench.processes import stop_all, wait_drained
from connector.db.database import connect, ensure_embedding_model, migrate
from connector.db.scratch import scratch_database
from connector.embedders import load, load_configured
from connector.ingest import ingest, select
from connector.pipeline import Pipeline
from connector.settings import Settings

SINGLE = "recursive_1100"
STAGES = (
    "convert",
    "candidates",
    "guards",
    "metric:rc",
    "metric:icc",
    "metric:dcc",
    "metric:bi",
    "metric:sc",
    "metric:rt",
)
STAGES += ("select", "embed", "write")


@dataclass(frozen=True)
class Arm:
    name: str
    documents: int
    failed: int
    chunks: int
    wall_s: float
    stages_ms: dict[str, float]
    peak_rss_mb: float

    @property
    def docs_per_s(self) -> float:
        return self.documents / self.wall_s if self.wall_s else 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.wall_s if self.wall_s else 0.0


@dataclass(frozen=True)
class Throughput:
    workers: int
    documents: int
    chunks: int
    wall_s: float


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _arm_child(settings: Settings, dsn: str, paths: list[str], name: str, out: mp.Queue) -> None:
    try:
        _arm(settings, dsn, paths, name, out)
    finally:
        # A process started by multiprocessing skips atexit and waits for its own children on the way out: the
        # candidate pool's workers must be stopped here or this process never exits.
        candidates.shutdown_pool()


def _arm(settings: Settings, dsn: str, paths: list[str], name: str, out: mp.Queue) -> None:
    selection = select([Path(p) for p in paths])
    embedder = load_configured(settings)
    with scratch_database(dsn, f"bench_{name}") as scratch:
        migrate(scratch, embedder.dim)
        with connect(scratch, autocommit=True) as conn:
            ensure_embedding_model(conn, embedder)
            pipeline = Pipeline(settings, embedder)
            tokens.encoding(settings.chunking.encoding)  # load the BPE tables before the clock starts
            t0 = time.perf_counter()
            report = ingest(conn, pipeline, selection)
            wall = time.perf_counter() - t0
            chunks = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
    out.put(
        Arm(
            name,
            report.counts["done"],
            report.counts["failed"],
            chunks,
            wall,
            dict(pipeline.totals.ms),
            _peak_rss_mb(),
        )
    )


def _worker_child(settings: Settings, dsn: str, ready: mp.Queue, stop) -> None:
    from connector import sidecar

    embedder = load_configured(settings)
    first = [Pipeline(settings, embedder)]  # the models loaded before the clock starts
    ready.put(True)
    try:
        # One pipeline per worker thread, as `connector run` makes them (chunkers are not shared between threads).
        sidecar.run(settings, dsn, lambda: first.pop() if first else Pipeline(settings, embedder), stop, watch=False)
    finally:
        candidates.shutdown_pool()  # see _arm_child


def _in_child(target, *args):
    ctx = mp.get_context("spawn")  # a clean interpreter: no inherited model, connections or memory high-water mark
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    result = out.get()
    proc.join()
    return result


def arms(settings: Settings, dsn: str, paths: list[Path]) -> list[Arm]:
    single = settings.model_copy(update={"chunking": settings.chunking.forced(SINGLE)})
    path_args = [str(p) for p in paths]
    return [
        # Settings objects travel pickled: secrets (the LLM key) stay intact, which JSON would mask.
        _in_child(_arm_child, s, dsn, path_args, name)
        for name, s in (("adaptive", settings), ("single", single))
    ]


def throughput(settings: Settings, dsn: str, paths: list[Path], workers: int) -> Throughput:
    """Documents queued as rows (bytes and MIME type) → chunks committed, with `workers` sidecar processes."""
    settings = settings.model_copy(update={"embedder": "fake", "poll_interval": 0.5})
    files = [(ref.key, ref.path.read_bytes(), ref.mime) for ref in select(paths).refs]
    ctx = mp.get_context("spawn")
    with scratch_database(dsn, f"bench_workers_{workers}") as scratch:
        migrate(scratch, settings.embedding_dim)
        with connect(scratch, autocommit=True) as conn:
            ensure_embedding_model(conn, load("fake"))
        ready, stop = ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_worker_child, args=(settings, scratch, ready, stop)) for _ in range(workers)]
        for p in procs:
            p.start()
        try:
            for _ in procs:
                ready.get(timeout=120)
            with connect(scratch, autocommit=True) as conn:
                t0 = time.perf_counter()
                with conn.transaction():
                    for key, data, mime in files:
                        conn.execute(
                            "INSERT INTO connector.documents (source_key, title, content_bytes, mime_type) "
                            "VALUES (%s, %s, %s, %s)",
                            (key, key, data, mime),
                        )
                wait_drained(conn, procs)
                wall = time.perf_counter() - t0
                done, chunks = conn.execute(
                    "SELECT count(*) FILTER (WHERE status = 'done'), (SELECT count(*) FROM connector.chunks) "
                    "FROM connector.documents"
                ).fetchone()
        finally:
            stop_all(stop, procs, 30)
    return Throughput(workers, done, chunks, wall)
