"""RAG framework adapters over `connector.search()` (optional extras: `pip install '.[langchain]'`)."""
