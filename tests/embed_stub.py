"""An OpenAI-compatible /v1/embeddings endpoint on 127.0.0.1 that behaves like the service, failures included.

Vectors are real bag-of-words vectors (`lexical.hashed_bow`, the fake embedder's math) of the asked dimension, so a
search through them finds what shares words with the question. What it can be told to do:
- `fail`: a script of answers for the next requests: ("429", retry_after_s), ("500",), ("timeout", sleep_s),
  ("wrong_dim",); each used once, in order;
- `key`: the only key it accepts (others get OpenAI's 401, which quotes part of the key);
- `max_tokens`: inputs longer than this many of *its own* tokens (`server_tokens`: one per 3 characters, more than
  tiktoken counts) get OpenAI's 400 "maximum context length";
- `delay`: seconds every request takes; `max_batch`: more inputs in one request get TEI's 413; `fixed_dim`: a
  `dimensions` parameter gets 400; `refuse`: a request with an input containing this string gets 400;
  `constant`: answer every input (text or token ids) with one constant vector, at once (`tests.pgai_compare`);
  `base64`: vectors as base64 float32 whatever was asked (as the official client's default asks for); ("garbage",)
  in `fail`: a 200 whose body is not JSON (a proxy's error page).
It records every request (inputs, headers, arrival time) and how many were in flight at once.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from connector.embedders.lexical import hashed_bow
from connector.embedders.openai import PROBE


def server_tokens(text: str) -> int:
    return (len(text) + 2) // 3


class EmbeddingStub:
    def __init__(self, dim: int = 64, key: str | None = None, max_tokens: int | None = None, delay: float = 0.0):
        self.max_batch: int | None = None  # more inputs in one request: 413, as Text Embeddings Inference answers
        self.fixed_dim = False  # True: a `dimensions` parameter is refused with 400, as for text-embedding-ada-002
        self.refuse: str | None = None  # a request with an input containing this gets 400 (an input it will not take)
        self.zero: str | None = None  # an input containing this gets a zero vector (a faulty model on that input)
        self.constant = False  # True: one constant unit vector per input, text or token ids, at once (benchmarks)
        self.base64 = False  # True: every vector as base64 float32, whatever `encoding_format` asked for
        self.usage = True  # False: answers without `usage` (as some compatible servers send them)
        self.dim = dim
        self.key = key
        self.max_tokens = max_tokens
        self.delay = delay
        self.fail: list[tuple] = []
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body are two writes: without this, Nagle holds the body for the client's delayed
                # ACK (40 ms a request on Linux), as no real server does.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub._lock:
                    stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                          "body": body, "at": time.monotonic()})  # fmt: skip
                    action = stub.fail.pop(0) if stub.fail else None
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    self._answer(body, action)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _answer(self, body: dict, action: tuple | None) -> None:
                if stub.delay:
                    time.sleep(stub.delay)
                if action and action[0] == "timeout":
                    time.sleep(action[1])
                    return self._send(500, {"error": {"message": "too late", "type": "server_error"}})
                if action and action[0] == "429":
                    return self._send(429, _error("Rate limit reached", "rate_limit_exceeded"),
                                      {"Retry-After": str(action[1])})  # fmt: skip
                if action and action[0] == "garbage":
                    return self._send(200, None, raw=b"<html><body>502 Bad Gateway</body></html>")
                if action and action[0] == "500":
                    return self._send(500, _error("The server had an error", "server_error"))
                if stub.key is not None and self.headers.get("Authorization") != f"Bearer {stub.key}":
                    given = (self.headers.get("Authorization") or "")[7:]
                    return self._send(401, _error(f"Incorrect API key provided: {given[:3]}***{given[-4:]}.",
                                                  "invalid_api_key"))  # fmt: skip
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if stub.max_batch is not None and len(inputs) > stub.max_batch:
                    return self._send(413, {"error": f"batch size {len(inputs)} > maximum allowed batch size "
                                            f"{stub.max_batch}", "error_type": "Validation"})  # fmt: skip
                if stub.fixed_dim and body.get("dimensions"):
                    return self._send(400, _error("This model does not support specifying dimensions.",
                                                  "invalid_request_error"))  # fmt: skip
                if stub.refuse is not None and any(stub.refuse in t for t in inputs):
                    return self._send(400, _error("'$.input' is invalid: it contains a forbidden sequence.",
                                                  "invalid_request_error"))  # fmt: skip
                if stub.constant:  # near-free: what a benchmark of the clients wants
                    vector = [1.0 / (body.get("dimensions") or stub.dim) ** 0.5] * (body.get("dimensions") or stub.dim)
                    return self._send(200, {"object": "list", "model": body.get("model"),
                                            "data": [{"object": "embedding", "index": i, "embedding": vector}
                                                     for i in range(len(inputs))],
                                            "usage": {"prompt_tokens": 0, "total_tokens": 0}})  # fmt: skip
                if any(not isinstance(t, str) for t in inputs):
                    return self._send(400, _error("this server takes text, not token ids", "invalid_request_error"))
                if stub.max_tokens is not None:
                    for t in inputs:
                        if server_tokens(t) > stub.max_tokens:
                            return self._send(400, _error(
                                f"This model's maximum context length is {stub.max_tokens} tokens, however you "
                                f"requested {server_tokens(t)} tokens.", "invalid_request_error"))  # fmt: skip
                dim = body.get("dimensions") or stub.dim
                if action and action[0] == "wrong_dim":
                    dim = dim // 2
                vectors = hashed_bow(inputs, dim)
                if action and action[0] == "scaled":  # a faulty endpoint: zeros (0), or values a float32 norm overflows
                    vectors = vectors.astype("f8") * action[1]
                if stub.zero is not None:
                    vectors[[stub.zero in t for t in inputs]] = 0
                data = [{"object": "embedding", "index": i,
                         "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if stub.base64
                         else [float(x) for x in v]}
                        for i, v in enumerate(vectors)]  # fmt: skip
                data.reverse()  # the order of `data` is not the inputs': `index` says which is which
                used = sum(server_tokens(t) for t in inputs)  # what it read, by its own tokenizer
                answer = {"object": "list", "data": data, "model": body.get("model")}
                if stub.usage:
                    answer["usage"] = {"prompt_tokens": used, "total_tokens": used}
                self._send(200, answer)

            def _send(self, status: int, payload: dict | None, headers: dict | None = None, raw: bytes = b"") -> None:
                raw = raw or json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="embedding-stub")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def inputs(self) -> list[str]:
        return [t for r in self.requests for t in r["body"]["input"]]

    @property
    def texts(self) -> list[str]:
        """The inputs but the embedder's one-word request at start."""
        return [t for t in self.inputs if t != PROBE]

    def __enter__(self) -> EmbeddingStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def _error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
