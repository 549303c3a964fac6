"""What `eval`, `bench` and `convert` print: JSON payloads and rich tables, kept out of the CLI's argument handling."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from connector import qa
from connector.db.rows import FoundDocument, StoredCandidate, StrategyMeans
from connector.logs import printable
from connector.settings import ChunkingSettings


def cell(text: str) -> Text:
    """What a document says (its text, key, title, section, error), as a table cell: never read as rich markup (a
    chunk holding `[/usr/bin]` made `connector search` fail), and with control characters shown, not sent to the
    terminal (an escape sequence in a document must not recolour or retitle it)."""
    return Text(printable(text))


def shown(text: str) -> str:
    """The same, for a line of rich markup: `f"[red]failed[/red] {shown(key)}"`."""
    return escape(printable(text))


def console() -> Console:
    # Piped output gets 80 columns by default, which truncates the strategy names: reports are wide.
    out = Console()
    return out if out.is_terminal else Console(width=200)


def eval_payload(k: int, questions: int, results) -> dict:
    return {
        "k": k,
        "questions": questions,
        "lenient_share": qa.LENIENT_SHARE,
        "runs": [
            {
                "name": r.name,
                "documents": r.documents,
                "chunks": r.chunks,
                "mean_tokens": round(r.mean_tokens, 1),
                "winners": r.winners,
                "scores": {kind: _scores(s) for kind, s in r.scores.items()},
                "search": {mode: {kind: _scores(s) for kind, s in kinds.items()} for mode, kinds in r.search.items()},
            }
            for r in results
        ],
    }


def _scores(s: qa.Scores) -> dict:
    return {"questions": s.questions, "recall": s.recall, "mrr": s.mrr, "lenient_recall": s.lenient_recall,
            "budget_recall": s.budget_recall}  # fmt: skip


def eval_table(k: int, results) -> Table:
    """One row per run: the chunking alone (nearest chunk vectors), then through `connector.search()`."""
    kinds = sorted({kind for r in results for kind in r.scores} - {"all"})
    table = Table(
        "run", "docs", "chunks", "tokens", f"recall@{k}", "MRR", f"lenient@{k}", f"@{qa.BUDGET_CHARS // 1000}k chars",
        *(f"{kind}@{k}" for kind in kinds),
        f"search vector@{k}", "MRR", f"search hybrid@{k}", "MRR",
        title=f"{results[0].scores['all'].questions} questions; lenient = {qa.LENIENT_SHARE:.0%} of the evidence; "
        f"@{qa.BUDGET_CHARS // 1000}k chars = a hit within the first {qa.BUDGET_CHARS:,} characters retrieved; "
        "recall and MRR of the chunks nearest by vector, then of connector.search()",
    )  # fmt: skip
    for r in results:
        s = r.scores["all"]
        table.add_row(
            r.name, str(r.documents), str(r.chunks), f"{r.mean_tokens:.0f}", f"{s.recall:.3f}", f"{s.mrr:.3f}",
            f"{s.lenient_recall:.3f}", f"{s.budget_recall:.3f}",
            *(f"{r.scores[kind].recall:.3f}" if kind in r.scores else "-" for kind in kinds),
            *(cell for mode in ("vector", "hybrid") for cell in _recall_mrr(r.search.get(mode, {}).get("all"))),
        )  # fmt: skip
    return table


def _recall_mrr(scores: qa.Scores | None) -> tuple[str, str]:
    return (f"{scores.recall:.3f}", f"{scores.mrr:.3f}") if scores else ("-", "-")


def search_kinds_table(k: int, result) -> Table:
    """recall@k / MRR of one run per question kind: nearest chunk vectors, then `connector.search()`."""
    table = Table("kind", "questions", "chunks", *result.search, title=f"{result.name}: recall@{k} / MRR per kind")
    for kind in sorted(result.scores, key=lambda kd: (kd != "all", kd)):
        cells = [result.scores[kind], *(by_kind.get(kind) for by_kind in result.search.values())]
        table.add_row(kind, str(result.scores[kind].questions),
                      *(f"{c.recall:.3f} / {c.mrr:.3f}" if c else "-" for c in cells))  # fmt: skip
    return table


def bench_payload(embedder: str, arms, runs) -> dict:
    adaptive, single = arms
    return {
        "embedder": embedder,
        "arms": [a.__dict__ | {"docs_per_s": a.docs_per_s, "chunks_per_s": a.chunks_per_s} for a in arms],
        "ratio_adaptive_to_single": adaptive.wall_s / single.wall_s if single.wall_s else None,
        "throughput_fake_embedder": [
            t.__dict__ | {"chunks_per_s": t.chunks / t.wall_s, "docs_per_s": t.documents / t.wall_s} for t in runs
        ],
    }


def bench_print(embedder: str, arms, runs) -> None:
    from connector import bench

    table = Table("stage (ms)", *(a.name for a in arms), title=f"adaptive vs {bench.SINGLE} ({embedder})")
    for stage in bench.STAGES:
        if any(stage in a.stages_ms for a in arms):
            table.add_row(stage, *(f"{a.stages_ms.get(stage, 0):.0f}" for a in arms))
    table.add_row("wall (s)", *(f"{a.wall_s:.2f}" for a in arms))
    table.add_row("documents (failed)", *(f"{a.documents} ({a.failed})" for a in arms))
    table.add_row("chunks", *(str(a.chunks) for a in arms))
    table.add_row("documents/s", *(f"{a.docs_per_s:.2f}" for a in arms))
    table.add_row("chunks/s", *(f"{a.chunks_per_s:.1f}" for a in arms))
    table.add_row("peak RSS (MB)", *(f"{a.peak_rss_mb:.0f}" for a in arms))
    out = console()
    out.print(table)
    ratio = bench_payload(embedder, arms, runs)["ratio_adaptive_to_single"]
    out.print(f"ratio adaptive / single: {ratio:.2f}" if ratio else "ratio: n/a")
    tp = Table("workers", "documents", "chunks", "wall (s)", "chunks/s", title="sidecar throughput, fake embedder")
    for t in runs:
        tp.add_row(str(t.workers), str(t.documents), str(t.chunks), f"{t.wall_s:.2f}", f"{t.chunks / t.wall_s:.1f}")
    out.print(tp)


def rows_bench_payload(settings, runs) -> dict:
    return {
        "embedder": settings.embedder,
        "strategies": list(settings.chunking.strategy_names),
        "runs": [
            {
                "workers": r.workers, "cores_per_worker": r.cores_per_worker, "rows": r.rows, "done": r.done,
                "failed": r.failed, "chunks": r.chunks,
                "chars": r.chars, "wall_s": round(r.wall_s, 3), "rows_per_s": round(r.rows_per_s, 1),
                "chunks_per_s": round(r.chunks_per_s, 1), "chars_per_s": round(r.chars_per_s),
                "cpu_ms_per_row": _rounded(r.cpu_ms_per_row, 2), "cores_busy": _rounded(r.cores_busy, 2),
                "stage_ms_per_row": {k: round(v, 3) for k, v in r.stage_ms_per_row().items()},
                "processes": [p.__dict__ for p in r.processes],
            }
            for r in runs
        ],
    }  # fmt: skip


def _rounded(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def rows_bench_print(settings, runs) -> None:
    out = console()
    n = len(settings.chunking.strategy_names)
    title = f"{runs[0].rows} rows, {n} strategies, embedder {settings.embedder}"
    if runs[0].cores_per_worker is not None:
        title += f", each process pinned to {runs[0].cores_per_worker} core(s) of its own"
    table = Table("processes", "rows (failed)", "chunks", "wall (s)", "rows/s", "chunks/s", "chars/s",
                  "machine CPU ms/row (cores busy)", "RSS start → end (MB)", "CPU pool RSS start → end (MB)",
                  title=title)  # fmt: skip
    for r in runs:
        rss = ", ".join(f"{p.rss_start_mb:.0f} → {p.rss_end_mb:.0f}" for p in r.processes)
        pools = "; ".join(", ".join(f"{a:.0f} → {b:.0f}" for a, b in p.pool_rss_mb) or "none" for p in r.processes)
        cpu = "n/a" if r.cpu_ms_per_row is None else f"{r.cpu_ms_per_row:.2f} ({r.cores_busy:.2f})"
        table.add_row(str(r.workers), f"{r.done} ({r.failed})", str(r.chunks), f"{r.wall_s:.2f}", f"{r.rows_per_s:.1f}",
                      f"{r.chunks_per_s:.1f}", f"{r.chars_per_s:,.0f}", cpu, rss, pools)  # fmt: skip
    out.print(table)
    stages = Table("stage (ms per row)", *(f"{r.workers} process(es)" for r in runs))
    names = sorted({s for r in runs for s in r.stage_ms_per_row()}, key=lambda s: -runs[0].stage_ms_per_row().get(s, 0))
    for stage in names:
        stages.add_row(stage, *(f"{r.stage_ms_per_row().get(stage, 0):.2f}" for r in runs))
    out.print(stages)
    if len(runs) > 1 and runs[0].rows_per_s:
        out.print(f"scaling: {', '.join(f'{r.workers} → ×{r.rows_per_s / runs[0].rows_per_s:.2f}' for r in runs[1:])}")


def conversion(paths: list[Path], out: Path | None, settings: ChunkingSettings) -> tuple[list[dict], dict]:
    """Convert each file under `paths`: a row of figures per file (its title too), and a summary with PDF pages/s."""
    from connector.convert import convert
    from connector.errors import DocumentError
    from connector.ingest import select

    rows = []
    for ref in select(paths).refs:
        t0 = time.perf_counter()
        try:
            doc = convert(ref.path.read_bytes(), ref.mime, settings)
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
                "title": doc.title,
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
    return rows, summary


def conversion_print(rows: list[dict], summary: dict) -> None:
    table = Table("file", "title", "pages", "chars", "blocks", "units", "tiled", "s")
    for r in rows:
        if "error" in r:
            table.add_row(cell(r["file"]), "", "", "", f"[red]{shown(r['error'])}[/red]", "", "", "")
            continue
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(r["blocks"].items()))
        table.add_row(cell(r["file"]), cell(r["title"] or ""), str(r["pages"] or ""), str(r["chars"]), kinds,
                      str(r["units"]), "yes" if r["tiled"] else "[red]NO[/red]", f"{r['seconds']:.2f}")  # fmt: skip
    out = console()
    out.print(table)
    out.print(
        f"PDF: {summary['pdf_pages']} pages in {summary['pdf_seconds']:.2f} s = {summary['pdf_pages_per_s']} pages/s"
    )


def explain_payload(doc: FoundDocument, rows: list[StoredCandidate], weights: dict[str, float]) -> dict:
    return {"document": asdict(doc), "why": why(rows, weights), "candidates": [_candidate_json(c) for c in rows]}


def _candidate_json(c: StoredCandidate) -> dict:
    return {"strategy": c.strategy, "chunks": c.chunk_count, "rc": c.rc, "icc": c.icc, "dcc": c.dcc, "bi": c.bi,
            "sc": c.sc, "rt": c.rt, "score": c.score, "ms": c.elapsed_ms, "chosen": c.chosen, "error": c.error,
            "params": c.params, "rc_backend": c.rc_backend, "metric_ms": c.metric_ms, "shape": c.shape}  # fmt: skip


METRIC_NAMES = {"rc": "RC", "icc": "ICC", "dcc": "DCC", "bi": "BI", "sc": "SC", "rt": "RT"}


def contributions(c: StoredCandidate, weights: dict[str, float]) -> dict[str, float]:
    """Each metric's share of the candidate's score: weight × value, the weights renormalised over the metrics
    defined for it (as selection computes the score). They sum to the score."""
    values = {m: getattr(c, m) for m in METRIC_NAMES}
    defined = {m: v for m, v in values.items() if v is not None and weights.get(m, 0) > 0}
    total = sum(weights[m] for m in defined)
    return {m: weights[m] * v / total for m, v in defined.items()} if total else {}


def why(rows: list[StoredCandidate], weights: dict[str, float]) -> list[str]:
    """In words: why the winner won against the runner-up, by which metrics and how much, and what choosing the
    runner-up would have changed in the stored chunks."""
    ranked = [c for c in rows if c.score is not None and c.chunk_count > 0]
    winner = next((c for c in ranked if c.chosen), None)
    if winner is None:
        return ["no candidate was chosen (the document is not done)"]
    others = sorted((c for c in ranked if c is not winner), key=lambda c: -(c.score or 0))
    if not others:
        return [f"{winner.strategy} won unopposed: it was the only candidate with chunks"]
    runner = others[0]
    margin = winner.score - runner.score
    f = ".3f" if margin >= 0.001 or margin == 0 else ".5f"  # a hair's breadth is shown as one
    lines = [f"{winner.strategy} won with {winner.score:{f}}, ahead of {runner.strategy} ({runner.score:{f}}) by "
             f"{margin:{f}}" + (" (a tie, broken by the configured order)" if margin == 0 else "") + "."]  # fmt: skip
    mine, theirs = contributions(winner, weights), contributions(runner, weights)
    recomputed = sum(mine.values()) - sum(theirs.values())
    if abs(recomputed - (winner.score - runner.score)) > 1e-6:
        lines.append("(the weights have changed since this document was scored; shares below use today's)")
    deltas = {m: mine.get(m, 0.0) - theirs.get(m, 0.0) for m in METRIC_NAMES if m in mine or m in theirs}

    def said(m: str) -> str:
        a, b = getattr(winner, m), getattr(runner, m)
        values = f"{'-' if a is None else f'{a:.3f}'} vs {'-' if b is None else f'{b:.3f}'}"
        return f"{METRIC_NAMES[m]} {deltas[m]:+.3f} ({values})"

    pro = [m for m in sorted(deltas, key=lambda m: -deltas[m]) if deltas[m] > 0.0005]
    con = [m for m in sorted(deltas, key=lambda m: deltas[m]) if deltas[m] < -0.0005]
    if pro:
        lines.append("Decided by " + ", ".join(said(m) for m in pro) + ".")
    if con:
        lines.append(f"In {runner.strategy}'s favour: " + ", ".join(said(m) for m in con) + ".")
    if not pro and not con:
        lines.append("No metric separates them by more than 0.0005.")
    lines.append(f"Choosing {runner.strategy} instead would change: " + _shape_change(winner, runner) + ".")
    return lines


def _shape_change(winner: StoredCandidate, runner: StoredCandidate) -> str:
    a, b = winner.shape or {}, runner.shape or {}
    parts = [f"{runner.chunk_count} chunks instead of {winner.chunk_count}"]
    if a and b:
        parts.append(
            f"{b['tokens_mean']:.0f} tokens a chunk on average instead of {a['tokens_mean']:.0f} "
            f"({b['tokens_min']}–{b['tokens_max']} instead of {a['tokens_min']}–{a['tokens_max']})"
        )
        if b["units_cut"] != a["units_cut"]:  # "0 chunks outside the size range instead of 0" said nothing
            parts.append(f"{b['units_cut']} of {b['units']} protected blocks cut instead of {a['units_cut']}")
        if b["out_of_range"] != a["out_of_range"]:
            parts.append(f"{b['out_of_range']} chunks outside the size range instead of {a['out_of_range']}")
    return ", ".join(parts)


def explain_table(doc: FoundDocument, rows: list[StoredCandidate]) -> Table:
    error = doc.last_error
    title = f"document {doc.id} ({doc.source}: {shown(doc.source_key)}) — {doc.status}" + (
        f": {shown(error)}" if error else "")  # fmt: skip
    table = Table("strategy", "chunks", "RC", "ICC", "DCC", "BI", "SC", "RT", "score", "ms", "chosen", "why not run",
                  title=title)  # fmt: skip

    def num(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    backends = {c.rc_backend for c in rows if c.rc_backend}
    notes = []
    if backends:
        notes.append(f"RC by the {', '.join(sorted(backends))} coreference backend")
    elif any(c.chunk_count for c in rows):
        # `metrics.rc_when_decisive`: a short document's pairs are looked for only when they could change the winner
        notes.append("RC not computed: it could not change the winner (or it is weighted 0)")
    scored = [c for c in rows if c.chunk_count and not c.error]
    if scored and not any({"icc", "dcc", "rt"} & set(c.metric_ms or {}) for c in scored):
        # `metrics.embed_when_decisive`: every strategy made the same chunks, and only SC tells them apart
        notes.append("ICC, DCC and RT not computed: every strategy made the same chunks, so only SC could change "
                     "the winner (or they are weighted 0)")  # fmt: skip
    if notes:
        table.caption = "; ".join(notes)
    for c in rows:
        table.add_row(c.strategy, str(c.chunk_count), num(c.rc), num(c.icc), num(c.dcc), num(c.bi), num(c.sc),
                      num(c.rt), num(c.score), f"{c.elapsed_ms:.0f}", "yes" if c.chosen else "",
                      cell(c.error or ""))  # fmt: skip
    return table


def metrics_bench_print(results: list[dict]) -> None:
    out = console()
    for r in results:
        out.print(
            f"{r['file']}: {r['characters']} characters, {r['candidates']} candidates, {r['chunks']} chunks, "
            f"{r['distinct_texts']} distinct texts embedded, {r['coref_pairs']} {r['coref']} coreference pairs"
        )
        out.print(f"encoder {r['encoder']}: loaded in {r['load_s']} s; all metrics of all candidates in "
                  f"{r['score_s']:.2f} s")  # fmt: skip
        out.print("  " + ", ".join(f"{k.removeprefix('metric:')} {v / 1000:.2f} s" for k, v in r["ms"].items()))
        table = Table("strategy", "chunks", "RC", "ICC", "DCC", "BI", "SC", "RT", "score")
        for row in r["rows"]:
            table.add_row(row["strategy"], str(row["chunks"]),
                          *(_num(row[k]) for k in ("rc", "icc", "dcc", "bi", "sc", "rt", "score")))  # fmt: skip
        out.print(table)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def strategy_payload(rows: list[StrategyMeans]) -> list[dict]:
    out = [asdict(row) for row in rows]  # its fields are the payload's keys, in order
    adaptive = next((r for r in out if r["strategy"] == "adaptive"), None)
    total = adaptive["documents"] if adaptive else 0
    for r in out:
        r["win_share"] = r["wins"] / total if total and r["strategy"] != "adaptive" else None
        for k in ("rc", "icc", "dcc", "bi", "sc", "rt", "score", "chunks"):
            r[k] = None if r[k] is None else round(float(r[k]), 4)
    # adaptive last, then strategies by mean score
    return sorted(out, key=lambda r: (r["strategy"] == "adaptive", -(r["score"] or 0)))


def strategy_print(payload: list[dict]) -> None:
    caption = "means over the documents each strategy ran on; adaptive = the chosen candidate of each"
    table = Table("strategy", "documents", "wins", "win %", "RC", "ICC", "DCC", "BI", "SC", "RT", "score",
                  "chunks/doc", caption=caption)  # fmt: skip
    for r in payload:
        share = "" if r["win_share"] is None else f"{100 * r['win_share']:.0f}"
        values = (_num(r[k]) for k in ("rc", "icc", "dcc", "bi", "sc", "rt", "score"))
        table.add_row(r["strategy"], str(r["documents"]), str(r["wins"]), share, *values, f"{r['chunks']:.0f}")
    console().print(table)


def search_row(result) -> dict:
    """One `connector search` result as JSON: the hit's columns, and its passage when asked for."""
    row = asdict(result.hit)
    if result.passage is not None:
        row["context"] = asdict(result.passage)
    return row


def search_table(question: str, results) -> Table:
    """`connector search`: best first, with where each hit sits and the start of its text."""
    table = Table("#", "score", "document", "section", "pages", "text", title=f"search: {shown(question)}")
    for i, r in enumerate(results, 1):
        hit = r.hit
        pages = "" if hit.page_start is None else f"{hit.page_start}" + (
            f"–{hit.page_end}" if hit.page_end not in (None, hit.page_start) else "")  # fmt: skip
        text = (r.passage.text if r.passage is not None else hit.text).strip()
        snippet = " ".join(text.split())[:200]
        table.add_row(str(i), f"{hit.score:.4f}", cell(hit.source_key), cell(" › ".join(hit.section_path)), pages,
                      cell(snippet))  # fmt: skip
    return table


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def tune_payload(result, written: str | None) -> dict:
    return {
        "documents": result.documents,
        "metrics": list(result.metrics),
        "weights": result.weights,
        "gain_recall": round(result.gain, 4),
        "gain_mrr": round(result.mrr_gain, 4),
        "standard_error": None if result.spread == float("inf") else round(result.spread, 4),
        "shown": result.shown,
        "written": written,
        "spearman_score_recall": {
            name: {"pooled": _round(pooled), "within_documents": _round(within)}
            for name, (pooled, within) in result.correlations.items()
        },
        "folds": [
            {
                "repeat": f.repeat,
                "test_documents": list(f.test_docs),
                "weights": f.weights,
                "tuned": {"recall": f.tuned[0], "mrr": f.tuned[1]},
                "current": {"recall": f.current[0], "mrr": f.current[1]},
            }
            for f in result.folds
        ],  # fmt: skip
    }


def tune_print(result, written: str | None) -> None:
    out = console()
    repeats = len({f.repeat for f in result.folds})
    title = (f"cross-validation over {result.documents} documents: {len(result.folds) // max(repeats, 1)} folds, "
             f"{repeats} shuffles")  # fmt: skip
    table = Table("shuffle", "held-out docs", "recall tuned", "recall current", "MRR tuned", "MRR current",
                  "weights fitted without them", title=title)  # fmt: skip
    for f in result.folds:
        weights = " ".join(f"{m}={w:g}" for m, w in f.weights.items() if w)
        table.add_row(str(f.repeat + 1), str(len(f.test_docs)), f"{f.tuned[0]:.3f}", f"{f.current[0]:.3f}",
                      f"{f.tuned[1]:.3f}", f"{f.current[1]:.3f}", weights)  # fmt: skip
    out.print(table)
    spread = "n/a" if result.spread == float("inf") else f"{result.spread:.3f}"
    out.print(f"held-out gain over the current weights: recall {result.gain:+.3f} (standard error {spread} over "
              f"documents), MRR {result.mrr_gain:+.3f}", highlight=False)  # fmt: skip
    for name, (pooled, within) in result.correlations.items():
        out.print(f"Spearman(score, recall) with {name} weights: {_num(pooled)} over all candidates, {_num(within)} "
                  "within documents (mean)", highlight=False)  # fmt: skip
    weights = ", ".join(f"{m}={w:g}" for m, w in result.weights.items())
    if not result.shown:
        out.print(f"[yellow]no gain shown[/yellow]: the weights fitted on all documents ({weights}) do not beat "
                  "the current weights by two standard errors on held-out documents, so nothing was written. More "
                  "questions, on more documents, narrow the error.")  # fmt: skip
    elif written:
        out.print(f"weights written to {written}: {weights}", highlight=False)
    else:
        out.print(f"gain shown; weights ({weights}) not written (--dry-run)", highlight=False)
