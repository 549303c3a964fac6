"""Wall time per pipeline stage, accumulated over calls and documents (for logs, `bench` and the candidates table)."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator


class Timer:
    def __init__(self) -> None:
        self.ms: defaultdict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage] += (time.perf_counter() - t0) * 1000

    def add(self, timings: dict[str, float]) -> None:
        for stage, ms in timings.items():
            self.ms[stage] += ms


NULL_TIMER = Timer()  # for callers that do not care; its totals are never read
