"""`connector eval` and `connector bench` on a small fixture corpus, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES, child_env, connector_cmd

DOCS = ("apache-2.0.txt", "debian-manifesto.txt", "lppl-1.3c.pdf", "dockerfile-reference.md")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in DOCS:
        shutil.copy(FIXTURES / name, folder)
    return folder


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        connector_cmd(*args), cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, timeout=600
    )


def scratch_databases(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'connector_scratch_%'").fetchall()
    return [r[0] for r in rows]


def test_eval_with_docs_compares_every_run(tmp_path: Path, dsn: str, corpus: Path) -> None:
    qa_path = tmp_path / "qa.jsonl"
    records = (FIXTURES / "qa.jsonl").read_text().splitlines()
    extra = {"id": "x", "doc": "not-here.pdf", "question": "?", "evidence": "nothing", "kind": "factoid"}
    qa_path.write_text("\n".join([*records, json.dumps(extra)]) + "\n")
    # k = 100 retrieves every chunk of these small documents: a run misses a question only if no chunk of the
    # right document holds the evidence.
    result = run(tmp_path, "eval", "--qa", str(qa_path), "--docs", str(corpus), "--k", "100", "--json",
                 "--dsn", dsn, "--embedder", "fake")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "not-here.pdf" in result.stderr
    report = json.loads(result.stdout)
    assert report["questions"] == len(records)
    runs = {r["name"]: r for r in report["runs"]}
    forced = [s for s in ChunkingSettings().strategy_names if s != "llm_regex"]  # no endpoint configured here
    assert list(runs) == ["adaptive", *forced, "langchain_4000"]
    assert "llm_regex left out" in result.stderr
    assert runs["page"]["documents"] == 1, "page applies to the one PDF only"
    for name in ("adaptive", "recursive_1100", "langchain_4000"):
        assert runs[name]["documents"] == 4
        # The PDF's evidence crosses a layout block in our basic conversion; the lenient figure still finds it.
        assert runs[name]["scores"]["all"]["lenient_recall"] == 1.0, name
        assert runs[name]["scores"]["all"]["recall"] >= 0.8, name
        # ... and through connector.search(), as users query: the same documents, vector-only and hybrid
        for mode in ("vector", "hybrid"):
            assert runs[name]["search"][mode]["all"]["lenient_recall"] == 1.0, (name, mode)
            assert runs[name]["search"][mode]["all"]["questions"] == len(records)
    assert sum(runs["adaptive"]["winners"].values()) == 4
    assert set(runs["adaptive"]["scores"]) >= {"all", "factoid"}
    assert scratch_databases(dsn) == []


def test_eval_on_documents_already_ingested(tmp_path: Path, dsn: str, corpus: Path) -> None:
    assert run(tmp_path, "ingest", str(corpus), "--dsn", dsn, "--embedder", "fake").returncode == 0
    with psycopg.connect(dsn) as conn:
        before = conn.execute("SELECT count(*), max(updated_at) FROM connector.documents").fetchone()
    result = run(tmp_path, "eval", "--qa", str(FIXTURES / "qa.jsonl"), "--strategy", "recursive_1100",
                 "--dsn", dsn)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("│ adaptive ") for line in lines)
    assert any(line.startswith("│ recursive_1100 ") for line in lines)
    assert any(line.startswith("│ langchain_4000 ") for line in lines)
    assert not any(line.startswith("│ page ") for line in lines)
    assert "adaptive: recall@5 / MRR per kind" in result.stdout  # the per-kind table through connector.search()
    assert any(line.startswith("│ all ") for line in lines)
    with psycopg.connect(dsn) as conn:
        after = conn.execute("SELECT count(*), max(updated_at) FROM connector.documents").fetchone()
    assert after == before, "eval never writes into the user's database"
    assert scratch_databases(dsn) == []


def test_bench_reports_every_stage_both_arms_and_throughput(tmp_path: Path, dsn: str, corpus: Path) -> None:
    result = run(tmp_path, "bench", str(corpus), "--json", "--dsn", dsn, "--embedder", "fake")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    adaptive, single = report["arms"]
    assert (adaptive["name"], single["name"]) == ("adaptive", "single")
    for arm in (adaptive, single):
        assert arm["documents"] == 4 and arm["failed"] == 0 and arm["chunks"] > 4
        assert {"convert", "candidates", "guards", "metric:sc", "metric:bi", "embed", "write"} <= set(arm["stages_ms"])
        assert arm["peak_rss_mb"] > 0 and arm["wall_s"] > 0
    assert report["ratio_adaptive_to_single"] == pytest.approx(adaptive["wall_s"] / single["wall_s"])
    assert [t["workers"] for t in report["throughput_fake_embedder"]] == [1, 2]
    for t in report["throughput_fake_embedder"]:
        assert t["documents"] == 4 and t["chunks"] > 4
    assert scratch_databases(dsn) == []


def test_bench_rows_drains_distinct_rows_of_paragraphs_and_reports_rates_stages_and_memory(
    tmp_path: Path, dsn: str, corpus: Path
) -> None:
    from connector.bench.rows import workload

    rows = workload([corpus], 40, 1200)
    assert len(rows) == 40 and len({r.body for r in rows}) == 40, "the corpus read again differently: no repeats"
    assert 600 < sum(len(r.body) for r in rows) / 40 < 2400
    result = run(tmp_path, "bench", str(corpus), "--rows", "40", "--chars", "1200", "--workers", "1", "--json",
                 "--dsn", dsn, "--embedder", "fake")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (only,) = json.loads(result.stdout)["runs"]
    assert (only["workers"], only["rows"], only["done"], only["failed"]) == (1, 40, 40, 0)
    assert only["chunks"] >= 40 and only["rows_per_s"] > 0 and only["chars"] == sum(len(r.body) for r in rows)
    assert {"convert", "candidates", "metric:icc", "embed", "write"} <= set(only["stage_ms_per_row"])
    # The machine's CPU over the run: at least what converting, scoring and writing 40 rows took, at most every core
    # (none where the machine has no /proc/stat to read it from).
    from connector.bench.processes import machine_busy_s

    if machine_busy_s() is None:
        assert only["cpu_ms_per_row"] is None and only["cores_busy"] is None
    else:
        assert only["cpu_ms_per_row"] > 0 and 0 < only["cores_busy"] <= (os.cpu_count() or 1) + 0.5
    (process,) = only["processes"]
    assert process["documents"] == 40 and process["rss_end_mb"] > 0
    from connector.pool import size_of
    from connector.settings import Settings

    # The CPU pool's processes, as `connector run` starts them (one per core: none on one core), report theirs.
    assert len(process["pool_rss_mb"]) == size_of(Settings()) and all(b > 0 for _, b in process["pool_rss_mb"])
    assert scratch_databases(dsn) == []
    (tmp_path / "empty").mkdir()
    nothing = run(tmp_path, "bench", str(tmp_path / "empty"), "--rows", "5", "--dsn", dsn)
    assert nothing.returncode == 2 and "no text or Markdown file" in nothing.stdout + nothing.stderr


def test_bench_rows_pins_each_worker_process_to_cores_of_its_own_as_a_replica_with_a_cpu_limit(
    tmp_path: Path, dsn: str, corpus: Path
) -> None:
    mine = sorted(os.sched_getaffinity(0))
    result = run(tmp_path, "bench", str(corpus), "--rows", "12", "--chars", "600", "--workers", "1",
                 "--cores-per-worker", "1", "--json", "--dsn", dsn, "--embedder", "fake")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (only,) = json.loads(result.stdout)["runs"]
    assert (only["cores_per_worker"], only["done"], only["failed"]) == (1, 12, 0)
    (process,) = only["processes"]
    # One core: the process and its pool read their size off the affinity, as in a pod limited to one CPU, and a
    # pool on one core would only cost the shipping of documents (`pool.size_of`): none was started.
    assert process["cores"] == mine[:1] and process["pool_rss_mb"] == []
    too_many = len(mine) + 1
    refused = run(tmp_path, "bench", str(corpus), "--rows", "5", "--workers", "1", "--workers", "2",
                  "--cores-per-worker", str(too_many), "--dsn", dsn)  # fmt: skip
    assert refused.returncode == 2
    said = " ".join((refused.stdout + refused.stderr).split())
    assert f"need {too_many} cores; this process may use {len(mine)}" in said
    alone = run(tmp_path, "bench", str(corpus), "--cores-per-worker", "1", "--dsn", dsn)
    unboxed = " ".join(re.sub(r"[│╭╮╰╯─]", " ", alone.stdout + alone.stderr).split())  # rich's error panel
    assert alone.returncode == 2 and "is for the --rows benchmark" in unboxed
    assert scratch_databases(dsn) == []


def test_convert_reports_every_document_and_fails_on_a_broken_one(tmp_path: Path, corpus: Path) -> None:
    result = run(tmp_path, "convert", str(corpus), "--json", "--out", str(tmp_path / "md"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["file"] for r in report["documents"]] == sorted(DOCS)
    assert all(r["tiled"] for r in report["documents"])
    assert report["summary"]["pdf_pages"] == 8 and report["summary"]["pdf_pages_per_s"] > 0
    written = (tmp_path / "md" / "dockerfile-reference.md.md").read_text()
    assert written == (FIXTURES / "dockerfile-reference.md").read_text()

    (corpus / "broken.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 4)
    broken = run(tmp_path, "convert", str(corpus), "--json")
    assert broken.returncode == 1
    rows = {r["file"]: r for r in json.loads(broken.stdout)["documents"]}
    assert "cannot open PDF" in rows["broken.pdf"]["error"]


def test_machine_busy_seconds_are_the_busy_columns_of_proc_stat(tmp_path: Path) -> None:
    from connector.bench.processes import machine_busy_s

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: idle, I/O wait and steal are not the machine's work
    stat.write_text("cpu  100 20 30 5000 700 4 6 900 0 0\ncpu0 50 10 15 2500 350 2 3 450 0 0\n")
    assert machine_busy_s(stat) == pytest.approx(160 / os.sysconf("SC_CLK_TCK"))
    assert machine_busy_s(tmp_path / "absent") is None
    if Path("/proc/stat").exists():  # Linux: this process's own work shows (2M steps: 100 ms and more, ticks of 10)
        before = machine_busy_s()
        sum(i * i for i in range(2_000_000))
        assert machine_busy_s() > before
