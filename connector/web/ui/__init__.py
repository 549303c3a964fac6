"""The web UI on the sidecar's HTTP port (`/ui/`): documents, a document with its candidates' cuts, a chunk, search
and the queue. Server-rendered with Jinja (autoescaped), one stylesheet, no script at all: the Content-Security-Policy
forbids every script, so a document holding `<script>` can only ever be text.

Read-only but for the retry button, a same-origin form POST doing what `connector retry ID` does. Every page reads
the database only, through the server's connection pool, on the server's own thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable
from concurrent.futures import Executor

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from connector.db import browse
from connector.db.store import Store
from connector.reports import why
from connector.secrets import one_line
from connector.settings import ScoringSettings
from connector.web import query
from connector.web.pool import DatabasePool, DatabaseUnavailable
from connector.web.searcher import Searcher
from connector.web.ui import views

log = logging.getLogger(__name__)

PAGE_SIZE = 50
QUEUE_ROWS = 200
SEARCH_CONTEXT = 1
"""Neighbours on each side that a hit's "show context" expands to."""

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


def routes(pool: DatabasePool, searcher: Searcher, weights: ScoringSettings, executor: Executor) -> list[BaseRoute]:
    weight_of = weights.as_dict()

    async def blocking(fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    def page(template: str, code: int = 200, **context) -> HTMLResponse:
        html = _env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=code, headers=HEADERS)

    def failure(exc: Exception, what: str) -> HTMLResponse:
        if isinstance(exc, DatabaseUnavailable):
            return page("error.html", 503, title="Database unavailable", message=str(exc))
        log.exception("%s failed", what)
        return page("error.html", 500, title=f"{what} failed",
                    message=f"{type(exc).__name__}: {one_line(str(exc))[:500]}")  # fmt: skip

    async def documents_page(request: Request) -> Response:
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in browse.STATUSES:
            return page("error.html", 400, title="Bad filter", message=f"status must be one of {browse.STATUSES}")
        strategy = params.get("strategy") or None
        key = (params.get("key") or "").strip()[:500] or None
        number = _int(params.get("page"), 1)

        def read():
            with pool.connection() as conn:
                return browse.documents(conn, status=status, strategy=strategy, key=key, limit=PAGE_SIZE,
                                        offset=(number - 1) * PAGE_SIZE)  # fmt: skip

        try:
            found = await blocking(read)
        except Exception as exc:
            return failure(exc, "listing documents")
        pages = max(1, -(-found.total // PAGE_SIZE))
        filters = {k: v for k, v in (("status", status), ("strategy", strategy), ("key", key)) if v}
        return page("documents.html", nav="documents", title="Documents", found=found, status=status,
                    strategy=strategy, key=key or "", number=number, pages=pages, statuses=browse.STATUSES,
                    link=lambda n: "/ui/?" + urllib.parse.urlencode({**filters, "page": n}),
                    requeued=params.get("requeued"))  # fmt: skip

    async def document_page(request: Request) -> Response:
        document_id = request.path_params["id"]
        requeued = request.query_params.get("requeued")

        def build() -> HTMLResponse:  # on a pool thread: rendering a long document's Markdown takes a while
            with pool.connection() as conn:
                doc, chunks, candidates = browse.document(conn, document_id)
            if doc is None:
                return page("error.html", 404, title="No such document", message=f"no document with id {document_id}")
            markdown = doc.markdown or ""
            total = len(markdown)
            scored = [s for s, _ in candidates]
            strips = [views.strip(s.strategy, s.chosen, total, c.spans if c else None, c.breaks if c else [])
                      for s, c in candidates if s.error is None]  # fmt: skip
            return page(
                "document.html", nav="documents", title=doc.title or doc.source_key, doc=doc, chunks=chunks,
                total=total, pieces=views.pieces(markdown, chunks) if markdown else [],
                stored=views.chunk_strip(total, chunks, href=lambda c: f"#chunk-{c.ordinal + 1}"),
                candidates=[(s, views.bars(s, weight_of)) for s in scored], strips=strips,
                why=why(scored, weight_of) if scored else [], metrics=views.METRIC_LABELS, weights=weight_of,
                requeued=requeued,
            )  # fmt: skip

        try:
            return await blocking(build)
        except Exception as exc:
            return failure(exc, "reading the document")

    async def chunk_page(request: Request) -> Response:
        chunk_id = request.path_params["id"]

        def read():
            with pool.connection() as conn:
                found = browse.chunk(conn, chunk_id)
                if found is None:
                    return None, []
                return found, browse.document(conn, found.document_id)[1]

        try:
            chunk, siblings = await blocking(read)
        except Exception as exc:
            return failure(exc, "reading the chunk")
        if chunk is None:
            return page("error.html", 404, title="No such chunk", message=f"no chunk with id {chunk_id}")
        total = chunk.document_chars or 0
        where = views.chunk_strip(total, siblings, chunk.id, href=lambda c: f"/ui/chunks/{c.id}")
        return page("chunk.html", nav="documents", title=f"Chunk {chunk.ordinal + 1} of {chunk.source_key}",
                    chunk=chunk, html=views.render_markdown(chunk.text), total=total, where=where)  # fmt: skip

    async def search_page(request: Request) -> Response:
        params = request.query_params
        question = (params.get("q") or "").strip()
        mode = params.get("mode") or "hybrid"
        context = {"nav": "search", "title": "Search", "q": question, "mode": mode, "k": params.get("k") or "10",
                   "modes": query.MODES}  # fmt: skip
        if not question:
            return page("search.html", **context, results=None)
        try:
            wanted = query.from_query_string({"q": question, "mode": mode, "k": context["k"],
                                              "context": str(SEARCH_CONTEXT)})  # fmt: skip
        except query.BadRequest as exc:
            return page("search.html", 400, **context, results=None, error=str(exc))
        try:
            results = await blocking(searcher.search, wanted)
        except Exception as exc:
            return failure(exc, "search")
        words = views.query_words(question)
        return page("search.html", **context, results=results, mark=lambda text: views.highlight(text, words),
                    around=views.around)  # fmt: skip

    async def queue_page(_request: Request) -> Response:
        def read():
            with pool.connection() as conn:
                store = Store(conn)
                return store.queue_depth(), browse.queue_rows(conn, QUEUE_ROWS), store.strategy_report()

        try:
            depth, rows, report = await blocking(read)
        except Exception as exc:
            return failure(exc, "reading the queue")
        strategies = [r for r in report if r.strategy != "adaptive"]
        adaptive = next((r for r in report if r.strategy == "adaptive"), None)
        most = max((r.wins for r in strategies), default=0) or 1
        return page("queue.html", nav="queue", title="Queue", depth=depth, rows=rows, strategies=strategies,
                    adaptive=adaptive, most=most, metrics=views.METRIC_LABELS)  # fmt: skip

    async def retry_action(request: Request) -> Response:
        document_id = request.path_params["id"]
        if not _same_origin(request):
            return page("error.html", 403, title="Refused", message="a retry must come from this server's own page")
        form = await _form(request)
        back = form.get("back", "")
        if not back.startswith("/ui/") or back.startswith("//") or "\\" in back:
            back = f"/ui/documents/{document_id}"

        def requeue():
            with pool.connection() as conn:
                return browse.retry(conn, document_id)

        try:
            requeued = await blocking(requeue)
        except Exception as exc:
            return failure(exc, "retry")
        if requeued is None:
            return page("error.html", 409, title="Not failed",
                        message=f"document {document_id} is not failed (requeued or done meanwhile)")  # fmt: skip
        log.info("requeued %s %s from the web UI", requeued.id, one_line(requeued.source_key))
        sep = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{sep}requeued={requeued.id}", status_code=303, headers=HEADERS)

    async def home(_request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    static = StaticFiles(packages=[("connector.web.ui", "static")])
    return [
        Route("/", home, methods=["GET"]),
        Route("/ui/", documents_page, methods=["GET"]),
        Route("/ui/documents/{id:int}", document_page, methods=["GET"]),
        Route("/ui/documents/{id:int}/retry", retry_action, methods=["POST"]),
        Route("/ui/chunks/{id:int}", chunk_page, methods=["GET"]),
        Route("/ui/search", search_page, methods=["GET"]),
        Route("/ui/queue", queue_page, methods=["GET"]),
        Mount("/ui/static", static, name="static"),
    ]


def _int(raw: str | None, default: int) -> int:
    try:
        return max(1, int(raw)) if raw else default
    except ValueError:
        return default


def _same_origin(request: Request) -> bool:
    """A browser says where a form came from (Sec-Fetch-Site, Origin): refuse another site's form posting here.
    A request with neither header is not from a browser's page (curl), so no other site made it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return site is not None or origin is None
    return urllib.parse.urlsplit(origin).netloc == request.headers.get("host")


async def _form(request: Request) -> dict[str, str]:
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_FORM_BYTES:
            return {}
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    return {k: v[0] for k, v in fields.items()}
