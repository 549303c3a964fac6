"""The web UI on the sidecar's HTTP port (`/ui/`): documents, a document with its candidates' cuts, a chunk, search
and the queue. Server-rendered with Jinja (autoescaped), one stylesheet, no script at all: the Content-Security-Policy
forbids every script, so a document holding `<script>` can only ever be text.

Read-only but for the retry button, a same-origin form POST doing what `connector retry ID` does. Every page reads
the database only, through the server's connection pool, and is read and rendered on the UI's own thread pool (a
long document's Markdown takes a while): the event loop and the JSON paths never wait for a page. Pages answer only
to the host names of this machine (`connector.web.hosts`), so that a web page on another site cannot read them
through a DNS name rebound to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable
from concurrent.futures import Executor

from jinja2 import Environment, PackageLoader
from psycopg.errors import QueryCanceled
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from connector.db import browse
from connector.db.store import Store
from connector.errors import TransientError
from connector.reports import why
from connector.secrets import one_line
from connector.settings import ScoringSettings
from connector.web import query
from connector.web.hosts import AllowedHosts
from connector.web.pool import DatabasePool, DatabaseUnavailable
from connector.web.searcher import Searcher
from connector.web.ui import views

log = logging.getLogger(__name__)

PAGE_SIZE = 50
MAX_PAGE = 1_000_000
"""Page numbers beyond are read as this one (an offset past every row, never one Postgres cannot hold)."""

QUEUE_ROWS = 200
SEARCH_CONTEXT = 1
"""Neighbours on each side that a hit's "show context" expands to."""

MAX_SEARCH_K = 100
"""The most hits the search page shows (the JSON `/search` allows more): each is rendered with its passage."""

MAX_FORM_BYTES = 4096

HEADERS = {
    # No script may run, whatever a document holds; styles and images only from this server.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_env = Environment(loader=PackageLoader("connector.web.ui", "templates"), autoescape=True, trim_blocks=True,
                   lstrip_blocks=True)  # fmt: skip
_env.filters["thousands"] = lambda n: "" if n is None else f"{n:,}"
_env.filters["score"] = lambda v: "–" if v is None else f"{v:.3f}"
_env.filters["when"] = lambda t: "" if t is None else f"{t:%Y-%m-%d %H:%M:%S}"


class _Refused(Exception):
    def __init__(self, code: int, title: str, message: str):
        super().__init__(message)
        self.code, self.title, self.message = code, title, message


def routes(
    pool: DatabasePool, searcher: Searcher, weights: ScoringSettings, executor: Executor, hosts: AllowedHosts
) -> list[BaseRoute]:
    """`hosts`: the host names the pages answer to (`connector.web.hosts`)."""
    weight_of = weights.as_dict()

    def page(template: str, code: int = 200, **context) -> HTMLResponse:
        html = _env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=code, headers=HEADERS)

    def served(build: Callable[[Request], Response], what: str):
        """A page: the host checked, then read and rendered on the UI's pool; failures as pages saying why."""

        async def endpoint(request: Request) -> Response:
            if not hosts.admit(request):
                return page("error.html", 421, title="Unknown host",
                            message="this server's pages answer to its own host names only "
                            "(CONNECTOR_HTTP_ALLOWED_HOSTS adds others)")  # fmt: skip
            try:
                return await asyncio.get_running_loop().run_in_executor(executor, build, request)
            except _Refused as exc:
                return page("error.html", exc.code, title=exc.title, message=exc.message)
            except DatabaseUnavailable as exc:
                return page("error.html", 503, title="Database unavailable", message=str(exc))
            except (TransientError, QueryCanceled) as exc:  # the embedding endpoint or the database gave up for now
                return page("error.html", 503, title=f"{what} failed for now, try again",
                            message=one_line(str(exc))[:500])  # fmt: skip
            except Exception as exc:
                log.exception("%s failed", what)
                return page("error.html", 500, title=f"{what} failed",
                            message=f"{type(exc).__name__}: {one_line(str(exc))[:500]}")  # fmt: skip

        return endpoint

    def documents_page(request: Request) -> Response:
        params = request.query_params
        _no_nul(params.values())
        status = params.get("status") or None
        if status is not None and status not in browse.STATUSES:
            raise _Refused(400, "Bad filter", f"status must be one of {', '.join(browse.STATUSES)}")
        strategy = params.get("strategy") or None
        key = (params.get("key") or "").strip()[:500] or None
        number = _page_number(params.get("page"))
        with pool.connection() as conn:
            found = browse.documents(conn, status=status, strategy=strategy, key=key, limit=PAGE_SIZE,
                                     offset=(number - 1) * PAGE_SIZE)  # fmt: skip
        pages = max(1, -(-found.total // PAGE_SIZE))
        filters = {k: v for k, v in (("status", status), ("strategy", strategy), ("key", key)) if v}
        return page("documents.html", nav="documents", title="Documents", found=found, status=status,
                    strategy=strategy, key=key or "", number=number, pages=pages, statuses=browse.STATUSES,
                    link=lambda n: "/ui/?" + urllib.parse.urlencode({**filters, "page": n}),
                    requeued=_requeued(params.get("requeued")))  # fmt: skip

    def document_page(request: Request) -> Response:
        document_id = request.path_params["id"]
        with pool.connection() as conn:
            doc, chunks, candidates = browse.document(conn, document_id)
        if doc is None:
            raise _Refused(404, "No such document", f"no document with id {document_id}")
        markdown = doc.markdown or ""
        total = len(markdown)
        scored = [s for s, _ in candidates]
        strips = [views.strip(s.strategy, s.chosen, total, c.spans if c else None, c.breaks if c else [])
                  for s, c in candidates if s.error is None]  # fmt: skip
        requeued = _requeued(request.query_params.get("requeued"))
        # The text a part at a time; the stored chunks' strip links each chunk into its part.
        parts = views.text_parts(chunks) if markdown else []
        part = min(_page_number(request.query_params.get("part")), max(1, len(parts)))
        part_of = {chunks[i].ordinal: n for n, (a, b) in enumerate(parts, 1) for i in range(a, b + 1)}
        if parts:
            first, last = parts[part - 1]
            begin = 0 if part == 1 else chunks[first].start_char
            later = chunks[last + 1].start_char if part < len(parts) else None  # where the next part starts
            shown = views.pieces(markdown, chunks[first : last + 1], begin, total if later is None else later, later)
        else:  # no chunks (yet): the start of the text
            shown = views.pieces(markdown, [], 0, min(total, views.TEXT_PART_CHARS)) if markdown else []

        def into_part(c) -> str:
            return f"?part={part_of.get(c.ordinal, 1)}#chunk-{c.ordinal + 1}"

        return page(
            "document.html", nav="documents", title=doc.title or doc.source_key, doc=doc, chunks=chunks,
            total=total, pieces=shown, part=part, parts=parts,
            stored=views.chunk_strip(total, chunks, href=into_part),
            candidates=[(s, views.bars(s, weight_of)) for s in scored], strips=strips,
            why=why(scored, weight_of) if scored else [], metrics=views.METRIC_LABELS, weights=weight_of,
            requeued=requeued if requeued == doc.id else None,
        )  # fmt: skip

    def chunk_page(request: Request) -> Response:
        chunk_id = request.path_params["id"]
        with pool.connection() as conn:
            chunk, siblings = browse.chunk(conn, chunk_id)
        if chunk is None:
            raise _Refused(404, "No such chunk", f"no chunk with id {chunk_id}")
        total = chunk.document_chars or 0
        where = views.chunk_strip(total, siblings, chunk.id, href=lambda c: f"/ui/chunks/{c.id}")
        return page("chunk.html", nav="documents", title=f"Chunk {chunk.ordinal + 1} of {chunk.source_key}",
                    chunk=chunk, html=views.render_markdown(chunk.text), total=total, where=where)  # fmt: skip

    def search_page(request: Request) -> Response:
        params = request.query_params
        question = (params.get("q") or "").strip()
        mode = params.get("mode") or "hybrid"
        context = {"nav": "search", "title": "Search", "q": question, "mode": mode, "k": params.get("k") or "10",
                   "modes": query.MODES, "max_k": MAX_SEARCH_K}  # fmt: skip
        if not question:
            return page("search.html", **context, results=None)
        try:
            wanted = query.from_query_string({"q": question, "mode": mode, "k": context["k"],
                                              "context": str(SEARCH_CONTEXT)})  # fmt: skip
            if wanted.k > MAX_SEARCH_K:
                raise query.BadRequest(f"k must be at most {MAX_SEARCH_K} here (the JSON /search allows more)")
        except query.BadRequest as exc:
            return page("search.html", 400, **context, results=None, error=str(exc))
        results = searcher.search(wanted)
        words = views.query_words(question)
        return page("search.html", **context, results=results, mark=lambda text: views.highlight(text, words),
                    around=views.around)  # fmt: skip

    def queue_page(_request: Request) -> Response:
        with pool.connection() as conn, browse.snapshot(conn):  # one moment's counts, rows and report
            store = Store(conn)
            depth, rows, report = store.queue_depth(), browse.queue_rows(conn, QUEUE_ROWS), store.strategy_report()
        strategies = [r for r in report if r.strategy != "adaptive"]
        adaptive = next((r for r in report if r.strategy == "adaptive"), None)
        most = max((r.wins for r in strategies), default=0) or 1
        return page("queue.html", nav="queue", title="Queue", depth=depth, rows=rows, strategies=strategies,
                    adaptive=adaptive, most=most, metrics=views.METRIC_LABELS)  # fmt: skip

    def retry_action(request: Request) -> Response:
        document_id = request.path_params["id"]
        if not _same_origin(request):
            raise _Refused(403, "Refused", "a retry must come from this server's own page (or use connector retry)")
        back = request.state.form.get("back", "")
        if not back.startswith("/ui/") or back.startswith("//") or "\\" in back or not back.isprintable():
            back = f"/ui/documents/{document_id}"
        with pool.connection() as conn:
            requeued = browse.retry(conn, document_id)
        if requeued is None:
            raise _Refused(409, "Not failed", f"document {document_id} is not failed (requeued or done meanwhile)")
        log.info("requeued %s %s from the web UI", requeued.id, one_line(requeued.source_key))
        path, hash_, fragment = back.partition("#")
        target = f"{path}{'&' if '?' in path else '?'}requeued={requeued.id}{hash_}{fragment}"
        return RedirectResponse(target, status_code=303, headers=HEADERS)

    retry_page = served(retry_action, "retry")

    async def retry_endpoint(request: Request) -> Response:
        try:
            request.state.form = await _form(request)  # read on the loop: the pool thread only sees the fields
        except ClientDisconnect:
            return Response(status_code=400)
        return await retry_page(request)

    async def home(_request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    static = StaticFiles(packages=[("connector.web.ui", "static")])
    return [
        Route("/", home, methods=["GET"]),
        Route("/ui/", served(documents_page, "listing documents"), methods=["GET"]),
        Route("/ui/documents/{id:int}", served(document_page, "reading the document"), methods=["GET"]),
        Route("/ui/documents/{id:int}/retry", retry_endpoint, methods=["POST"]),
        Route("/ui/chunks/{id:int}", served(chunk_page, "reading the chunk"), methods=["GET"]),
        Route("/ui/search", served(search_page, "search"), methods=["GET"]),
        Route("/ui/queue", served(queue_page, "reading the queue"), methods=["GET"]),
        Mount("/ui/static", static, name="static"),
    ]


def _page_number(raw: str | None) -> int:
    try:
        return min(max(1, int(raw)), MAX_PAGE) if raw else 1
    except ValueError:
        return 1


def _requeued(raw: str | None) -> int | None:
    """The id a retry redirected with; anything else in the parameter is not shown (no text of a link's choosing
    in the page's notice)."""
    return int(raw) if raw and raw.isascii() and raw.isdigit() and len(raw) < 20 else None


def _no_nul(values) -> None:
    if any("\x00" in v for v in values):
        raise _Refused(400, "Bad filter", "a parameter holds a NUL character")


def _same_origin(request: Request) -> bool:
    """Whether a form post comes from this server's own page. Browsers say where a request comes from: Sec-Fetch-Site
    (every current browser) is trusted when sent; else the Origin must be this host. A request with neither is
    refused: an old browser posting another site's form sends neither, and a script has `connector retry`."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return False
    return urllib.parse.urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


async def _form(request: Request) -> dict[str, str]:
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_FORM_BYTES:
            return {}
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    return {k: v[0] for k, v in fields.items()}
