"""`connector reembed`: move a database to another embedding model without downtime.

1. `build`: the new model embeds every chunk (as the writer embeds it: under its heading) into the standby slot,
   `chunks.standby_embedding` and `connector.standby_windows`, with their own HNSW indexes, while search keeps using
   the active vectors and the sidecar keeps writing. Resumable: a pass embeds only chunks without a standby vector,
   so a killed build picks up where it stopped, and chunks written meanwhile are caught by the next pass. Every
   vector goes through the embedding cache, so a resumed or repeated build never pays twice.
2. `switch`: fills what the sidecar wrote since, then in one transaction trades the slots' names: the new vectors
   become `embedding`/`chunk_windows`, the old ones the standby. Writes and searches wait for it (a few
   milliseconds after the last pass); one that embedded with the old model is refused or embedded again.
3. `switch` again goes back (the old vectors are kept), until `drop` discards the standby.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from connector import embedders, tokens
from connector.db import embeddings
from connector.db.database import connect
from connector.embed import document_span, embedding_text
from connector.embedders import Embedder, ModelSpec
from connector.embedders.cache import PersistentCache, text_hash
from connector.errors import DocumentError
from connector.settings import Settings

log = logging.getLogger(__name__)


def batch_chunks(settings: Settings, spec: ModelSpec) -> int:
    """Chunks read, embedded and written per transaction: what the embedder has in flight at once, so that a killed
    build loses at most that (and the embedding cache has those vectors anyway)."""
    remote = spec.provider == "openai"
    return settings.embed.batch(remote) * (settings.embed.concurrency if remote else 1)


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a build would send: chunks without a standby vector, their texts' tokens (tiktoken), cache hits."""

    chunks: int
    to_embed: int
    tokens: int
    cached: int
    encoding: str


def estimate(dsn: str, settings: Settings, spec: ModelSpec) -> Estimate:
    encoding = settings.embed.tokenizer if spec.provider == "openai" else settings.chunking.encoding
    with connect(dsn, autocommit=True) as conn:
        slots = embeddings.models(conn)
        standby = slots.get("standby")
        resume = standby is not None and embeddings.same_space(standby.spec, spec)
        texts = [
            embedding_text(settings.embed_template, c.title, tuple(c.section_path), c.text, c.table_head)[0]
            for c in embeddings.all_chunks(conn)
        ]
        done = embeddings.standby_progress(conn)[0] if resume else 0
        hashes = list(dict.fromkeys(text_hash(t) for t in texts))
        table = embeddings.CacheTable(dsn)
        try:
            cached = len(table.get(spec.cache_key, hashes, spec.dim)) if spec.dim else 0
        finally:
            table.close()
    return Estimate(len(texts), len(texts) - done, sum(tokens.count_many(texts, encoding)), cached, encoding)


def cached(embedder: Embedder, dsn: str, settings: Settings) -> Embedder:
    if not settings.embed.cache:
        return embedder
    return PersistentCache(embedder, embeddings.CacheTable(dsn), embedders.spec_of(embedder).cache_key)


def build(dsn: str, settings: Settings, embedder: Embedder, on_progress: Callable[[int, int], None]) -> int:
    """Fill the standby slot with `embedder`'s vectors; returns how many chunks this run embedded."""
    spec = embedders.spec_of(embedder)
    model = cached(embedder, dsn, settings)
    try:
        with connect(dsn, autocommit=True) as conn:
            embeddings.prepare_standby(conn, spec)
            n = fill(conn, model, settings, on_progress)
            embeddings.build_standby_indexes(dsn)
            n += fill(conn, model, settings, on_progress)  # what the sidecar wrote while the indexes were built
            embeddings.mark_standby_ready(conn)
    finally:
        _close_cache(model)
    return n


def fill(conn: psycopg.Connection, model: Embedder, settings: Settings, on_progress: Callable[[int, int], None]) -> int:
    """Embed every chunk that has no standby vector yet, in batches, each in its own transaction."""
    n, after = 0, 0
    done, total = embeddings.standby_progress(conn)
    on_progress(done, total)
    spec = embedders.spec_of(model)
    size = batch_chunks(settings, spec)
    while batch := embeddings.missing_standby(conn, after, size):
        texts = [
            embedding_text(settings.embed_template, c.title, tuple(c.section_path), c.text, c.table_head) for c in batch
        ]
        result = _embed(model, batch, [t for t, _ in texts])
        rows = []
        for c, (_, prefix_len), vector, windows in zip(batch, texts, result.vectors, result.window_spans, strict=True):
            spans = [(*document_span(w.start, w.end, c.start_char, c.end_char, prefix_len), w.vector) for w in windows]
            rows.append((c.id, vector, spans))
        embeddings.write_standby(conn, spec, rows)
        n += len(batch)
        done += len(batch)
        after = batch[-1].id
        on_progress(done, max(total, done))
    return n


def _embed(model: Embedder, batch: list, texts: list[str]):
    """The batch's vectors; a text the model refuses is named (chunk and document), so that it can be dealt with."""
    try:
        return model.embed(texts)
    except DocumentError:
        for c, t in zip(batch, texts, strict=True):
            try:
                model.embed([t])
            except DocumentError as exc:
                raise DocumentError(f"chunk {c.id} ({c.title or 'untitled'}): {exc}") from None
        raise


def switch(dsn: str, settings: Settings, on_progress: Callable[[int, int], None]) -> tuple[ModelSpec, ModelSpec]:
    """Make the standby model the active one (and the active one the standby); returns (old, new)."""
    with connect(dsn, autocommit=True) as conn:
        standby = embeddings.models(conn).get("standby")
        if standby is None:
            embeddings.begin_switch(conn)  # says what to run
        model = embedders.load_configured(settings.for_model(standby.spec))
        model_cached = cached(model, dsn, settings)
        try:
            if not embeddings.same_space(embedders.spec_of(model), standby.spec):
                raise embeddings.mismatch(standby, embedders.spec_of(model))
            fill(conn, model_cached, settings, on_progress)  # what the sidecar wrote since the build, unlocked
            with conn.transaction():
                old, new = embeddings.begin_switch(conn)
                fill(conn, model_cached, settings, lambda *_: None)  # the last few, with writes held back
                embeddings.finish_switch(conn, old, new)
        finally:
            _close_cache(model_cached)
            embedders.close(model)
    log.info("switched from %s to %s", old.spec.describe(), new.spec.describe())
    return old.spec, new.spec


def _close_cache(model: Embedder) -> None:
    store = getattr(model, "store", None)
    if store is not None:
        store.close()
