"""`connector eval`: retrieval quality of the adaptive choice against every strategy forced on every document.

Each forced run (and the LangChain-default baseline) ingests the QA's documents into a scratch database of its own,
so nothing mixes with the user's data; all runs share one embedder behind a text cache, so a chunk that several runs
produce is embedded once. Each run is judged twice: on the chunking alone (the chunks nearest by their vector,
`ORDER BY embedding <=> $q LIMIT k`), and on what users get, `connector.search()` vector-only and hybrid.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import psycopg
from psycopg.rows import class_row

from connector import qa
from connector.db import embeddings, queries
from connector.db.database import connect, ensure_embedding_model, migrate
from connector.db.rows import ChunkStats, DoneDocument, NearestChunk, StrategyWins
from connector.db.scratch import scratch_database
from connector.db.store import Store
from connector.embedders import Embedder, ModelSpec, load_configured
from connector.embedders.cache import CachingEmbedder
from connector.errors import FatalError
from connector.ingest import Selection, ingest, select
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.sources.folder import FileRef
from connector.strategies import StrategyConfig
from connector.worker import Worker

log = logging.getLogger(__name__)

BASELINE = "langchain_4000"
BUDGET_ROWS = 200


@dataclass(frozen=True)
class Sources:
    """The QA's documents: files to ingest, and stored SQL documents to copy."""

    selection: Selection
    rows: list[DoneDocument] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


SEARCH_MODES = ("vector", "hybrid")


@dataclass(frozen=True)
class RunResult:
    name: str
    documents: int  # documents with chunks
    chunks: int
    mean_tokens: float
    scores: dict[str, qa.Scores]  # the chunking alone: nearest chunk vectors, `ORDER BY embedding <=> q`
    winners: dict[str, int] = field(default_factory=dict)
    # what users get: `connector.search()` vector-only and hybrid, mode → kind → scores
    search: dict[str, dict[str, qa.Scores]] = field(default_factory=dict)


def doc_name(source_key: str) -> str:
    return PurePosixPath(source_key).name


def sources_from_folder(folder: Path, names: set[str]) -> Sources:
    found = select([folder])
    refs = [r for r in found.refs if doc_name(r.key) in names]
    missing = sorted(names - {doc_name(r.key) for r in refs})
    return Sources(Selection(refs, found.roots, [], []), [], missing)


def sources_from_database(conn: psycopg.Connection, names: set[str]) -> tuple[Sources, list[int]]:
    """The done documents the QA names, as sources for forced runs, and their ids for the adaptive run."""
    refs: list[FileRef] = []
    rows: list[DoneDocument] = []
    ids: list[int] = []
    with conn.cursor(row_factory=class_row(DoneDocument)) as cur:
        stored = cur.execute(queries.DOCUMENTS_BY_KEY).fetchall()
    for doc in stored:
        if doc_name(doc.source_key) not in names:
            continue
        ids.append(doc.id)
        if doc.source == "folder" and doc.file_path:
            refs.append(FileRef(Path(doc.file_path), doc.source_key, doc.mime_type or "text/plain"))
        else:
            rows.append(doc)
    roots = sorted({r.path.parent for r in refs})
    present = {doc_name(r.key) for r in refs} | {doc_name(r.source_key) for r in rows}
    return Sources(Selection(refs, roots, [], []), rows, sorted(names - present)), ids


def find_sources(
    settings: Settings, dsn: str, records: list[qa.QARecord], docs: Path | None
) -> tuple[Sources, list[int], Settings]:
    """The QA's documents — from the folder `docs`, else as stored in the database (with their ids) — and the
    settings to judge them with (with the database's own model when they are stored)."""
    names = {r.doc for r in records}
    with connect(dsn, autocommit=True) as conn:
        if docs is None:
            sources, ids = sources_from_database(conn, names)
            return sources, ids, settings.for_model(stored_model(conn))
    return sources_from_folder(docs, names), [], settings


def stored_model(conn: psycopg.Connection) -> ModelSpec:
    """The model a database's vectors were made with (its active one)."""
    model = embeddings.active(conn)
    if model is None:
        raise FatalError("this database has no embeddings yet: ingest the QA documents first, or pass --docs")
    return model.spec


def retrieve(conn: psycopg.Connection, embedder: Embedder, records: list[qa.QARecord], ids: list[int], k: int):
    """Each question judged on the `k` chunks nearest to it by their (mean) vector: the chunking alone."""
    with conn.transaction():
        try:
            with conn.transaction():
                conn.execute(queries.ITERATIVE_SCAN)
        except psycopg.errors.UndefinedObject:
            pass  # pgvector < 0.8: plain HNSW scan
        vectors = embedder.embed([r.question for r in records]).vectors
        judged = []
        with conn.cursor(row_factory=class_row(NearestChunk)) as cur:
            for record, vector in zip(records, vectors, strict=True):
                # Enough rows for the character budget too: 20,000 characters of 100-token chunks is ~50 of them.
                limit = max(k, BUDGET_ROWS)
                rows = cur.execute(queries.NEAREST_CHUNKS, {"documents": ids, "query": vector, "k": limit}).fetchall()
                judged.append(qa.judge(record, [(doc_name(r.source_key), r.text) for r in rows], k))
    return judged


def retrieve_by_search(
    conn: psycopg.Connection, embedder: Embedder, records: list[qa.QARecord], ids: list[int], k: int, mode: str
) -> list[qa.Judged]:
    """Each question judged on what `connector.search()` returns for it (`mode`: vector or hybrid), over the
    QA's documents only."""
    store = Store(conn)
    vectors = embedder.embed([r.question for r in records]).vectors
    judged = []
    for record, vector in zip(records, vectors, strict=True):
        hits = store.search(vector, record.question if mode == "hybrid" else None, k, {"document_id": ids})
        judged.append(qa.judge(record, [(doc_name(h.source_key), h.text) for h in hits]))
    return judged


def _run(
    conn: psycopg.Connection, name: str, embedder: Embedder, records: list[qa.QARecord], ids: list[int], k: int
) -> RunResult:
    judged = retrieve(conn, embedder, records, ids, k)
    search = {mode: qa.summarise(retrieve_by_search(conn, embedder, records, ids, k, mode)) for mode in SEARCH_MODES}
    with conn.cursor(row_factory=class_row(ChunkStats)) as cur:
        stats = cur.execute(queries.CHUNK_STATS, (ids,)).fetchone()
    winners: dict[str, int] = {}
    if name == "adaptive":
        with conn.cursor(row_factory=class_row(StrategyWins)) as cur:
            winners = {w.strategy: w.wins for w in cur.execute(queries.WINNERS, (ids,))}
    return RunResult(
        name, stats.documents, stats.chunks, float(stats.mean_tokens), qa.summarise(judged), winners, search
    )


def _load_scratch(dsn: str, settings: Settings, embedder: Embedder, sources: Sources) -> list[int]:
    migrate(dsn, embedder.dim)
    with connect(dsn, autocommit=True) as conn:
        ensure_embedding_model(conn, embedder)
        pipeline = Pipeline(settings, embedder)
        report = ingest(conn, pipeline, sources.selection)
        for key, error in report.failures:
            log.info("%s failed in this run: %s", key, error)
        if sources.rows:
            with conn.transaction():
                for doc in sources.rows:
                    params = (doc.source_key, doc.title, doc.content, doc.content_bytes, doc.mime_type)
                    conn.execute(queries.COPY_SQL_DOCUMENT, params)
            Worker(conn, pipeline, []).drain(threading.Event())
        return [r[0] for r in conn.execute("SELECT id FROM connector.documents")]


def run_eval(
    settings: Settings,
    dsn: str,
    records: list[qa.QARecord],
    k: int,
    strategies: list[str | StrategyConfig],
    docs: Path | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> tuple[list[RunResult], list[str]]:
    """Results of the adaptive run, then each forced strategy, then the baseline; and the QA documents not found."""
    sources, user_ids, judged = find_sources(settings, dsn, records, docs)
    embedder = CachingEmbedder(load_configured(judged))
    wanted = [r for r in records if r.doc not in sources.missing]

    forced: list[RunResult] = []
    for strategy in [*strategies, BASELINE]:
        # The baseline runs as the field runs it: LangChain's defaults, no guards.
        chunking = settings.chunking.forced(strategy, guards=strategy != BASELINE)
        name = chunking.strategies[0].name
        progress(f"forced {name}")
        run_settings = settings.model_copy(update={"chunking": chunking})
        with scratch_database(dsn, f"eval_{name}") as scratch:
            ids = _load_scratch(scratch, run_settings, embedder, sources)
            with connect(scratch, autocommit=True) as conn:
                forced.append(_run(conn, name, embedder, wanted, ids, k))

    progress("adaptive")
    if docs is None:
        with connect(dsn, autocommit=True) as conn:
            adaptive = _run(conn, "adaptive", embedder, wanted, user_ids, k)
    else:
        with scratch_database(dsn, "eval_adaptive") as scratch:
            ids = _load_scratch(scratch, settings, embedder, sources)
            with connect(scratch, autocommit=True) as conn:
                adaptive = _run(conn, "adaptive", embedder, wanted, ids, k)
    return [adaptive, *forced], sources.missing
