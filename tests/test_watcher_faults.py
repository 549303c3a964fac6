"""The folder watcher under the faults production brings (issue 11): outages, bursts, hostile names, unreadable and
huge files, replicas restarting next to each other. Real Postgres, real files, real processes; no mocks."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from connector.settings import Settings
from connector.sources.folder import scan
from connector.sources.watcher import FolderWatcher
from tests.conftest import FIXTURES, child_env, connector_cmd, output_of, wait_for
from tests.pgproxy import Proxy

FAST = {"CONNECTOR_POLL_INTERVAL": "1", "CONNECTOR_SETTLE_SECONDS": "0.3"}


def _rows(dsn: str) -> dict[str, tuple]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT source_key, status, last_error, attempts, retries FROM connector.documents WHERE source = 'folder'"
        ).fetchall()
    return {key: rest for key, *rest in found}


def _wait(proc: subprocess.Popen, predicate, timeout: float, what: str) -> None:
    try:
        wait_for(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{output_of(proc)[-4000:]}") from None


def _status(dsn: str, key: str) -> str | None:
    row = _rows(dsn).get(key)
    return row[0] if row else None


@contextlib.contextmanager
def watching(settings: Settings, dsn: str | None = None, **changes):
    watcher = FolderWatcher(settings.model_copy(update=changes), dsn or settings.dsn.get_secret_value())
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()


def test_files_settled_during_an_outage_are_all_queued_once_the_database_is_back(settings: Settings, tmp_path) -> None:
    """3a: the settle loop kept only the file whose insert failed; the rest of the batch was lost."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    folder = Path(tempfile.mkdtemp(prefix="pgproxy-"))  # short: a unix socket's path is limited to 107 bytes
    proxy = Proxy(dsn, folder)
    try:
        with watching(settings, proxy.dsn, rescan_seconds=3600):
            (inbox / "before.txt").write_text("before the outage")
            wait_for(lambda: _status(dsn, "before.txt"), what="a file queued through the proxy")
            proxy.up = False
            for i in range(10):
                (inbox / f"during-{i}.txt").write_text(f"written while the database is down {i}")
            time.sleep(4)  # settled, tried and failed at least once
            proxy.up = True
            wait_for(lambda: all(_status(dsn, f"during-{i}.txt") for i in range(10)), timeout=60,
                     what="every file written during the outage queued")  # fmt: skip
    finally:
        proxy.stop()
        shutil.rmtree(folder, ignore_errors=True)


_WATCH_ONLY = """
import logging, signal, sys, threading
from pathlib import Path
from connector.settings import Settings
from connector.sources.watcher import FolderWatcher
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
settings = Settings(watch_dir=Path(sys.argv[2]), settle_seconds=0.3, rescan_seconds=3600)
watcher = FolderWatcher(settings, sys.argv[1])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
watcher.start()
while not stop.wait(0.2):
    if watcher._next_rescan > 0:
        Path(sys.argv[3]).touch()  # the initial rescan is done: the burst can begin
print("check:", watcher.check(), flush=True)  # None: the watcher says it works
watcher.stop()
"""


def test_an_inotify_overflow_is_repaired_by_a_rescan(settings: Settings, tmp_path) -> None:
    """3b: a burst overflowed the kernel's event queue and the lost files were never queued.

    The watcher runs in its own process, stopped (SIGSTOP: swapped out, frozen by its cgroup) while 20,000 files
    arrive: ~60,000 events for a kernel queue of `max_queued_events` (16,384 by default), so the overflow is certain,
    not a race the watcher might win on a fast machine. Only a rescan can then find the files whose events were lost:
    the periodic one is an hour away."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    n = max(20_000, limit // 2 + 1_000)  # a file is at least a create and a close_write: more events than fit
    ready = tmp_path / "ready"
    log = open(tmp_path / "watcher.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-c", _WATCH_ONLY, dsn, str(inbox), str(ready)],
                            cwd=tmp_path, env=child_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    proc.log = log  # type: ignore[attr-defined]  # for output_of
    try:
        _wait(proc, ready.exists, 60, "the watcher's initial rescan")
        proc.send_signal(signal.SIGSTOP)
        for i in range(n):
            fd = os.open(inbox / f"f{i:05d}.txt", os.O_CREAT | os.O_WRONLY)
            os.write(fd, b"file %d" % i)
            os.close(fd)
        proc.send_signal(signal.SIGCONT)
        _wait(proc, lambda: len(_rows(dsn)) == n, 240, f"all {n} files queued")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "check: None" in output, output[-4000:]
    assert "rescanned" in output and "(events were lost (the inotify queue overflowed))" in output, output[-4000:]


def test_a_periodic_rescan_repairs_what_events_missed_and_reads_only_changed_files(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    for i in range(25):
        (inbox / f"big-{i}.txt").write_bytes(b"large text file\n" * 250_000)  # 4 MB each, 100 MB in all
    assert scan(settings, dsn) == 25

    def read_bytes() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

    before = read_bytes()
    assert scan(settings, dsn) == 0, "nothing changed, nothing queued"
    assert read_bytes() - before < 5_000_000, "an unchanged folder is rescanned without reading its files"

    with psycopg.connect(dsn, autocommit=True) as conn:  # the database lost a row behind the watcher's back
        conn.execute("DELETE FROM connector.documents WHERE source_key = 'big-3.txt'")
    with watching(settings, rescan_seconds=1):
        wait_for(lambda: _status(dsn, "big-3.txt") == "pending", timeout=20, what="the rescan queued it again")


def test_a_file_replaced_by_a_folder_of_its_name_while_nobody_watched_is_gone(settings: Settings) -> None:
    """The rescan took a folder at a document's path for its file still being there: its row and chunks stayed,
    searchable, for good."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    (inbox / "notes.txt").write_text("Notes about the flux capacitor. " * 20)
    assert scan(settings, dsn) == 1
    (inbox / "notes.txt").unlink()  # while the sidecar is down
    (inbox / "notes.txt").mkdir()
    (inbox / "notes.txt" / "inner.txt").write_text("Inner notes. " * 20)
    assert scan(settings, dsn) == 1
    assert set(_rows(dsn)) == {"notes.txt/inner.txt"}


def _loop(tmp_path: Path, name: str) -> Path:
    link = tmp_path / name
    os.symlink(name, link)  # points at itself: a loop once it lies anywhere
    return link


def test_hostile_names_never_stop_the_watcher(settings: Settings, tmp_path, caplog) -> None:
    """4: a non-UTF-8 name (deleted: UnicodeEncodeError) and a symlink loop renamed in (RuntimeError) killed the
    watcher's threads; nothing after them was picked up."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    raw = os.fsencode(inbox) + b"/caf\xe9.txt"
    caplog.set_level(logging.WARNING)
    with watching(settings) as watcher:
        with open(raw, "wb") as f:
            f.write(b"latin-1 name")
        wait_for(lambda: _status(dsn, "caf\\xe9.txt") == "failed", what="the non-UTF-8 name recorded")
        assert "not valid UTF-8" in _rows(dsn)["caf\\xe9.txt"][1]
        os.remove(raw)
        wait_for(lambda: "caf\\xe9.txt" not in _rows(dsn), what="its row removed with the file")
        os.rename(_loop(tmp_path, "loop.txt"), inbox / "loop.txt")
        wait_for(lambda: _status(dsn, "loop.txt") == "failed", what="the symlink loop recorded")
        assert "symbolic links" in _rows(dsn)["loop.txt"][1]
        (inbox / "later.txt").write_text("a file after the hostile ones")
        wait_for(lambda: _status(dsn, "later.txt") == "pending", what="a later file still queued")
        assert watcher.check() is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no event failed"


def test_a_removed_watched_folder_restarts_the_observer(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    with watching(settings) as watcher:
        (inbox / "a.txt").write_text("first")
        wait_for(lambda: _status(dsn, "a.txt"), what="a.txt queued")
        shutil.rmtree(inbox)  # watchdog's emitter stops with its folder
        wait_for(lambda: "a.txt" not in _rows(dsn), what="the deletion mirrored")
        wait_for(inbox.is_dir, what="the folder recreated by the restarted observer")
        (inbox / "b.txt").write_text("after the restart")
        wait_for(lambda: _status(dsn, "b.txt"), what="a file in the new folder queued")
        assert watcher.check() is None


def test_a_watched_folder_moved_away_and_made_anew_is_watched_at_its_path(settings: Settings, tmp_path) -> None:
    """inotify follows a moved folder: `mv inbox old; mkdir inbox` left the new folder unwatched (files dropped in
    it were not queued) and the moved files' documents in place, until the periodic rescan."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    with watching(settings) as watcher:
        (inbox / "a.txt").write_text("a file in the first folder " * 10)
        wait_for(lambda: _status(dsn, "a.txt"), what="a.txt queued")
        inbox.rename(tmp_path / "moved-away")
        inbox.mkdir()
        (inbox / "b.txt").write_text("a file in the new folder " * 10)
        wait_for(lambda: _status(dsn, "b.txt"), what="a file in the new folder queued")
        wait_for(lambda: "a.txt" not in _rows(dsn), what="the moved-away file's document removed")
        ((tmp_path / "moved-away") / "c.txt").write_text("a file in the old folder, now elsewhere " * 10)
        time.sleep(1.5)
        assert set(_rows(dsn)) == {"b.txt"}, "the old folder is not watched any more"
        assert watcher.check() is None


def test_a_huge_sparse_file_fails_unread_and_does_not_stall_intake(settings: Settings) -> None:
    """10: a 30 GB sparse file was hashed whole before the size was checked: intake stopped for a minute. Counted,
    not timed: what this process read while both files were taken in (the watcher is a thread of it) is a few
    megabytes at most, not the huge file's gigabytes."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir

    def read_bytes() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

    with watching(settings) as watcher:
        before = read_bytes()
        with open(inbox / "huge.txt", "wb") as f:
            f.truncate(30 * 1024**3)
        (inbox / "small.txt").write_text("right behind the huge one")

        def unread(key: str, status: str) -> bool:
            assert read_bytes() - before < 50_000_000, "the huge file is being read, holding up the files behind it"
            return _status(dsn, key) == status

        wait_for(lambda: unread("small.txt", "pending"), timeout=120, what="small.txt queued")
        wait_for(lambda: unread("huge.txt", "failed"), timeout=120, what="huge.txt failed")
        status, error, *_ = _rows(dsn)["huge.txt"]
        assert status == "failed" and "too large" in error
        assert watcher.check() is None


def test_files_of_any_suffix_are_queued_for_conversion_to_decide(settings: Settings, tmp_path, caplog) -> None:
    """A suffix we do not know may still be text (`.R`, `.cfg`, no suffix): the watcher queues every file, and
    conversion decides from the bytes (an unsupported one fails there, saying what it looks like: test_faults)."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    caplog.set_level(logging.WARNING, logger="connector")
    with watching(settings, rescan_seconds=0.5):
        (inbox / "analysis.R").write_text("# fit the model\nfit <- lm(y ~ x, data = d)\n" * 20)
        (inbox / "README").write_text("A file without a suffix is read for what it is.\n" * 20)
        (inbox / "notes.docx").write_bytes(b"PK\x03\x04 a broken archive")
        for key in ("analysis.R", "README", "notes.docx"):
            wait_for(lambda key=key: _status(dsn, key) == "pending", what=f"{key} queued")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "nothing refused"


def test_hostile_names_at_start_and_forged_log_lines(migrated_dsn, start_process, tmp_path) -> None:
    """4 and 13: a symlink loop present at start crashed `connector run`; a newline in a name forged a log line."""
    dsn = migrated_dsn
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    os.rename(_loop(tmp_path, "loop.md"), inbox / "loop.md")
    with open(os.fsencode(inbox) + b"/bad-\xff.txt", "wb") as f:
        f.write(b"undecodable name")
    forged = "evil\n2026-01-01 00:00:00,000 ERROR connector: FORGED.txt"
    (inbox / forged).write_text("a document whose name carries a log line " * 20)
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "good.txt")
    for fmt in ("text", "json"):
        proc = start_process("run", "--watch", str(inbox), "--dsn", dsn, "--embedder", "fake",
                             **FAST, CONNECTOR_LOG_FORMAT=fmt)  # fmt: skip
        _wait(proc, lambda: _status(dsn, "good.txt") == "done" and _status(dsn, forged) == "done", 240,
              "the good files done")  # fmt: skip
        assert proc.poll() is None, output_of(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, output_of(proc)
        out = output_of(proc)
        lines = out.splitlines()
        assert not [line for line in lines if "FORGED" in line and not line.lstrip().startswith(("{", "20"))], out
        assert not [line for line in lines if line.startswith("2026-01-01")], "no forged line"
        if fmt == "json":
            assert all(json.loads(line) for line in lines if line.startswith("{"))
        with psycopg.connect(dsn, autocommit=True) as conn:  # the second run starts from scratch
            conn.execute("DELETE FROM connector.documents WHERE source_key IN ('good.txt', %s)", (forged,))
    rows = _rows(dsn)
    assert rows["loop.md"][0] == rows["bad-\\xff.txt"][0] == "failed"


def _unprivileged(tmp_path: Path, *args: str) -> subprocess.Popen:
    """`connector ...` as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH: file modes bind it as they bind any
    user (tests run as root, which reads a mode-000 file otherwise)."""
    log = open(tmp_path / "unprivileged.log", "w+")  # noqa: SIM115 - closed by the caller
    cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *connector_cmd(*args)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**child_env(tmp_path), **FAST}, stdout=log, stderr=log)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def test_unreadable_files_become_failed_rows(migrated_dsn, tmp_path) -> None:
    """9: a file the process may not read got a WARNING and no row; a done file made unreadable stayed done."""
    dsn = migrated_dsn
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "good.txt")
    (inbox / "secret.txt").write_text("nobody may read this " * 20)
    os.chmod(inbox / "secret.txt", 0)
    # The server's socket lies in a folder of its own system user: the child reaches it through a proxy of ours.
    folder = Path(tempfile.mkdtemp(prefix="pgproxy-"))
    proxy = Proxy(dsn, folder)
    proc = _unprivileged(tmp_path, "run", "--watch", str(inbox), "--dsn", proxy.dsn, "--embedder", "fake")
    try:
        _wait(proc, lambda: _status(dsn, "good.txt") == "done", 240, "good.txt done")
        status, error, *_ = _rows(dsn)["secret.txt"]
        assert status == "failed" and "Permission denied" in error, (status, error)
        os.chmod(inbox / "good.txt", 0)
        wait_for(lambda: _status(dsn, "good.txt") == "failed", what="good.txt failed once unreadable")
        assert "Permission denied" in _rows(dsn)["good.txt"][1]
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0] > 0, "its chunks are kept"
        os.chmod(inbox / "good.txt", 0o644)
        wait_for(lambda: _status(dsn, "good.txt") == "done", timeout=60, what="good.txt done again once readable")
        assert proc.poll() is None, output_of(proc)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.log.close()  # type: ignore[attr-defined]
        proxy.stop()
        shutil.rmtree(folder, ignore_errors=True)


class SlowChat:
    """An OpenAI-compatible endpoint that holds every request about the marked document until `release()`, so that
    document stays in a worker's hands as long as the test needs."""

    MARK = "SLOW-DOCUMENT-MARK"

    def __init__(self) -> None:
        self.released = threading.Event()
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if chat.MARK.encode() in body:
                    chat.released.wait()  # set by release() or close(): a test's whole length, however slow
                answer = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ""}}
                payload = json.dumps({"id": "x", "object": "chat.completion", "choices": [answer]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="slow-chat")
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_replicas_restarting_next_to_each_other_steal_nothing(migrated_dsn, start_process, tmp_path) -> None:
    """5: a starting replica's rescan took the document another live replica was processing (retries + 1 each
    time: after 4 restarts it failed); two replicas both queued every new file."""
    dsn = migrated_dsn
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    chat = SlowChat()
    try:
        env = {**FAST, "CONNECTOR_LLM_BASE_URL": chat.base_url, "CONNECTOR_LLM_TIMEOUT": "120",
               "CONNECTOR_SHUTDOWN_GRACE_SECONDS": "2", "CONNECTOR_MAX_ATTEMPTS": "3"}  # fmt: skip
        args = ("run", "--watch", str(inbox), "--dsn", dsn, "--embedder", "fake")
        a = start_process(*args, **env, CONNECTOR_LLM_CACHE_DIR=str(tmp_path / "llm-a"))
        (inbox / "slow.txt").write_text(SlowChat.MARK + "\n\n" + (FIXTURES / "apache-2.0.txt").read_text())
        wait_for(lambda: _status(dsn, "slow.txt") == "processing", timeout=60, what="replica A processing slow.txt")
        for restart in range(4):
            b = start_process(*args, **env, CONNECTOR_LLM_CACHE_DIR=str(tmp_path / "llm-b"))
            wait_for(lambda b=b: "(start) in" in output_of(b), timeout=60, what="replica B's start rescan")
            time.sleep(2.5)  # what that rescan touched has settled (0.3 s) and been queued or found unchanged
            if restart == 3:
                break
            b.send_signal(signal.SIGTERM)
            assert b.wait(60) == 0, output_of(b)
        assert tuple(_rows(dsn)["slow.txt"][:4]) == ("processing", None, 1, 0), "nobody took it from A"
        for i in range(3):
            (inbox / f"new-{i}.txt").write_text(f"a new file both replicas see {i} " * 30)
        wait_for(lambda: all(_status(dsn, f"new-{i}.txt") == "done" for i in range(3)), timeout=120,
                 what="the new files done")  # fmt: skip
        chat.released.set()
        wait_for(lambda: _status(dsn, "slow.txt") == "done", timeout=120, what="slow.txt done by A")
        rows = _rows(dsn)
        assert tuple(rows["slow.txt"][2:]) == (1, 0), "claimed once, no try lost"
        for i in range(3):
            assert tuple(rows[f"new-{i}.txt"][2:]) == (1, 0), rows[f"new-{i}.txt"]
        logs = "".join(output_of(p) for p in (a, b))
        for i in range(3):
            assert logs.count(f"queued new-{i}.txt") == 1, "one replica queued it; the other's enqueue changed nothing"
    finally:
        chat.close()


def test_a_folder_that_cannot_be_listed_keeps_its_documents(migrated_dsn, tmp_path) -> None:
    """A rescan that could not list a subfolder (permissions) took its files for deleted and removed their chunks."""
    dsn = migrated_dsn
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "sub" / "a.txt")
    shutil.copy(FIXTURES / "debian-manifesto.txt", inbox / "top.txt")
    folder = Path(tempfile.mkdtemp(prefix="pgproxy-"))
    proxy = Proxy(dsn, folder)
    args = ("run", "--watch", str(inbox), "--dsn", proxy.dsn, "--embedder", "fake")
    proc = _unprivileged(tmp_path, *args)
    try:
        _wait(proc, lambda: _status(dsn, "sub/a.txt") == _status(dsn, "top.txt") == "done", 240, "both done")
    finally:
        proc.terminate()
        proc.wait(30)
        proc.log.close()  # type: ignore[attr-defined]
    os.chmod(inbox / "sub", 0)
    (tmp_path / "unprivileged.log").unlink()
    proc = _unprivileged(tmp_path, *args)  # its start rescans the folder, and `sub` cannot be listed
    try:
        _wait(proc, lambda: "cannot list" in output_of(proc), 240, "the rescan met the unlistable folder")
        shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "later.txt")
        _wait(proc, lambda: _status(dsn, "later.txt") == "done", 120, "a later file done")
        assert _status(dsn, "sub/a.txt") == "done", "its document and chunks are kept"
        assert "removed sub/a.txt" not in output_of(proc)
        # Readable again: watched again at once (a chmod added no watch; only the periodic rescan, 5 minutes away,
        # found what changed there).
        os.chmod(inbox / "sub", 0o755)
        _wait(proc, lambda: "can be now; restarting the folder watcher" in output_of(proc), 60, "the folder seen")
        shutil.copy(FIXTURES / "debian-manifesto.txt", inbox / "sub" / "new.txt")
        _wait(proc, lambda: _status(dsn, "sub/new.txt") == "done", 120, "a new file in it done")
    finally:
        os.chmod(inbox / "sub", 0o755)
        proc.terminate()
        proc.wait(30)
        proc.log.close()  # type: ignore[attr-defined]
        proxy.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_path_too_long_for_a_key_is_a_failed_row_and_intake_goes_on(settings: Settings) -> None:
    """A relative path over Postgres's index row limit made every insert fail as if the database were gone: intake
    stopped for good behind it, and /health said ok."""
    inbox = settings.watch_dir
    deep = inbox.joinpath(*[f"{'d' * 200}{i}" for i in range(14)])  # ~2,800 bytes of key
    deep.mkdir(parents=True)
    (deep / "far.txt").write_text("far away " * 50)
    dsn = settings.dsn.get_secret_value()
    with watching(settings) as watcher:
        wait_for(lambda: any("path too long" in (r[1] or "") for r in _rows(dsn).values()), what="long path refused")
        (inbox / "later.txt").write_text("a later file " * 50)
        wait_for(lambda: _status(dsn, "later.txt") == "pending", what="a later file queued")
        assert watcher.check() is None
    [(key, row)] = [(k, r) for k, r in _rows(dsn).items() if k != "later.txt"]
    assert row[0] == "failed" and len(key.encode()) <= 1024 and "sha256:" in key


def _unshare_limited(watches: int, limit: str = "max_inotify_watches") -> list[str] | None:
    """A command prefix running its command in a user namespace of its own whose inotify watches (or instances) are
    limited to `watches` (the limit is per user namespace: the machine's stays as it is), or None where none can be
    made."""
    prefix = ["unshare", "--user", "--map-root-user", "sh", "-c",
              f'echo {watches} > /proc/sys/user/{limit} && exec "$@"', "sh"]  # fmt: skip
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else None


def test_a_tree_past_the_inotify_watch_limit_is_polled(migrated_dsn, tmp_path) -> None:
    """A tree with more folders than the user's inotify watches (`fs.inotify.max_user_watches`, shared by all of
    that user's processes): reached at start, the sidecar died with `OSError: inotify watch limit reached` (a
    crash loop under a supervisor); reached later, the new folders went unwatched and their files waited for the
    periodic rescan (an hour here). The watcher now polls the tree instead, and says so."""
    prefix = _unshare_limited(40)
    if prefix is None:
        pytest.skip("cannot make a user namespace here (unshare --user) to limit inotify watches")
    inbox = tmp_path / "inbox"
    for i in range(30):
        (inbox / f"d{i:02d}").mkdir(parents=True)
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "d00" / "licence.txt")
    (tmp_path / "sock").mkdir()
    proxy = Proxy(migrated_dsn, tmp_path / "sock")  # the namespace's root may not enter the server's socket folder
    env = {**child_env(tmp_path), **FAST, "CONNECTOR_RESCAN_SECONDS": "3600"}
    cmd = [*prefix, *connector_cmd("run", "--watch", str(inbox), "--dsn", proxy.dsn, "--embedder", "fake")]
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        log = open(tmp_path / f"sidecar-{len(procs)}.log", "w+")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        proc.log = log  # type: ignore[attr-defined]  # for output_of
        procs.append(proc)
        return proc

    try:
        first = start()
        _wait(first, lambda: _status(migrated_dsn, "d00/licence.txt") == "done", 120, "the first file done")
        for i in range(30, 60):  # past the 40 watches while it runs
            (inbox / f"d{i:02d}").mkdir()
            (inbox / f"d{i:02d}" / "note.txt").write_text(f"a note in folder {i}: " + "words of the note " * 20)
        keys = [f"d{i:02d}/note.txt" for i in range(30, 60)]
        _wait(first, lambda: all(_status(migrated_dsn, k) == "done" for k in keys), 120, "every new folder's file")
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0, output_of(first)[-4000:]
        assert "inotify ran out of watches" in output_of(first)

        second = start()  # 60 folders for 40 watches from the start
        _wait(second, lambda: "rescanned" in output_of(second), 120, "the start rescan")
        assert second.poll() is None, output_of(second)[-4000:]
        (inbox / "d59" / "later.txt").write_text("written while the tree is polled: " + "more words " * 30)
        (inbox / "d00" / "licence.txt").unlink()
        _wait(second, lambda: _status(migrated_dsn, "d59/later.txt") == "done", 120, "a file of the polled tree")
        _wait(second, lambda: _status(migrated_dsn, "d00/licence.txt") is None, 60, "a deleted file removed")
        assert "polling it every" in output_of(second)
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, output_of(second)[-4000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.log.close()  # type: ignore[attr-defined]
        proxy.stop()


def test_no_inotify_instance_left_is_polled_from_the_start(migrated_dsn, tmp_path) -> None:
    """Every inotify instance of the user taken (`fs.inotify.max_user_instances`, 128 by default, shared by every
    process of that user): watchdog meets that limit when it schedules the watch, not when it starts, so the
    fallback to polling did not catch it and the sidecar died at start."""
    prefix = _unshare_limited(0, "max_inotify_instances")
    if prefix is None:
        pytest.skip("cannot make a user namespace here (unshare --user) to limit inotify instances")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(FIXTURES / "apache-2.0.txt", inbox / "licence.txt")
    (tmp_path / "sock").mkdir()
    proxy = Proxy(migrated_dsn, tmp_path / "sock")
    env = {**child_env(tmp_path), **FAST, "CONNECTOR_RESCAN_SECONDS": "3600"}
    cmd = [*prefix, *connector_cmd("run", "--watch", str(inbox), "--dsn", proxy.dsn, "--embedder", "fake")]
    log = open(tmp_path / "sidecar.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]  # for output_of
    try:
        _wait(proc, lambda: _status(migrated_dsn, "licence.txt") == "done", 120, "the file there at start")
        (inbox / "later.txt").write_text("written while the folder is polled: " + "more words " * 30)
        _wait(proc, lambda: _status(migrated_dsn, "later.txt") == "done", 120, "a file written later")
        assert "polling it every" in output_of(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, output_of(proc)[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        proxy.stop()
