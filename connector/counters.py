"""The process's Prometheus registry and the counters that stages below the HTTP layer increment (the embedders and
the embedding cache); `connector.observe` adds the rest and serves them at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry()
EMBED_REQUESTS = Counter(
    "connector_embed_requests", "Requests (remote) or model batches (local) sent to the embedder", ["model"],
    registry=REGISTRY,
)  # fmt: skip
EMBED_INPUTS = Counter(
    "connector_embed_inputs", "Texts (model windows) the embedder was asked to embed", ["model"], registry=REGISTRY
)
EMBED_TOKENS = Counter(
    "connector_embed_tokens",
    "Tokens a remote embedder read (its usage; else counted here)",
    ["model"],
    registry=REGISTRY,
)
EMBED_RETRIES = Counter(
    "connector_embed_failures", "Remote embedding requests that failed after the client's retries, by kind",
    ["model", "kind"], registry=REGISTRY,
)  # fmt: skip
EMBED_CACHE = Counter(
    "connector_embed_cache", "Texts looked up in the embedding cache, by result (hit, miss)", ["result"],
    registry=REGISTRY,
)  # fmt: skip
