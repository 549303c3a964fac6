"""Adaptive-chunking ingestion sidecar for Postgres/pgvector."""

__version__ = "0.1.0"
