"""OpenAI and OpenAI-compatible embedding endpoints (Azure's /openai/v1, Ollama, vLLM, TEI, LM Studio) through the
official `openai` client.

- A text longer than `max_input_tokens` is counted with tiktoken and cut into windows of at most that many tokens,
  each embedded, the text's vector being their token-weighted mean, as MiniLM's windows are: never a silent
  truncation. A text of at most that many UTF-8 bytes is not encoded at all (a token holds at least one byte): it is
  one window, and its size in bytes stands for its tokens in the request budget, an upper bound. A server whose own
  tokenizer counts more tokens than tiktoken does (pgai #850) answers 400 "too long": that text is cut again into
  windows half as long, and the log says which setting to lower. Inputs are sent as strings, never token ids, so
  a server with another tokenizer reads them as text.
- Windows of every caller (a document's chunks, other workers' documents, a reembed batch) share one queue and
  leave as requests of at most `batch_size` inputs and `max_request_tokens` tokens, `concurrency` in flight.
- `connector_embed_tokens` counts the tokens the endpoint says it read (the answer's `usage.prompt_tokens`, what a
  provider bills); tiktoken's count of the inputs only where an answer has no usage.
- 429, 5xx, timeouts and dropped connections are retried by the client (`max_retries`, honouring `Retry-After`,
  else jittered exponential backoff), then become a `TransientError`: the document goes back to the queue. A refused
  key or unknown model is a `FatalError`; the server's message is not repeated (a 401 can quote part of the key).
- The dimension is the one asked for (`dimensions`), else the first answer's, and every answer is checked against it.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import orjson

from connector import secrets, tokens
from connector.counters import EMBED_INPUTS, EMBED_REQUESTS, EMBED_RETRIES, EMBED_TOKENS
from connector.embedders.base import Embeddings, ModelSpec, Window, normalise, pool_windows
from connector.errors import DocumentError, FatalError, TransientError, UnusableVector

log = logging.getLogger(__name__)

_IDLE_S = 0.5  # the dispatcher thread leaves after this long without work (and starts again on the next text)
_MIN_WINDOW = 16
PROBE = "dimension probe"  # the text of the one request sent at start
_TOO_LONG_HINTS = ("too long", "maximum context", "context length", "too many tokens", "exceeds", "max_tokens",
                   "maximum input", "input length", "sequence length")  # fmt: skip


class InputTooLong(Exception):
    """The server counted more tokens in one input than it accepts."""


def spec(embed) -> ModelSpec:
    """The model these settings name, without calling the endpoint (the dimension is known only when asked for)."""
    options = {"base_url": public_url(embed.base_url), "dimensions": embed.dimensions}
    return ModelSpec("openai", embed.model, embed.dimensions, tuple((k, v) for k, v in options.items() if v))


def load(embed, models_dir) -> OpenAIEmbedder:
    return OpenAIEmbedder(embed)


def public_url(url: str | None) -> str | None:
    """The base URL without user:password@ and without a query (either may hold a token): what the database
    records and messages show."""
    if not url:
        return url
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _register_secrets(url: str | None, key: str | None) -> None:
    from urllib.parse import unquote, urlsplit

    if key and len(key) >= 8:  # a placeholder ("ollama", "unused") is no secret, and masking it garbles logs
        secrets.add(key)
    if url:
        parts = urlsplit(url)
        if parts.password:
            secrets.add(parts.password, unquote(parts.password))
        if parts.query:
            secrets.add(parts.query)


class OpenAIEmbedder:
    provider = "openai"

    def __init__(self, embed) -> None:
        from openai import OpenAI

        key = embed.api_key.get_secret_value() if embed.api_key else os.environ.get("OPENAI_API_KEY")
        if not key:
            if embed.base_url is None:
                raise FatalError(
                    "CONNECTOR_EMBEDDER=openai needs a key: set CONNECTOR_EMBED_API_KEY (or OPENAI_API_KEY)"
                )
            key = "unused"  # local servers ignore it; the client insists on one
        _register_secrets(embed.base_url, key)
        self.name = embed.model
        self._client = OpenAI(api_key=key, base_url=embed.base_url, timeout=embed.timeout,
                              max_retries=embed.max_retries)  # fmt: skip
        self._retries = embed.max_retries
        self._dimensions = embed.dimensions
        self._encoding = tokens.encoding(embed.tokenizer)
        self._max_tokens = embed.max_input_tokens
        self._window_note = threading.Event()
        self._batcher = _Batcher(
            self._send, self._count, embed.batch(remote=True), embed.max_request_tokens, embed.concurrency
        )
        # One short request at start: a wrong key, model or `dimensions` stops here, before any document is
        # touched, and it tells the model's dimension when none was asked for.
        self.dim = embed.dimensions or 0
        try:
            self.dim = len(self._batcher.submit([(PROBE, 2, True)])[0].result())
        except DocumentError as exc:
            self.close()
            raise FatalError(f"the embedding endpoint refuses a one-word request: {exc}") from None
        except BaseException:
            self.close()
            raise
        self.spec = ModelSpec("openai", self.name, self.dim, spec(embed).options)

    def embed(self, texts: list[str]) -> Embeddings:
        if not texts:
            return Embeddings(np.zeros((0, self.dim), dtype=np.float32), ())
        limit = self._max_tokens
        per_text: list[list[tuple[int, int, int, bool]]] = [self._windows(t, limit) for t in texts]
        results: list[list[np.ndarray] | None] = [None] * len(texts)
        pending = list(range(len(texts)))
        while pending:
            # One submit for every window of every text: the dispatcher cuts them into full requests.
            pieces = [(i, texts[i][s:e], n, counted) for i in pending for s, e, n, counted in per_text[i]]
            futures = self._batcher.submit([(text, n, counted) for _, text, n, counted in pieces])
            by_text: dict[int, list] = {}
            for (i, *_), f in zip(pieces, futures, strict=True):
                by_text.setdefault(i, []).append(f)
            retry: list[int] = []
            for i, fs in by_text.items():
                try:
                    results[i] = [f.result() for f in fs]
                except InputTooLong:
                    # the windows' tokens (a text within the limit in bytes was not counted: counted now)
                    longest = max(n if counted else self._count(texts[i][a:b]) for a, b, n, counted in per_text[i])
                    if longest <= _MIN_WINDOW:
                        raise DocumentError(f"the embedding endpoint refuses even {longest}-token inputs") from None
                    if not self._window_note.is_set():
                        self._window_note.set()
                        log.warning(
                            "the embedding endpoint counts more tokens than %s does and refused a %d-token input: "
                            "cutting such texts into shorter windows (set CONNECTOR_EMBED_MAX_INPUT_TOKENS to the "
                            "model's limit in its own tokens to avoid the retries)",
                            self._encoding.name,
                            longest,
                        )
                    per_text[i] = self._windows(texts[i], max(_MIN_WINDOW, longest // 2))
                    retry.append(i)
            pending = retry
        vectors, weights, owners, spans = [], [], [], []
        for i, (windows, vecs) in enumerate(zip(per_text, results, strict=True)):
            for (start, end, n, _), v in zip(windows, vecs, strict=True):
                weight = max(1, n) if len(windows) > 1 else 1  # one window: its own vector (n: maybe its bytes)
                vectors.append(v)
                weights.append(weight)
                owners.append(i)
                spans.append(Window(start, end, v, weight))
        pooled = pool_windows(np.stack(vectors), weights, owners, len(texts))
        grouped: list[list[Window]] = [[] for _ in texts]
        for owner, w in zip(owners, spans, strict=True):
            grouped[owner].append(w)
        return Embeddings(pooled, tuple(tuple(g) for g in grouped))

    def close(self) -> None:
        self._batcher.close()
        self._client.close()

    def _windows(self, text: str, limit: int) -> list[tuple[int, int, int, bool]]:
        """(start, end, tokens, counted) of consecutive windows of at most `limit` tokens. A text of at most `limit`
        UTF-8 bytes is one window and is not encoded (~0.1 ms per 2,400 characters, in the sidecar's own busy
        process): its bytes stand for its tokens, an upper bound (`counted` False; the batcher counts it only if a
        request's token budget depends on it)."""
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size <= limit:
            return [(0, len(text), size, False)]
        ids = self._encoding.encode_ordinary(text)
        if len(ids) <= limit:
            return [(0, len(text), len(ids), True)]
        _, offsets = self._encoding.decode_with_offsets(ids)
        cuts = [0, *(offsets[i] for i in range(limit, len(ids), limit)), len(text)]
        sizes = [min(limit, len(ids) - i) for i in range(0, len(ids), limit)]
        return [(a, b, n, True) for a, b, n in zip(cuts[:-1], cuts[1:], sizes, strict=True) if b > a]

    def _count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def _send(self, inputs: list[str]) -> list[np.ndarray]:
        import openai

        kwargs = {"dimensions": self._dimensions} if self._dimensions else {}
        EMBED_REQUESTS.labels(self.name).inc()
        try:
            # The raw answer, parsed here: the client's own parsing builds a model object per float (a 384-float
            # vector costs it ~0.5 ms, more than the rest of a short document's embedding).
            answer = self._client.embeddings.with_raw_response.create(
                model=self.name, input=inputs, encoding_format="float", **kwargs
            )
        except openai.APIStatusError as exc:
            if exc.status_code not in (400, 413, 422):
                raise self._status_error(exc) from None
            # 400/422 for one input (too long, or refused), 413 for a batch too large for the server (TEI's
            # max_client_batch_size, a payload limit): split the batch; a single input is then cut shorter or
            # refused on its own.
            if len(inputs) > 1:
                raise _Split() from None
            text = str(getattr(exc, "message", "") or exc).lower()
            if exc.status_code == 413 or any(h in text for h in _TOO_LONG_HINTS):
                raise InputTooLong() from None
            raise DocumentError(
                f"the embedding endpoint refused an input (HTTP {exc.status_code}): {_short(exc)}"
            ) from None
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise self._status_error(exc) from None
        vectors, used = _vectors(answer.http_response.content, len(inputs))
        if used is None:  # the endpoint does not say: our own count of what was sent
            used = sum(map(self._count, inputs))
        EMBED_TOKENS.labels(self.name).inc(used)
        expected = self._dimensions or getattr(self, "dim", 0)
        if expected and vectors.shape[1] != expected:
            raise FatalError(
                f"dimension mismatch: {self.name} answered {vectors.shape[1]}-dimensional vectors, "
                f"{expected} expected (CONNECTOR_EMBED_DIMENSIONS, or the dimension the database stores)"
            )
        EMBED_INPUTS.labels(self.name).inc(len(inputs))
        return list(normalise(vectors))

    def _status_error(self, exc) -> Exception:
        """What a failed request means for the caller, after the client's own retries (429, 408, 409, 5xx, timeouts,
        connection errors): stop (key, model), or try the document again later."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            EMBED_RETRIES.labels(self.name, "timeout").inc()
            return TransientError(f"the embedding endpoint timed out ({self._retries} retries)")
        if isinstance(exc, openai.APIConnectionError):
            EMBED_RETRIES.labels(self.name, "connection").inc()
            return TransientError(f"cannot reach the embedding endpoint ({self._retries} retries)")
        status = exc.status_code
        if status in (401, 403):
            EMBED_RETRIES.labels(self.name, "auth").inc()
            return FatalError(
                f"the embedding endpoint refused the API key (HTTP {status}): check CONNECTOR_EMBED_API_KEY"
            )
        if status == 404:
            EMBED_RETRIES.labels(self.name, "not_found").inc()
            return FatalError(
                f"the embedding endpoint has no model {self.name!r} (HTTP 404): check CONNECTOR_EMBED_MODEL and "
                "CONNECTOR_EMBED_BASE_URL"
            )
        if status == 429:
            EMBED_RETRIES.labels(self.name, "rate_limited").inc()
            return TransientError(f"the embedding endpoint is rate limiting (HTTP 429 after {self._retries} retries)")
        EMBED_RETRIES.labels(self.name, "status").inc()
        if status >= 500 or status in (408, 409, 424):
            return TransientError(f"the embedding endpoint failed (HTTP {status} after {self._retries} retries)")
        return DocumentError(f"the embedding endpoint refused the request (HTTP {status}): {_short(exc)}")


def _vectors(body: bytes, expected: int) -> tuple[np.ndarray, int | None]:
    """The vectors of an embeddings answer, in input order: `data[].embedding` as floats, or as base64 float32 (what
    a server may send whatever was asked, as the official client's default asks for); and the tokens its `usage`
    says it read (None where it says nothing)."""
    try:
        answer = orjson.loads(body)
        data = sorted(answer["data"], key=lambda d: d["index"])
        if [d["index"] for d in data] != list(range(len(data))):  # a vector per input, none twice: else misplaced
            raise ValueError("indexes are not 0..n-1")
        rows = [
            np.frombuffer(base64.b64decode(e), dtype=np.float32) if isinstance(e, str) else np.asarray(e, np.float32)
            for e in (d["embedding"] for d in data)
        ]
        if len(rows) != expected:
            raise TransientError(f"the embedding endpoint answered {len(rows)} vectors for {expected} inputs")
        vectors = np.stack(rows) if rows else np.zeros((0, 0), np.float32)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TransientError(f"the embedding endpoint answered something that is not a list of embeddings: "
                             f"{type(exc).__name__}") from None  # fmt: skip
    if vectors.ndim != 2:
        raise TransientError("the embedding endpoint answered vectors of unequal lengths")
    if not np.isfinite(vectors).all():
        raise UnusableVector("the embedding endpoint answered a vector with non-finite values")
    # A zero vector (a faulty endpoint's, or values so large their norm overflows) has no direction: stored, its
    # chunk's distance to any question is NaN and vector search never finds it; cached, the same text stays so.
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    if len(vectors) and not (np.isfinite(norms) & (norms > 0)).all():
        raise UnusableVector("the embedding endpoint answered a zero vector, which no search can rank")
    usage = answer.get("usage") if isinstance(answer, dict) else None
    used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return vectors, used if isinstance(used, int) and not isinstance(used, bool) and used >= 0 else None


class _Split(Exception):
    """A batch the server refused as a whole: send its inputs one by one."""


def _short(exc) -> str:
    return secrets.scrub(" ".join(str(getattr(exc, "message", "") or exc).split()))[:300]


class _Batcher:
    """One queue of (text, tokens, counted) for every caller; a dispatcher thread sends it as requests of at most
    `batch` inputs and `request_tokens` tokens, `concurrency` at once, and resolves each text's future. Tokens not
    `counted` are an upper bound (the text's bytes), counted with `count` only where a request's budget depends on
    them."""

    def __init__(self, send, count, batch: int, request_tokens: int, concurrency: int) -> None:
        self._send = send
        self._count = count
        self._batch = batch
        self._request_tokens = request_tokens
        self._concurrency = concurrency
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, int, bool, Future]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, pieces: list[tuple[str, int, bool]]) -> list[Future]:
        futures = [Future() for _ in pieces]
        with self._cond:
            if self._closed:
                raise FatalError("the embedder is closed")
            self._queue.extend((text, n, counted, f) for (text, n, counted), f in zip(pieces, futures, strict=True))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="embed-dispatch", daemon=True)
                self._thread.start()
            self._cond.notify()
        return futures

    def close(self) -> None:
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        slots = threading.Semaphore(self._concurrency)
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="embed-request") as pool:
            while True:
                with self._cond:
                    if not self._queue and not self._closed:
                        self._cond.wait(_IDLE_S)
                    if not self._queue:
                        self._thread = None
                        return
                    batch = self._take()
                slots.acquire()
                pool.submit(self._request, batch).add_done_callback(lambda _: slots.release())

    def _take(self) -> list[tuple[str, int, bool, Future]]:
        batch = [self._queue.popleft()]
        total = batch[0][1]
        while self._queue and len(batch) < self._batch:
            item = self._queue[0]
            if total + item[1] > self._request_tokens and not (item[2] and all(counted for _, _, counted, _ in batch)):
                # Where the budget is reached, bounds become counts: the request holds what really fits.
                batch = [self._counted(x) for x in batch]
                total = sum(n for _, n, _, _ in batch)
                item = self._queue[0] = self._counted(item)
            if total + item[1] > self._request_tokens:
                break
            batch.append(self._queue.popleft())
            total += item[1]
        return batch

    def _counted(self, item: tuple[str, int, bool, Future]) -> tuple[str, int, bool, Future]:
        text, _, counted, future = item
        return item if counted else (text, self._count(text), True, future)

    def _request(self, batch: list[tuple[str, int, bool, Future]]) -> None:
        try:
            vectors = self._send([text for text, _, _, _ in batch])
        except _Split:
            for item in batch:
                self._request([item])
            return
        except BaseException as exc:  # noqa: BLE001 - handed to every caller waiting on this batch
            for _, _, _, future in batch:
                future.set_exception(exc)
            return
        for (_, _, _, future), vector in zip(batch, vectors, strict=True):
            future.set_result(vector)
