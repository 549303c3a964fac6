"""A document of megabytes of real text goes through a pool process in bounded memory: a 5 MB changelog took its
pool process to 2.4 GB (the `semantic` strategy's vectors of every sentence at once, then every candidate's
sentences embedded and kept as texts), a 50 MB one past 13 GB before it was killed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, child_env

REAL = FIXTURES / "real" / "jed-changelog-excerpt.txt"  # a real changelog, repeated to 4 MB
# Measured: 1,076 MB before the semantic strategy's blocks, 507-534 MB after; 366 MB since the coreference pass keeps
# one sentence's words and the token ids are a numpy array (the models ~150 MB, the text, nine candidates).
PEAK_MB = 450
KEPT_MB = 60  # what a pool process keeps once a 4 MB document is chosen: 157 MB before `_released`, 24-31 after


def test_a_4_mb_changelog_is_chosen_in_a_pool_process_within_450_mb(tmp_path) -> None:
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


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzipped"])
def test_a_pool_process_gives_a_long_documents_memory_back(tmp_path, packed: bool) -> None:
    """glibc keeps the memory freed below the top of its heap: a pool process that had chosen a long document's
    chunks kept most of what it took (1,076 MB after 50 MB of text), as long as it lived, and the sidecar as much
    again for the result; a second such document in the other pool process took as much more. A long text that
    comes compressed (a changelog gzipped, as Debian ships them) is as long once read: it kept 90 MB, not 28."""
    from connector.models import SourceDocument
    from connector.pool import CpuPool
    from connector.settings import Settings

    def rss_mb(pid: int) -> float:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

    text = REAL.read_bytes()
    big = text * (4_000_000 // len(text))
    if packed:
        big = gzip.compress(big)
        assert len(big) < 100_000
    pool = CpuPool(Settings(data_dir=tmp_path / "state"), 1)
    try:
        short = SourceDocument(0, "sql", "short", None, text[:3000], "text/plain", "short")
        pool.submit(short).result()  # loaded, and warm
        (pid,) = pool.pids()
        loaded = rss_mb(pid)
        chosen = pool.submit(SourceDocument(1, "sql", "big", None, big, "text/plain", "big")).result()
        assert len(chosen.document.markdown) > 3_900_000
        del chosen
        assert rss_mb(pid) - loaded < KEPT_MB, f"{rss_mb(pid) - loaded:.0f} MB kept over {loaded:.0f} MB loaded"
        # What it answers is what it would have answered unpacked.
        again = pool.submit(short).result()
        assert again.winner.candidate.chunks and again.document.markdown == text[:3000].decode(errors="replace")
    finally:
        pool.close()


SIDECAR_HELD_MB = 25  # what the sidecar holds of a 4 MB document's result: 39 MB with every candidate's texts, 16 after


def test_the_sidecar_holds_a_long_documents_losing_candidates_as_spans(tmp_path) -> None:
    """The sidecar stores only the spans of the candidates that lost; with their texts, a long document's result held
    about ten times its text there (most of the sidecar's 963 MB peak at 50 MB of text). The winner's chunks keep
    their texts (they are embedded and stored); every other chunk is its span and size."""
    from connector.models import Chunk, ChunkSpan, SourceDocument
    from connector.pool import CpuPool
    from connector.settings import Settings

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

    text = REAL.read_bytes()
    big = text * (4_000_000 // len(text))
    pool = CpuPool(Settings(data_dir=tmp_path / "state"), 1)
    try:
        pool.submit(SourceDocument(0, "sql", "short", None, text[:3000], "text/plain", "short")).result()
        before = rss_mb()
        chosen = pool.submit(SourceDocument(1, "sql", "big", None, big, "text/plain", "big")).result()
        held = rss_mb() - before
    finally:
        pool.close()
    markdown = chosen.document.markdown
    assert all(type(c) is Chunk and c.text == markdown[c.start : c.end] for c in chosen.winner.candidate.chunks)
    losers = [s for s in chosen.scored if s is not chosen.winner and s.candidate.chunks]
    assert len(losers) >= 5 and sum(len(s.candidate.chunks) for s in losers) > 5_000
    for s in losers:
        assert all(type(c) is ChunkSpan for c in s.candidate.chunks)
        assert s.candidate.chunks[0].start == 0 and s.candidate.chunks[-1].end <= len(markdown)
    assert held < SIDECAR_HELD_MB, f"{held:.0f} MB held for a 4 MB document's result"
