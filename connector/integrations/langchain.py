"""A LangChain retriever over `connector.search()`: `ConnectorRetriever(client=connector.Client(dsn))`.

Each hit becomes a `Document` whose text is the chunk (or, with `context`, the chunk and its neighbours as one
passage) and whose metadata says where it comes from: source key, title, section path, pages, chunk type, the
strategy that made the chunk, chunk and document ids, the ids of the chunk's neighbours (`prev_chunk_id`,
`next_chunk_id`; None at a document's ends), score (and, with `context`, the first/last chunk ids of the passage).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from connector.search import Result

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as e:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "connector.integrations.langchain needs langchain-core: pip install 'pgvector-adaptive-connector[langchain]'"
        " (or, from a checkout, pip install '.[langchain]')"
    ) from e


def to_document(result: Result) -> Document:
    hit = result.hit
    metadata = {"chunk_id": hit.chunk_id, "document_id": hit.document_id, "source_key": hit.source_key,
                "title": hit.title, "section_path": list(hit.section_path), "page_start": hit.page_start,
                "page_end": hit.page_end, "chunk_type": hit.chunk_type, "strategy": hit.strategy,
                "prev_chunk_id": hit.prev_chunk_id, "next_chunk_id": hit.next_chunk_id, "score": hit.score}  # fmt: skip
    text = hit.text
    if result.passage is not None:
        text = result.passage.text
        metadata.update(first_chunk_id=result.passage.first_chunk_id, last_chunk_id=result.passage.last_chunk_id,
                        page_start=result.passage.page_start, page_end=result.passage.page_end)  # fmt: skip
    return Document(page_content=text, metadata=metadata, id=str(hit.chunk_id))


class ConnectorRetriever(BaseRetriever):
    client: Any  # a connector.Client (typed loosely: pydantic need not know it)
    k: int = 5
    hybrid: bool = True
    filter: dict = Field(default_factory=dict)
    context: int = 0

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        results = self.client.search(query, self.k, hybrid=self.hybrid, filter=self.filter, context=self.context)
        return [to_document(r) for r in results]
