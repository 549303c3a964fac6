"""Adaptive-chunking ingestion sidecar for Postgres/pgvector."""

__version__ = "0.1.0"

__all__ = ["Client"]


def __getattr__(name: str):
    # `connector.Client` without importing the database and model stack for every `import connector`.
    if name == "Client":
        from connector.search.client import Client

        return Client
    raise AttributeError(name)
