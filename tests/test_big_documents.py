"""A document of megabytes of real text goes through a pool process in bounded memory: a 5 MB changelog took its
pool process to 2.4 GB (the `semantic` strategy's vectors of every sentence at once, then every candidate's
sentences embedded and kept as texts), a 50 MB one past 13 GB before it was killed."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import FIXTURES, child_env

REAL = FIXTURES / "real" / "jed-changelog-excerpt.txt"  # a real changelog, repeated to 4 MB
PEAK_MB = 800  # measured: 1,076 MB before the fix, 534 MB after (the models ~150 MB, the text, nine candidates)


def test_a_4_mb_changelog_is_chosen_in_a_pool_process_within_800_mb(tmp_path) -> None:
    text = REAL.read_bytes()
    big = tmp_path / "changelog.txt"
    big.write_bytes(text * (4_000_000 // len(text)))
    run = subprocess.run(
        [sys.executable, "-m", "tests.big_document_run", str(big), str(tmp_path / "state")],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["offsets_exact"] and report["blocks_tile"], report
    assert not [
        name for name, (n, error) in report["candidates"].items() if not n and not str(error).startswith("skipped")
    ]
    assert report["icc"]["semantic"] is not None, "ICC measured, on a sample of the chunks"
    assert report["peak_mb"] < PEAK_MB, report
