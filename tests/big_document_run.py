"""Run by `test_big_documents`: one big document through a real CPU pool process; prints the pool process's peak
RSS (this process's children's) and what the invariants checks found, as JSON. A process of its own, so that no
other child of the test process counts in the peak."""

from __future__ import annotations

import hashlib
import json
import resource
import sys
from pathlib import Path

from connector.models import SourceDocument
from connector.pool import CpuPool
from connector.settings import Settings


def main(path: str, data_dir: str) -> None:
    data = Path(path).read_bytes()
    settings = Settings(data_dir=Path(data_dir))
    pool = CpuPool(settings, 1)
    try:
        source = SourceDocument(1, "sql", "big", None, data, "text/plain", hashlib.sha256(data).hexdigest())
        chosen = pool.submit(source).result()
    finally:
        pool.close()
    text = chosen.document.markdown
    winner = chosen.winner.candidate
    report = {
        "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "chars": len(text),
        "winner": winner.strategy,
        "offsets_exact": all(text[c.start : c.end] == c.text for c in winner.chunks),
        "blocks_tile": [b.start for b in chosen.document.blocks][:1] == [0]
        and all(a.end == b.start for a, b in zip(chosen.document.blocks, chosen.document.blocks[1:], strict=False))
        and chosen.document.blocks[-1].end == len(text),
        "candidates": {s.candidate.strategy: (len(s.candidate.chunks), s.candidate.error) for s in chosen.scored},
        "icc": {s.candidate.strategy: s.metrics["icc"] for s in chosen.scored},
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
