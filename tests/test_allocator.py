"""The allocator settings of each process (`connector.allocator`) and the one-thread rule of pool processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Four 160 KB temporaries made and freed again and again, as the metrics do for each document; the page faults of
# the second round counted.
_CHURN = """
import resource, sys
import numpy as np
{setup}
def churn():
    for _ in range(300):
        temporaries = [np.ones(40_000, dtype=np.float32) for _ in range(4)]
        del temporaries
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(setup: str, env: dict | None = None) -> int:
    # glibc's own knobs, if this run's environment sets them, would make `tune` stand aside
    own = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"}
    done = subprocess.run(
        [sys.executable, "-c", _CHURN.format(setup=setup)], capture_output=True, text=True, check=True,
        env={**{k: v for k, v in os.environ.items() if k not in own}, **(env or {})},
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def test_a_tuned_process_reuses_its_heap_for_numpy_temporaries() -> None:
    untuned = _faults("")
    tuned = _faults("from connector import allocator\nassert allocator.tune()\nassert not allocator.tune()")
    # glibc's defaults hand those blocks back to the kernel and fault every page in again: ~40 pages a block.
    assert untuned > 300 * 4 * 10
    assert tuned < 100


def test_glibcs_own_settings_in_the_environment_are_left_alone() -> None:
    setup = "from connector import allocator\nassert not allocator.tune()"
    assert _faults(setup, {"MALLOC_TRIM_THRESHOLD_": "131072"}) > 300 * 4 * 10


def _threads_after(setup: str) -> tuple[list[dict], str | None]:
    """In a fresh process: `setup`, then the native thread pools threadpoolctl sees, and TOKENIZERS_PARALLELISM."""
    code = (
        f"import gc, json, os\nimport numpy\nfrom threadpoolctl import threadpool_info\n{setup}\ngc.collect()\n"
        "print(json.dumps([threadpool_info(), os.environ.get('TOKENIZERS_PARALLELISM')]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pools, parallelism = json.loads(done.stdout)
    return pools, parallelism


def test_a_pool_process_computes_on_one_thread() -> None:
    pools, parallelism = _threads_after("from connector.pool import one_core\none_core()")
    assert pools and {p["num_threads"] for p in pools} == {1} and parallelism == "false"


def test_the_sidecar_runs_numpys_blas_on_one_thread() -> None:
    pools, _ = _threads_after("from connector.pool import numpy_on_one_thread\nnumpy_on_one_thread()")
    assert [p["num_threads"] for p in pools if p["internal_api"] == "openblas"] == [1]
    # As `connector run` calls it: from a process that has loaded only the command line, not numpy.
    code = (
        "import json, sys\nimport connector.cli\nassert 'numpy' not in sys.modules\n"
        "from connector.pool import numpy_on_one_thread\nnumpy_on_one_thread()\n"
        "from threadpoolctl import threadpool_info\n"
        "print(json.dumps([i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [1]


_FREEZE = """
import gc, weakref
from connector import allocator
class Node:
    pass
def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)
garbage = cycle()  # a cycle nobody holds, not collected yet
kept = Node()
gc.disable()  # no collection but the ones this script asks for
allocator.freeze_loaded()
frozen = gc.get_freeze_count()
allocator.freeze_loaded()
later = cycle()
gc.collect()
print(garbage() is None, frozen > 0, gc.get_freeze_count() == frozen, later() is None)
"""


def test_what_is_loaded_is_frozen_once_and_garbage_before_it_is_collected() -> None:
    done = subprocess.run([sys.executable, "-c", _FREEZE], capture_output=True, text=True, check=True)
    garbage_collected, frozen, once, later_collected = done.stdout.split()
    assert garbage_collected == "True", "garbage is collected before the freeze, not kept forever"
    assert frozen == "True" and once == "True", "frozen once per process"
    assert later_collected == "True", "objects made after the freeze are collected as before"
