"""The sidecar's HTTP port on Starlette and uvicorn: `/search` over a real socket against `connector run` as a user
runs it (over documents it ingested, whose answers are known), its 400s, 404s and the 503 of a database that went
away (through a real TCP proxy), and the server's own start and stop in this process."""

from __future__ import annotations

import dataclasses
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector.db.store import Passage, SearchHit
from tests.conftest import REPO, output_of, wait_for
from tests.test_search import TOPICS, queue_corpus
from tests.test_sidecar import SIDECAR_ENV
from tests.test_watcher_faults import Proxy

HIT_FIELDS = {f.name for f in dataclasses.fields(SearchHit)}
PASSAGE_FIELDS = {f.name for f in dataclasses.fields(Passage)}


def _corpus(dsn: str) -> int:
    return queue_corpus(dsn, manual_key="manuals/dockerfile")  # under a folder-like prefix, for the filter tests


def _done(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone()[0]


def _sidecar(start_process, dsn: str) -> tuple[subprocess.Popen, str]:
    """`connector run` on port 0 (the DSN in the environment, as a password belongs); returns it and its URL."""
    proc = start_process("run", "--no-watch", "--embedder", "fake", "--http-port", "0", CONNECTOR_DSN=dsn,
                         **SIDECAR_ENV)  # fmt: skip
    found = wait_for(lambda: re.search(r"search on (http://127\.0\.0\.1:\d+)/ \(", output_of(proc)), timeout=60,
                     what="the HTTP port in the log")  # fmt: skip
    assert int(found.group(1).rsplit(":", 1)[1]) > 0, "port 0 is logged as the port really bound"
    return proc, found.group(1)


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, output_of(proc)
    return output_of(proc)


def test_search_over_http_finds_the_chunk_that_answers(migrated_dsn: str, start_process, tmp_path: Path) -> None:
    dsn = migrated_dsn
    n = _corpus(dsn)
    proc, url = _sidecar(start_process, dsn)
    wait_for(lambda: _done(dsn) == n, timeout=120, what="the corpus ingested")
    http = httpx.Client(base_url=url, timeout=30)

    # GET, vectors only: the topic that answers first, best first, every field of a hit, no passage
    r = http.get("/search", params={"q": "how do I keep data when a container is removed? mount a volume",
                                    "mode": "vector", "k": 5})  # fmt: skip
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    body = r.json()
    assert set(body) == {"query", "k", "mode", "results"} and (body["k"], body["mode"]) == (5, "vector")
    hits = body["results"]
    assert len(hits) == 5 and hits[0]["source_key"] == "topics/volumes"
    assert all(set(h) == HIT_FIELDS | {"passage"} and h["passage"] is None for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    # GET with the defaults (hybrid, k = 10) and POST: the same answers as the Python client, the one search path
    r = http.get("/search", params={"q": "XJ42 flux capacitor calibration"})
    assert r.status_code == 200 and r.json()["mode"] == "hybrid" and r.json()["k"] == 10
    by_get = r.json()["results"]
    assert by_get[0]["source_key"] == "topics/flux" and 0 < by_get[0]["score"] <= 2 / 61, "fused ranks"
    by_post = http.post("/search", json={"query": "XJ42 flux capacitor calibration"}).json()["results"]
    vector_post = http.post("/search", json={"query": "XJ42 flux capacitor calibration", "hybrid": False, "k": 3})
    assert vector_post.json()["mode"] == "vector" and vector_post.json()["results"][0]["source_key"] == "topics/flux"
    import connector
    from connector.settings import Settings

    with connector.Client(dsn, Settings(embedder="fake")) as client:
        expected = client.search("XJ42 flux capacitor calibration")
    assert by_get == by_post == [{**dataclasses.asdict(e.hit), "passage": None} for e in expected]

    # filters, as a JSON object in the query string and in the body
    manual = http.get("/search", params={"q": "the container engine", "k": 20,
                                         "filter": '{"source_key_prefix": "manuals/"}'}).json()["results"]  # fmt: skip
    assert manual and {h["source_key"] for h in manual} == {"manuals/dockerfile"}
    topics = http.post("/search", json={"query": "the container engine", "k": 20,
                                        "filter": {"metadata": {"kind": "topic"}}}).json()["results"]  # fmt: skip
    assert topics and {h["source_key"] for h in topics} <= {f"topics/{k}" for k in TOPICS}

    # context: the hit with its neighbours as one passage
    [hit] = http.post("/search", json={"query": "the HEALTHCHECK instruction", "k": 1, "context": 1,
                                       "filter": {"source_key_prefix": "manuals/"}}).json()["results"]  # fmt: skip
    passage = hit["passage"]
    assert set(passage) == PASSAGE_FIELDS and passage["first_chunk_id"] < passage["last_chunk_id"]
    assert passage["first_chunk_id"] <= hit["chunk_id"] <= passage["last_chunk_id"] and hit["text"] in passage["text"]

    # what cannot be searched as sent: 400, saying what is wrong
    bad_gets = {
        "": "q is missing", "q=": "q is empty", "q=%20%20": "q is empty", "q=x&k=0": "k must be an integer from 1",
        "q=x&k=1001": "k must be an integer from 1 to 1000", "q=x&k=ten": "k must be", "q=x&k=1.5": "k must be",
        "q=x&mode=fuzzy": "mode must be hybrid or vector", "q=x&filter=%5B1%5D": "filter must be a JSON object",
        "q=x&filter=%7Bbad": "filter is not JSON", "q=x&context=21": "context must be an integer from 0 to 20",
        "q=x&context=-1": "context must be", "q=x&top=3": "unknown parameter 'top'",
        # values the SQL function would fail to cast (a 500) or misread
        "q=x&filter=%7B%22document_id%22%3A%22abc%22%7D": "filter 'document_id' cannot be 'abc'",
        "q=x&filter=%7B%22document_id%22%3A%5B1%2C1.5%5D%7D": "filter 'document_id' cannot be",
        "q=x&filter=%7B%22chunk_type%22%3A3%7D": "filter 'chunk_type' cannot be",
        "q=x&filter=%7B%22metadata%22%3A%22x%22%7D": "filter 'metadata' cannot be",
        f"q={'w+' * 4100}": "the most is 8000",
    }  # fmt: skip
    for params, message in bad_gets.items():
        r = http.get(f"/search?{params}")
        assert r.status_code == 400 and message in r.json()["error"], (params, r.text)
    bad_posts = {
        b"{": "the body is not JSON", b"\xff": "the body is not JSON", b"[1]": "the body must be a JSON object",
        b"{}": "query is missing", b'{"query": ""}': "query is empty", b'{"query": 3}': "query is not a string",
        b'{"query": "x", "k": "5"}': "k must be an integer", b'{"query": "x", "k": true}': "k must be an integer",
        b'{"query": "x", "k": 5000}': "k must be an integer from 1 to 1000", b'{"query": "x", "hybrid": "yes"}':
        "hybrid must be true or false", b'{"query": "x", "filter": "x"}': "filter must be a JSON object",
        b'{"query": "x", "context": 2.5}': "context must be an integer", b'{"q": "x"}': "unknown field 'q'",
        b'{"query": "x", "filter": {"document_id": true}}': "filter 'document_id' cannot be",
        b'{"query": "' + b"x" * 70_000 + b'"}': "the body is larger than 64 KiB",
    }  # fmt: skip
    for content, message in bad_posts.items():
        r = http.post("/search", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 400 and message in r.json()["error"], (content, r.text)

    # a question with no word in it: the `fake` model's vector for it is zero, every cosine NaN (it was a 500 and a
    # traceback); nothing is found
    for params in ("q=!!!", "q=%FF%FE", "q=%E2%80%94&mode=vector"):
        r = http.get(f"/search?{params}")
        assert r.status_code == 200 and r.json()["results"] == [], (params, r.text)

    # other paths and methods
    r = http.get("/nope")
    assert r.status_code == 404 and "/health, /metrics, /search" in r.json()["error"]
    assert http.delete("/search").status_code == 405
    assert http.get("/health").json()["status"] == "ok" and http.get("/health").json()["queue"]["done"] == n

    # the README's curl commands, as pasted (with this sidecar's port)
    readme = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if b.startswith("curl") and "/search" in b)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("http://127.0.0.1:9464", url)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and out.stdout.count('"results":[{') == block.count("curl "), out.stdout + out.stderr
    http.close()
    log = _stop(proc)
    assert "GET /search" not in log and "uvicorn" not in log.lower(), "no access log, no uvicorn banner"


def test_search_answers_503_while_the_database_is_down(migrated_dsn: str, start_process) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pgproxy-"))  # short: a unix socket's path is limited to 107 bytes
    proxy = Proxy(migrated_dsn, folder)
    # The test server trusts local connections, so any password gets in: it is here to be looked for in answers.
    password = conninfo_to_dict(proxy.dsn).get("password") or "Http-S3cret-pw"
    try:
        proc, url = _sidecar(start_process, make_conninfo(proxy.dsn, password=password))
        http = httpx.Client(base_url=url, timeout=30)
        assert http.get("/search", params={"q": "anything"}).json()["results"] == []  # the pool is open

        proxy.up = False
        for r in (http.get("/search", params={"q": "anything"}), http.post("/search", json={"query": "anything"})):
            assert r.status_code == 503 and r.json()["error"].startswith("database unreachable: "), r.text
            assert password not in r.text
        health = http.get("/health")
        assert health.status_code == 503 and password not in health.text
        # /live, for a liveness probe, asks nothing of the database: an outage restarts no replica
        live = http.get("/live")
        assert live.status_code == 200 and live.json()["status"] == "ok", live.text
        assert live.json()["workers_alive"] == live.json()["workers"] > 0
        page = http.get("/ui/")  # the web UI's pages say the same, as a page
        assert page.status_code == 503 and "database unreachable: " in page.text and password not in page.text
        assert page.headers["content-type"].startswith("text/html")

        proxy.up = True  # back: the dead connection is dropped at the next search, a new one opened
        wait_for(lambda: http.get("/search", params={"q": "anything"}).status_code == 200, timeout=30,
                 what="/search answering again")  # fmt: skip
        assert http.get("/ui/queue").status_code == 200
        http.close()
        assert password not in _stop(proc)
    finally:
        proxy.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_server_binds_port_0_keeps_the_signal_handlers_and_leaves_no_thread(migrated_dsn: str, caplog) -> None:
    import logging

    from connector.embedders import load
    from connector.errors import FatalError
    from connector.observe import Health
    from connector.web import HttpServer

    caplog.set_level(logging.INFO)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    health = Health(migrated_dsn, lambda: 1, 1, list)
    server = HttpServer("127.0.0.1", 0, health, migrated_dsn, load("fake"))
    server.start()
    try:
        assert server.port > 0 and f"http://127.0.0.1:{server.port}/ (/health" in caplog.text
        with pytest.raises(FatalError, match="cannot serve HTTP on 127.0.0.1"):
            HttpServer("127.0.0.1", server.port, health, migrated_dsn, load("fake"))  # the port is taken
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
            assert http.get("/health").json()["status"] == "ok"
            assert http.get("/search", params={"q": "nothing stored yet"}).json()["results"] == []
    finally:
        server.stop()  # the autouse fixture fails the test if a thread (uvicorn's, a pool's) outlives this
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    assert not [r for r in caplog.records if r.name.startswith("uvicorn") and r.levelno < logging.WARNING]


def test_the_queue_page_reads_a_lease_or_retry_after_set_to_infinity_by_hand(migrated_dsn: str) -> None:
    """`connector status` read them; the web server's pool (its own connections) failed /ui/queue with "timestamp
    too small (before year 1)"."""
    from connector.db import browse
    from connector.web.pool import DatabasePool

    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO connector.documents (source_key, content, status, attempts, claimed_by, heartbeat_at, "
            "lease_expires_at, retry_after) VALUES ('stuck', 'x', 'processing', 1, 'host:43:cd:0', '-infinity', "
            "'-infinity', NULL), ('later', 'x', 'pending', 1, NULL, NULL, NULL, 'infinity')"
        )
    pool = DatabasePool(migrated_dsn)
    try:
        with pool.connection() as conn:  # what the queue page reads
            rows = {r.source_key: r for r in browse.queue_rows(conn, 10)}
            # Its connections are the sidecar's as any other: named, and with keepalives and a TCP user timeout
            # (they were libpq's defaults: a partition went unnoticed in a query for ~15 minutes).
            options = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
            (name,) = conn.execute("SELECT current_setting('application_name')").fetchone()
            watched = conn.session  # and its statements are timed (`connector.db.stall`)
    finally:
        pool.close()
    assert rows["stuck"].lease_expires_at.year == 1 and rows["later"].retry_after.year == 9999
    assert name == "connector" and options["keepalives_idle"] == "60" and options["tcp_user_timeout"] == "90000"
    assert watched is not None and watched.silence_s == 90
