"""One-shot ingestion of files (`connector ingest`, and the scratch runs of `eval` and `bench`).

Each file is queued and claimed in one statement, processed in this process, and reported through a callback, so
the CLI can draw a progress bar and the benchmarks can time it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from connector.db.store import Store
from connector.pipeline import Pipeline
from connector.sources.files import NotRegularFile, TooLarge, sha256_regular
from connector.sources.folder import FileRef, Refused, inspect, walk_paths
from connector.worker import Worker


@dataclass
class Report:
    counts: dict[str, int] = field(
        default_factory=lambda: {"done": 0, "unchanged": 0, "failed": 0, "superseded": 0, "retry": 0}
    )
    failures: list[tuple[str, str]] = field(default_factory=list)  # (source key, reason)


@dataclass(frozen=True)
class Selection:
    refs: list[FileRef]
    roots: list[Path]
    skipped: list[tuple[Path, str]]  # files given (or found) that will not be ingested, and why
    clashes: list[str]  # keys that two files would share


def select(paths: Sequence[Path]) -> Selection:
    """The supported files under `paths` (folders are walked), keyed as a watcher of that folder would key them."""
    refs: list[FileRef] = []
    roots: list[Path] = []
    skipped: list[tuple[Path, str]] = []

    def take(root: Path, path: Path, named: bool) -> None:
        found = inspect(root, path)
        if isinstance(found, FileRef):
            refs.append(found)
        elif isinstance(found, Refused):
            skipped.append((path, found.reason))
        elif named:  # hidden, temporary: only worth a word when the user named the file
            skipped.append((path, "hidden or temporary file"))

    for p in paths:
        if p.is_dir():
            for path in walk_paths(p):
                take(p, path, named=False)
            roots.append(p)
        else:
            take(p.parent, p, named=True)
            roots.append(p.parent)
    keys = [r.key for r in refs]
    clashes = sorted({k for k in keys if keys.count(k) > 1})
    return Selection(refs, roots, skipped, clashes)


def ingest(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    selection: Selection,
    on_file: Callable[[FileRef], None] = lambda _ref: None,
) -> Report:
    store = Store(conn)
    worker = Worker(conn, pipeline, selection.roots)
    lease_seconds = pipeline.settings.lease_seconds
    report = Report()
    for ref in selection.refs:
        on_file(ref)
        try:
            digest = sha256_regular(ref.path, worker.max_bytes)  # a FIFO or a huge file is refused unread
        except OSError as exc:
            # A failed row with the reason, as the watcher records it: never only a line on the terminal.
            reason = str(exc) if isinstance(exc, TooLarge | NotRegularFile) else f"cannot read: {exc.strerror or exc}"
            store.record_file_failure(ref.key, str(ref.path.resolve()), ref.mime, reason, None)
            report.counts["failed"] += 1
            report.failures.append((ref.key, reason))
            continue
        row = store.ingest_file(ref.key, ref.path.resolve(), ref.mime, digest, lease_seconds, worker.name)
        outcome = "unchanged" if row is None else worker.process(row)
        report.counts[outcome] += 1
        if outcome in ("failed", "retry"):  # retry: a transient error; queued again for a sidecar to retry
            report.failures.extend((e.source_key, e.last_error or "") for e in store.errors([row.id]))
    worker.index_if_due()  # the table may have grown past the HNSW index's threshold since the last check
    return report
