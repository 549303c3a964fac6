"""The web UI (`/ui/`) in a real headless browser (Debian's chromium through Playwright) against `connector run` as
a user runs it: a folder of real documents (a Markdown manual, an HTML page full of tables, a PDF page, a hostile
file, a broken PDF) and table rows, ingested by the real pipeline. Each page is checked against the database it
draws: the candidates and their cuts, the stored chunks, a search that must find a known chunk, the queue; the
retry button requeues the failed document; a document holding `<script>` runs nothing."""

from __future__ import annotations

import re
import signal
import subprocess
import uuid
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from connector.db.database import migrate
from connector.db.store import Store
from connector.web.ui import views
from tests.conftest import FIXTURES, child_env, connector_cmd, wait_for
from tests.test_search import TOPICS
from tests.test_sidecar import SIDECAR_ENV

HOSTILE_NAME = "<img src=x onerror=alert(3)> notes.md"
HOSTILE = (
    "# Hostile <script>alert(1)</script>\n\n"
    "This page holds <script>alert(1)</script> and <img src=x onerror=alert(2)> inline, and a "
    "[link](javascript:alert(4)). All of it must show as text.\n\n"
    "| cell | other |\n|---|---|\n| <b onmouseover=alert(5)>x</b> | y |\n"
)
FOLDER = {
    "dockerfile-reference.md": (FIXTURES / "dockerfile-reference.md").read_bytes(),
    "postgresql-15-datatype-numeric.html": (FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes(),
    "booktabs-p2.pdf": (FIXTURES / "booktabs-p2.pdf").read_bytes(),
    "austen-northanger-abbey.txt": (FIXTURES / "austen-northanger-abbey.txt").read_bytes(),  # 433 K characters
    HOSTILE_NAME: HOSTILE.encode(),
    "broken.pdf": b"%PDF-1.4 this is not a PDF",
}


@dataclass
class Site:
    url: str
    dsn: str

    def one(self, query: str, *params):
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(query, params).fetchone()

    def all(self, query: str, *params):
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(query, params).fetchall()

    def doc_id(self, key: str) -> int:
        return self.one("SELECT id FROM connector.documents WHERE source_key = %s", key)[0]


@pytest.fixture(scope="module")
def site(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory):
    """One database and one `connector run --http-port 0` for the module: its documents all processed first."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(pg_admin_dsn, dbname=name)
    tmp = tmp_path_factory.mktemp("ui")
    inbox = tmp / "inbox"
    inbox.mkdir()
    for file_name, data in FOLDER.items():
        (inbox / file_name).write_bytes(data)
    migrate(dsn, 384)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for key, text in TOPICS.items():
            conn.execute("INSERT INTO connector.documents (source_key, content, metadata) VALUES (%s, %s, %s)",
                         (f"topics/{key}", text, Jsonb({"kind": "topic"})))  # fmt: skip
    log = open(tmp / "sidecar.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        connector_cmd("run", "--watch", str(inbox), "--embedder", "fake", "--http-port", "0"),
        cwd=tmp, env={**child_env(tmp), "CONNECTOR_DSN": dsn, **SIDECAR_ENV}, stdout=log, stderr=log,
    )  # fmt: skip

    def output() -> str:
        log.flush()
        log.seek(0)
        return log.read()

    try:
        found = wait_for(lambda: re.search(r"web UI on (http://127\.0\.0\.1:\d+)/ui/", output()), timeout=90,
                         what="the web UI's address in the log")  # fmt: skip
        site = Site(found.group(1), dsn)
        total = len(FOLDER) + len(TOPICS)
        wait_for(lambda: site.one("SELECT count(*) FROM connector.documents WHERE status IN ('done', 'failed')")[0]
                 == total, timeout=240, what="every document processed")  # fmt: skip
        assert site.one("SELECT count(*) FROM connector.documents WHERE status = 'failed'")[0] == 1, output()
        yield site
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        text = output()
        log.close()
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        assert code == 0, text
        assert "Traceback" not in text, text


@pytest.fixture(params=[False])
def page(browser, request):
    """A fresh browser context per test; every dialog (an `alert()` that ran) is recorded and fails the test.
    Parametrized with True, the context ignores the pages' Content-Security-Policy: escaping alone must hold."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=request.param)
    tab = context.new_page()
    tab.dialogs = []
    tab.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))
    refused = []  # what the CSP blocked (an inline style, a script): a page that relies on what its policy forbids
    tab.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        yield tab
    finally:
        dialogs = tab.dialogs
        context.close()
        assert dialogs == [], f"script ran in the page: alert({dialogs})"
        assert refused == [], f"the page's policy refused: {refused[:3]}"


def test_documents_page_lists_filters_and_shows_failures_with_their_reason(site: Site, page) -> None:
    response = page.goto(site.url + "/")  # / leads to the UI
    assert response.ok and page.url == site.url + "/ui/"
    rows = page.locator("table.documents tbody tr[data-id]")
    assert rows.count() == len(FOLDER) + len(TOPICS)
    assert page.locator("h1 small").inner_text() == str(len(FOLDER) + len(TOPICS))
    # each line says what the database says
    doc_id, strategy, score, chunks = site.one(
        "SELECT d.id, d.strategy, d.score, (SELECT count(*) FROM connector.chunks c WHERE c.document_id = d.id) "
        "FROM connector.documents d WHERE source_key = 'dockerfile-reference.md'"
    )
    cells = page.locator(f"tr[data-id='{doc_id}'] td").all_inner_texts()
    assert cells[1:6] == ["done", "folder", "dockerfile-reference.md", "Dockerfile reference", strategy]
    assert cells[6:8] == [f"{score:.3f}", str(chunks)]

    page.select_option("select[name=status]", "failed")
    page.click("form.filters button")
    assert "status=failed" in page.url
    assert page.locator("tr[data-id]").count() == 1
    reason = site.one("SELECT last_error FROM connector.documents WHERE source_key = 'broken.pdf'")[0]
    assert page.locator("tr.failure td.error").inner_text().startswith(reason)
    assert page.locator("tr.failure form.retry button").count() == 1

    page.goto(site.url + "/ui/")
    page.select_option("select[name=strategy]", strategy)
    page.click("form.filters button")
    expected = site.one("SELECT count(*) FROM connector.documents WHERE strategy = %s", strategy)[0]
    shown = page.locator("tr[data-id] td:nth-child(6)").all_inner_texts()
    assert len(shown) == expected and set(shown) == {strategy}

    page.goto(site.url + "/ui/?key=topics/")
    assert page.locator("tr[data-id]").count() == len(TOPICS)
    assert page.goto(site.url + "/ui/?status=bogus").status == 400
    assert page.goto(site.url + "/ui/?page=99999999999999999999").ok and page.locator("tr[data-id]").count() == 0


def test_document_page_draws_the_candidates_their_cuts_and_the_stored_chunks(site: Site, page) -> None:
    doc_id = site.doc_id("dockerfile-reference.md")
    strategy, score = site.one("SELECT strategy, score FROM connector.documents WHERE id = %s", doc_id)
    candidates = site.all("SELECT strategy, chunk_count, error, spans, breaks FROM connector.candidates "
                          "WHERE document_id = %s", doc_id)  # fmt: skip
    stored = site.all("SELECT id, ordinal FROM connector.chunks WHERE document_id = %s ORDER BY ordinal", doc_id)
    page.goto(f"{site.url}/ui/documents/{doc_id}")
    assert page.locator("main > h1").inner_text() == "Dockerfile reference"

    # the metrics: one row per candidate, the winner highlighted, its score as stored, the explanation in words
    assert page.locator("table.candidates tbody tr").count() == len(candidates)
    winner = page.locator("table.candidates tr.winner")
    assert winner.count() == 1 and winner.get_attribute("data-strategy") == strategy
    assert winner.locator("td.score .value").inner_text() == f"{score:.3f}"
    assert winner.locator("td.metric svg.bar").count() == 7
    assert page.locator(".why p").first.inner_text().startswith(f"{strategy} won with ")

    # one strip per candidate that ran: a segment per chunk, a mark per break, of the kinds stored
    ran = [c for c in candidates if c[2] is None]
    assert page.locator(".strip-row").count() == len(ran)
    for name, count, _, spans, breaks in ran:
        row = page.locator(f".strip-row[data-strategy='{name}']")
        assert row.locator("svg rect").count() == count == len(spans) // 2, name
        total = sum(b["count"] for b in breaks)
        label = row.locator(".strip-name small").inner_text()
        assert label == f"{count} chunks" + (f", {total} break{'s' if total != 1 else ''}" if total else ""), name
        if len(breaks) <= views.MAX_MARKS:  # else merged along the strip (tested on a long document below)
            assert row.locator("polygon.break").count() == len(breaks), name
            for kind in ("table", "list", "code", "reference"):
                assert row.locator(f"polygon.break.{kind}").count() == sum(b["kind"] == kind for b in breaks), name
    assert page.locator(".strip-row.chosen").get_attribute("data-strategy") == strategy
    assert sum(len(c[4]) for c in ran) > 0, "some strategy breaks something in a real manual"

    # the text, cut into the stored chunks: a piece per chunk, in order, each linking to its chunk's page
    pieces = page.locator(".document section.piece[id^='chunk-']")
    assert pieces.count() == len(stored)
    assert [pieces.nth(i).get_attribute("id") for i in range(len(stored))] == [f"chunk-{o + 1}" for _, o in stored]
    assert pieces.nth(0).locator(".piece-label a").get_attribute("href") == f"/ui/chunks/{stored[0][0]}"
    assert "FROM" in page.locator(".document").inner_text()

    # a document with tables and pages: a table the winner keeps whole is rendered as one
    pdf = site.doc_id("booktabs-p2.pdf")
    page.goto(f"{site.url}/ui/documents/{pdf}")
    assert page.locator("dl.meta dt", has_text="pages").count() == 1
    assert page.goto(f"{site.url}/ui/documents/999999").status == 404


def test_a_long_document_is_shown_a_part_at_a_time_and_its_strips_stay_small(site: Site, page) -> None:
    doc_id = site.doc_id("austen-northanger-abbey.txt")
    stored = site.all("SELECT ordinal, start_char, end_char FROM connector.chunks WHERE document_id = %s "
                      "ORDER BY ordinal", doc_id)  # fmt: skip
    page.goto(f"{site.url}/ui/documents/{doc_id}")
    shown = len(page.locator(".document").inner_text())
    assert shown < 0.6 * stored[-1][2], "one part of the novel's 433 K characters, not all of them"
    parts = int(re.search(r"part 1 of (\d+)", page.locator("nav.parts").first.inner_text()).group(1))
    sizes = [e - s for _, s, e in stored]
    assert parts >= sum(sizes) // views.TEXT_PART_CHARS >= 2 and parts <= sum(sizes) // views.TEXT_PART_CHARS + 1
    page.locator("nav.parts a[rel=next]").first.click()
    page.wait_for_url(re.compile(r"\?part=2#text$"))
    assert page.locator("nav.parts").first.inner_text().count("part 2 of") == 1
    seen = []
    for n in range(1, parts + 1):
        page.goto(f"{site.url}/ui/documents/{doc_id}?part={n}")
        seen += [int(i.removeprefix("chunk-")) for i in page.locator(".document section.piece[id]").evaluate_all(
            "s => s.map(e => e.id)")]  # fmt: skip
    assert seen == [o + 1 for o, _, _ in stored], "every chunk in exactly one part, in order"
    assert page.locator("nav.parts a[rel=next]").count() == 0
    # the stored chunks' strip sends each chunk to its part
    last = page.locator("#text svg.strip a").last.get_attribute("href")
    assert last == f"?part={parts}#chunk-{len(stored)}"
    # every part's page carries the whole document's strips (merging past their limits: test_web_views)
    name, count = site.one("SELECT strategy, chunk_count FROM connector.candidates WHERE document_id = %s AND "
                           "error IS NULL ORDER BY chunk_count DESC LIMIT 1", doc_id)  # fmt: skip
    row = page.locator(f".strip-row[data-strategy='{name}']")
    assert row.locator("svg rect").count() == min(count, views.MAX_SEGMENTS) and count > len(stored)
    assert page.locator("#text svg.strip rect").count() == len(stored)


def test_chunk_page_shows_its_place_and_walks_to_its_neighbours(site: Site, page) -> None:
    doc_id = site.doc_id("dockerfile-reference.md")
    chunks = site.all("SELECT id, ordinal, token_count, section_path, start_char, end_char, text "
                      "FROM connector.chunks WHERE document_id = %s ORDER BY ordinal", doc_id)  # fmt: skip
    chunk_id, ordinal, tokens, section, start, end, text = chunks[1]
    page.goto(f"{site.url}/ui/chunks/{chunk_id}")
    assert page.locator("main > h1").inner_text() == "Chunk 2"
    meta = dict(zip(page.locator("dl.meta dt").all_inner_texts(), page.locator("dl.meta dd").all_inner_texts(),
                    strict=True))  # fmt: skip
    assert meta["tokens"] == str(tokens) and meta["section"] == (" › ".join(section) or "–")
    assert meta["characters"].startswith(f"{start:,}–{end:,} of ")
    assert page.locator("pre.raw").text_content() == (
        text[1:] if text.startswith("\n") else text
    )  # as HTML reads <pre>
    # where it sits: every stored chunk on the strip, this one marked
    assert page.locator("svg.strip rect").count() == len(chunks)
    assert page.locator("svg.strip rect.current").count() == 1

    page.click("a[rel=next]")
    assert page.url.endswith(f"/ui/chunks/{chunks[2][0]}") and page.locator("main > h1").inner_text() == "Chunk 3"
    page.click("a[rel=prev]")
    page.click("a[rel=prev]")
    assert page.url.endswith(f"/ui/chunks/{chunks[0][0]}")
    assert page.locator("a[rel=prev]").count() == 0 and page.locator(".neighbours").inner_text().startswith("first")
    assert page.goto(f"{site.url}/ui/chunks/999999999").status == 404


def test_search_finds_the_known_chunk_marks_the_words_and_expands_the_context(site: Site, page) -> None:
    flux = site.one("SELECT c.id FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
                    "WHERE d.source_key = 'topics/flux'")[0]  # fmt: skip
    page.goto(site.url + "/ui/search")
    page.fill("input[name=q]", "How is the XJ42 flux capacitor calibrated?")
    page.press("input[name=q]", "Enter")
    page.wait_for_url(re.compile(r"/ui/search\?q="))
    first = page.locator("li.result").first
    assert first.get_attribute("data-chunk") == str(flux)
    marked = {m.lower() for m in first.locator("mark").all_inner_texts()}
    assert {"xj42", "flux", "capacitor"} <= marked and marked <= {"xj42", "flux", "capacitor", "calibrated"}

    # a hit in the long manual has neighbours: "show context" opens the passage around it
    page.goto(site.url + "/ui/search?" + httpx.QueryParams({"q": "HEALTHCHECK instruction interval retries",
                                                            "mode": "vector", "k": "5"}).__str__())  # fmt: skip
    assert page.locator("select[name=mode]").input_value() == "vector"
    hit = page.locator("li.result:has(details.context)").first
    hit_text = hit.locator("p.text").first.inner_text()
    context = hit.locator("details.context")
    assert not context.locator("p.text").is_visible()
    context.locator("summary").click()
    passage = context.locator("p.text")
    assert passage.is_visible() and len(passage.inner_text()) > len(hit_text)
    assert hit_text.strip()[:200] in passage.inner_text()
    assert context.locator(".hit").inner_text().strip() == hit_text.strip(), "the hit set apart in its passage"
    assert context.locator(".neighbour").all_inner_texts() != ["", ""], "with the text of its neighbours"

    bad = page.goto(site.url + "/ui/search?q=x&k=0")
    assert bad.status == 400 and "k must be" in page.locator("p.error").inner_text()


def test_queue_page_counts_what_status_counts_and_charts_the_strategies(site: Site, page) -> None:
    page.goto(site.url + "/ui/queue")
    counts = {name: int(page.locator(f".count[data-count='{name}'] .n").inner_text().replace(",", ""))
              for name in ("ready", "ready_files", "backing_off", "processing", "done", "failed")}  # fmt: skip
    done, failed = site.one("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = "
                            "'failed') FROM connector.documents")  # fmt: skip
    assert counts == {"ready": 0, "ready_files": 0, "backing_off": 0, "processing": 0, "done": done, "failed": failed}
    with psycopg.connect(site.dsn) as conn:  # what `connector report` prints
        report = {r.strategy: r for r in Store(conn).strategy_report()}
    adaptive = report.pop("adaptive")
    rows = page.locator("table.chart tbody tr[data-strategy]")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.strategy)")) == sorted(report)
    for i in range(rows.count()):
        row = rows.nth(i)
        expected = report[row.get_attribute("data-strategy")]
        wins, score = row.locator("td.bar-cell .value").all_inner_texts()
        assert (int(wins), score) == (expected.wins, f"{expected.score:.3f}")
        assert row.locator("td.num").first.inner_text() == str(expected.documents)
    assert adaptive.wins == done
    assert page.locator("tr.adaptive td.bar-cell .value").all_inner_texts() == [str(done), f"{adaptive.score:.3f}"]

    # a document held by a worker and one backing off show up with who holds it and why it waits
    held, waiting = site.doc_id("topics/volumes"), site.doc_id("topics/licence")
    with psycopg.connect(site.dsn, autocommit=True) as conn:  # (the sidecar claims only what is ready)
        conn.execute(
            "UPDATE connector.documents SET status = 'processing', claimed_by = 'elsewhere:1', "
            "heartbeat_at = now(), lease_expires_at = now() + interval '1 hour' WHERE id = %s",
            (held,),
        )
        conn.execute(
            "UPDATE connector.documents SET status = 'pending', retries = 2, retry_after = now() + interval '1 hour', "
            "last_error = 'the endpoint answered 503' WHERE id = %s",
            (waiting,),
        )
    try:
        page.goto(site.url + "/ui/queue")
        assert page.locator(".count[data-count='processing'] .n").inner_text() == "1"
        assert page.locator(".count[data-count='backing_off'] .n").inner_text() == "1"
        assert "elsewhere:1" in page.locator("table.queue tr.processing").inner_text()
        assert "the endpoint answered 503" in page.locator("table.queue tr.pending").inner_text()
    finally:
        with psycopg.connect(site.dsn, autocommit=True) as conn:
            conn.execute("UPDATE connector.documents SET status = 'done', claimed_by = NULL, lease_expires_at = "
                         "NULL, retries = 0, retry_after = NULL, last_error = NULL WHERE id = ANY(%s)",
                         ([held, waiting],))  # fmt: skip


@pytest.mark.parametrize("page", [True], indirect=True)  # without the CSP's help: nothing may run anyway
def test_a_document_holding_script_shows_it_as_text_and_runs_nothing(site: Site, page) -> None:
    doc_id = site.doc_id(HOSTILE_NAME)
    response = page.goto(f"{site.url}/ui/documents/{doc_id}")
    assert "script-src" not in response.headers["content-security-policy"]
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    page.wait_for_load_state("load")
    assert page.locator("main > h1").inner_text() == "Hostile <script>alert(1)</script>"
    body = page.locator(".document").inner_text()
    assert "<script>alert(1)</script>" in body and "<img src=x onerror=alert(2)>" in body
    assert page.locator("main script, main img, main [onerror], main [onmouseover]").count() == 0
    assert page.locator("main a[href^='javascript']").count() == 0
    assert page.locator("dd.key").inner_text() == HOSTILE_NAME
    page.goto(site.url + "/ui/")
    assert page.locator(f"tr[data-id='{doc_id}'] td.key").inner_text() == HOSTILE_NAME
    page.goto(site.url + "/ui/search?q=hostile+page+holds+script+alert")
    assert page.locator("li.result").count() > 0
    assert page.locator("main script, main img").count() == 0  # the page fixture fails on any dialog
    # what a link or a parameter carries back into a page is escaped too
    page.goto(site.url + "/ui/search?q=%3Cscript%3Ealert(6)%3C/script%3E")
    assert page.locator("input[name=q]").input_value() == "<script>alert(6)</script>"
    page.goto(site.url + "/ui/?key=%22%3E%3Cscript%3Ealert(7)%3C/script%3E&requeued=%3Cb%3Elog+in+here")
    assert page.locator("main script").count() == 0 and page.locator(".notice").count() == 0


def test_pages_refuse_what_they_cannot_show_and_other_hosts(site: Site) -> None:
    with httpx.Client(base_url=site.url, timeout=30) as http:
        for path in ("/ui/?key=%00", "/ui/?strategy=a%00", "/ui/search?q=a%00b", "/ui/search?q=x&k=101"):
            assert http.get(path).status_code == 400, path
        assert http.get("/search", params={"q": "a\x00b"}).status_code == 400  # the JSON path too
        # a name rebound to 127.0.0.1 by another site reaches no page (the JSON paths and probes are not pages)
        rebound = http.get("/ui/", headers={"Host": "attacker.example:80"})
        assert rebound.status_code == 421 and "dockerfile-reference" not in rebound.text
        searched = http.get("/search", params={"q": "dockerfile"}, headers={"Host": "attacker.example"})
        assert searched.status_code == 421 and "results" not in searched.json()
        assert http.get("/health", headers={"Host": "10.1.2.3:9464"}).status_code == 200
        for name in ("localhost", "LOCALHOST:9464", "localhost.", "[::1]:9464", "127.0.0.1"):
            assert http.get("/ui/", headers={"Host": name}).status_code == 200, name
            assert http.get("/search", params={"q": "x"}, headers={"Host": name}).status_code == 200, name
        css = http.get("/ui/static/ui.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        icon = http.get("/ui/static/favicon.svg")  # linked from every page: the browser asks for none elsewhere
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_document_text_keeps_to_the_pages_policy(site: Site, page) -> None:
    """No inline style (the CSP would drop it), no link resolving against the UI's own paths."""
    doc_id = site.doc_id("postgresql-15-datatype-numeric.html")
    page.goto(f"{site.url}/ui/documents/{doc_id}")
    assert page.locator(".document table").count() > 0 and page.locator(".document [style]").count() == 0
    assert page.locator(".document span.dead-link").count() > 0
    hrefs = page.locator(".document a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert all(h.startswith(("/ui/chunks/", "http://", "https://", "mailto:")) for h in hrefs), hrefs


def test_retry_requeues_the_failed_document_and_refuses_another_sites_form(site: Site, page) -> None:
    doc_id = site.doc_id("broken.pdf")
    attempts = site.one("SELECT attempts FROM connector.documents WHERE id = %s", doc_id)[0]
    # another site's form posting here is refused; the document stays failed
    url = f"{site.url}/ui/documents/{doc_id}/retry"
    host = site.url.removeprefix("http://")
    for headers in (
        {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": f"http://{host}"},  # a sibling site: still not this page
        {"Origin": "http://evil.example"},  # an older browser: no Sec-Fetch-Site
        {"Origin": "null"},
        {},  # neither header: not a page of ours
    ):
        assert httpx.post(url, data={"back": "/ui/"}, headers=headers).status_code == 403, headers
    assert site.one("SELECT status FROM connector.documents WHERE id = %s", doc_id)[0] == "failed"

    page.goto(site.url + "/ui/?status=failed")
    page.click("tr.failure form.retry button")
    assert f"requeued={doc_id}" in page.url and "status=failed" in page.url
    assert page.locator(".notice").inner_text() == f"Document {doc_id} is back in the queue."
    # requeued with a fresh budget of tries: the sidecar claims it again (and it fails again: it is still broken)
    wait_for(lambda: site.one("SELECT attempts > %s AND status = 'failed' FROM connector.documents WHERE id = %s",
                              attempts, doc_id)[0], timeout=60, what="the document processed again")  # fmt: skip
    # a form of this page's origin without Sec-Fetch-Site (an older browser) is accepted; where it leads stays here
    again = httpx.post(url, data={"back": "//evil.example/x"}, headers={"Origin": f"http://{host}"})
    assert again.status_code == 303 and again.headers["location"] == f"/ui/documents/{doc_id}?requeued={doc_id}"
    wait_for(lambda: site.one("SELECT status = 'failed' AND attempts > %s + 1 FROM connector.documents WHERE id = %s",
                              attempts, doc_id)[0], timeout=60, what="the document processed a third time")  # fmt: skip
    back = httpx.post(url, data={"back": "/ui/documents/1?a=b#cuts"}, headers={"Sec-Fetch-Site": "same-origin"})
    assert back.status_code == 303 and back.headers["location"] == f"/ui/documents/1?a=b&requeued={doc_id}#cuts"
    wait_for(lambda: site.one("SELECT status = 'failed' AND attempts > %s + 2 FROM connector.documents WHERE id = %s",
                              attempts, doc_id)[0], timeout=60, what="the document failed again")  # fmt: skip
    # retrying what is not failed says so
    done = site.doc_id("dockerfile-reference.md")
    assert (
        httpx.post(f"{site.url}/ui/documents/{done}/retry", headers={"Sec-Fetch-Site": "same-origin"}).status_code
        == 409
    )


def test_the_ui_can_be_turned_off_leaving_the_json_paths(settings, migrated_dsn: str) -> None:
    from connector.embedders import load
    from connector.observe import Health
    from connector.web import HttpServer

    health = Health(migrated_dsn, lambda: 1, 1, list)
    for ui in (False, True):
        server = HttpServer(
            "127.0.0.1", 0, health, migrated_dsn, load("fake"), settings.model_copy(update={"http_ui": ui})
        )
        server.start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
                assert http.get("/health").status_code == 200
                assert http.get("/search", params={"q": "anything"}).status_code == 200
                answer = http.get("/ui/")
                assert answer.status_code == (200 if ui else 404)
                assert http.get("/ui/static/ui.css").status_code == (200 if ui else 404)
                if not ui:
                    assert answer.json()["error"].endswith("the paths are /health, /metrics, /search, /live")
                else:
                    assert "Documents" in answer.text and answer.headers["x-content-type-options"] == "nosniff"
                    assert http.get("/nope").json()["error"].endswith("/search, /live, /ui/")
        finally:
            server.stop()
