"""The embedder a search needs: the database's active model, loaded once and again after `connector reembed
--switch`, whatever the settings name (they give the keys and runtime). A search embeds its question, then checks in
the transaction that runs it that the model is still the active one (`db.embeddings.hold_shared`)."""

from __future__ import annotations

import logging
import threading

import psycopg

from connector import embedders
from connector.db import embeddings
from connector.embedders import Embedder, ModelSpec
from connector.errors import FatalError
from connector.settings import Settings

log = logging.getLogger(__name__)


class ActiveModel:
    def __init__(self, settings: Settings | None, loaded: Embedder | None = None):
        self.settings = settings  # None: only `loaded` can be used (a server given one model)
        self.last: tuple[ModelSpec, Embedder] | None = None  # what `current` found last
        self._lock = threading.Lock()
        self._loaded: dict[tuple[str, int], Embedder] = {}
        self._owned: list[Embedder] = []
        if loaded is not None:  # the sidecar's own model: shared, closed by its owner
            spec = embedders.spec_of(loaded)
            self._loaded[(spec.name, spec.dim)] = loaded

    def current(self, conn: psycopg.Connection) -> tuple[ModelSpec, Embedder]:
        """The active model's spec and embedder (read outside any transaction of the caller's)."""
        with conn.transaction():
            row = embeddings.active(conn)
        if row is None:  # nothing stored yet (a search finds nothing): the model at hand, or the configured one
            if self._loaded:
                embedder = next(iter(self._loaded.values()))
                return embedders.spec_of(embedder), embedder
            if self.settings is None:
                raise FatalError("this database has no embeddings yet and no model is loaded")
            spec = embedders.spec_of_settings(self.settings)
            if spec.dim is None:
                raise FatalError("this database has no embeddings yet: ingest documents first")
            return spec, self.embedder_for(spec)
        self.last = (row.spec, self.embedder_for(row.spec))
        return self.last

    def embedder_for(self, spec: ModelSpec) -> Embedder:
        key = (spec.name, spec.dim)
        with self._lock:
            found = self._loaded.get(key)
            if found is None and self.settings is None:
                raise FatalError(f"the database's active model is now {spec.describe()}: restart with it")
            if found is None:
                log.info("loading the embedding model %s", spec.describe())
                found = embedders.load_configured(self.settings.for_model(spec))
                if found.dim != spec.dim:
                    embedders.close(found)
                    raise FatalError(f"{spec.name} now answers {found.dim}-dimensional vectors, not {spec.dim}")
                self._loaded[key] = found
                self._owned.append(found)
            return found

    def close(self) -> None:
        with self._lock:
            owned, self._owned = self._owned, []
            self._loaded.clear()
        for e in owned:
            embedders.close(e)
