"""What the sidecar's own thread and the database spend per row on the batch path's steps after choosing: the claim,
the embedding (`fake`, with the embedding cache) and the write, in batches as a worker takes them.

    CONNECTOR_MODELS_DIR=... .venv/bin/python -m tests.write_path_cost --rows 1280 --chars 600 DIR...

The rows are `connector bench --rows`'s. Each document is chosen in this process first (`choose*`: in the sidecar
that is a pool process's work, all of it but unpickling its result). The sidecar's side is this thread's CPU time
(`time.thread_time`), the database's the CPU time of the two server sessions (the worker's and the embedding
cache's), read from /proc/PID/schedstat, so a busy, noisy machine moves these far less than a wall clock: compare two
trees by running this with each on `PYTHONPATH`, one after the other, a few times.
Not a test: its figures go into notes.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from connector.bench.rows import workload
from connector.db.database import connect, database, ensure_embedding_model, migrate
from connector.db.embeddings import CacheTable
from connector.db.scratch import scratch_database
from connector.db.store import Store
from connector.embedders import load_configured, spec_of
from connector.embedders.cache import PersistentCache
from connector.pipeline import Pipeline
from connector.pool import numpy_on_one_thread
from connector.settings import Settings


def _server_s(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:  # the server runs on this machine (the embedded one)
        return int(f.read().split()[0]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--rows", type=int, default=1280)
    parser.add_argument("--chars", type=int, default=600)
    parser.add_argument("--batch", type=int, default=128, help="rows a claim takes (a deep queue's, by default)")
    args = parser.parse_args()
    numpy_on_one_thread()  # as the sidecar does
    settings = Settings(embedder="fake")
    rows = workload(args.paths, args.rows, args.chars)
    with database(settings) as dsn, scratch_database(dsn, "write_path_cost") as scratch:
        embedder = load_configured(settings)
        migrate(scratch, embedder.dim)
        with connect(scratch, autocommit=True) as conn:
            ensure_embedding_model(conn, embedder)
            with conn.cursor().copy("COPY connector.documents (source_key, title, content) FROM STDIN") as copy:
                for n, row in enumerate(rows):
                    copy.write_row((f"bench/{n + 1}", row.title, row.body))
        cache = CacheTable(scratch)
        pipeline = Pipeline(settings, embedder, None, PersistentCache(embedder, cache, spec_of(embedder).cache_key))
        with connect(scratch, autocommit=True) as conn:
            store = Store(conn)
            cache._run(lambda c: None)  # its connection open, to read its server session's CPU
            sessions = (conn.info.backend_pid, cache._conn.info.backend_pid)
            mine, theirs = collections.Counter(), collections.Counter()
            done = 0

            def step(name: str, work):
                t, s = time.thread_time(), sum(map(_server_s, sessions))
                result = work()
                mine[name] += time.thread_time() - t
                theirs[name] += sum(map(_server_s, sessions)) - s
                return result

            while claimed := step("claim", lambda: store.claim_batch(300, "cost", (), args.batch, 10**9)):
                loaded = [(row, row.load((), 10**9)) for row in claimed]
                chosen = step("choose*", lambda: [pipeline.choose(source) for _, source in loaded])  # noqa: B023
                outcomes = step("embed", lambda: pipeline.embed(chosen))  # noqa: B023
                items = [(row, source, o) for (row, source), o in zip(loaded, outcomes, strict=True)]
                assert all(step("write", lambda: store.write_many(items)))  # noqa: B023
                done += len(claimed)
        pipeline.close()
    ms = {name: round(mine[name] / done * 1e3, 3) for name in mine}
    server = {name: round(theirs[name] / done * 1e3, 3) for name in theirs}
    print(f"{done} rows of ~{args.chars} characters, batches of {args.batch}, ms of CPU a row:")
    print(f"  this thread    {ms} = {sum(v for k, v in ms.items() if k != 'choose*'):.3f} without choose*")
    print(f"  database       {server} = {sum(server.values()):.3f}")


if __name__ == "__main__":
    main()
