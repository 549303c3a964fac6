"""`connector tune`: metric weights learned from the user's own questions (`table` gathers, `weights` fits)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from connector import qa
from connector.errors import FatalError
from connector.settings import Settings
from connector.tuning.weights import TuneResult


def run_tune(
    settings: Settings,
    dsn: str,
    records: list[qa.QARecord],
    k: int,
    folds: int,
    docs: Path | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> tuple[TuneResult, list[str]]:
    """Weights cross-validated on the QA's documents (from `docs`, else those stored in the database), and the QA
    documents not found or left out (with the reason)."""
    from connector import metrics
    from connector.embedders import load_configured
    from connector.embedders.cache import CachingEmbedder
    from connector.evaluation import find_sources
    from connector.tuning import table, weights

    found, _ids, judged = find_sources(settings, dsn, records, docs)
    sources: list[table.Source] = []
    unreadable: list[str] = []
    for ref in found.selection.refs:
        try:
            sources.append(table.Source(_name(ref.key), "folder", None, ref.path.read_bytes(), ref.mime))
        except OSError as exc:  # moved or deleted since it was ingested
            unreadable.append(f"{_name(ref.key)} ({exc.strerror or exc})")
    sources += [
        table.Source(
            _name(d.source_key), d.source, d.title, d.content_bytes or (d.content or "").encode(), d.mime_type or ""
        )
        for d in found.rows
    ]
    wanted = [r for r in records if r.doc not in found.missing]
    embedder = CachingEmbedder(load_configured(judged))
    rows, skipped = table.build(settings, embedder, sorted(sources, key=lambda s: s.name), wanted, k, progress)
    used = [m for m in metrics.METRICS if any(r.metrics.get(m) is not None for r in rows)]
    missing = found.missing + unreadable + [f"{name} ({reason})" for name, reason in skipped]
    if len({r.doc for r in rows}) < 2:
        raise FatalError(f"tuning needs questions on at least two documents; {len({r.doc for r in rows})} usable")
    return weights.tune(rows, used, settings.weights.as_dict(), folds), missing


def _name(key: str) -> str:
    from pathlib import PurePosixPath

    return PurePosixPath(key).name
