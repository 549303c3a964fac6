"""A LlamaIndex retriever over `connector.search()`: `ConnectorRetriever(client=connector.Client(dsn))`.

Each hit becomes a `NodeWithScore` holding a `TextNode` whose id is `chunk:<chunk id>`, whose text is the chunk (or,
with `context`, the chunk and its neighbours as one passage, with the passage's page range) and whose metadata says
where it comes from: source key, title, section path, pages, chunk type, the strategy that made the chunk, and the
chunk, document and neighbour ids. Its relationships point at the neighbouring chunks (`chunk:<id>`) and at the
document (`document:<id>`), so LlamaIndex code that follows `node.prev_node` / `node.next_node` / `node.source_node`
can fetch them from the same tables.
"""

from __future__ import annotations

from typing import Any

from connector.search import Result

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        ObjectType,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as e:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "connector.integrations.llama_index needs llama-index-core: pip install 'pgvector-adaptive-connector"
        "[llama-index]' (or, from a checkout, pip install '.[llama-index]')"
    ) from e

IDS = ("chunk_id", "document_id", "prev_chunk_id", "next_chunk_id", "first_chunk_id", "last_chunk_id", "strategy")
"""Metadata kept out of the text LlamaIndex shows an LLM or embeds: bookkeeping, not content."""


def node_id(chunk_id: int) -> str:
    return f"chunk:{chunk_id}"


def document_node_id(document_id: int) -> str:
    return f"document:{document_id}"


def to_node(result: Result) -> NodeWithScore:
    hit = result.hit
    metadata = {"source_key": hit.source_key, "title": hit.title, "section_path": list(hit.section_path),
                "page_start": hit.page_start, "page_end": hit.page_end, "chunk_type": hit.chunk_type,
                "strategy": hit.strategy, "chunk_id": hit.chunk_id, "document_id": hit.document_id,
                "prev_chunk_id": hit.prev_chunk_id, "next_chunk_id": hit.next_chunk_id}  # fmt: skip
    text = hit.text
    if result.passage is not None:
        text = result.passage.text
        metadata.update(first_chunk_id=result.passage.first_chunk_id, last_chunk_id=result.passage.last_chunk_id,
                        page_start=result.passage.page_start, page_end=result.passage.page_end)  # fmt: skip
    # NOTE: PREVIOUS/NEXT are the hit chunk's own neighbours, as in the metadata; with `context` they lie inside
    # the passage (its ends are first_chunk_id/last_chunk_id).
    relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document_node_id(hit.document_id),
                                                              node_type=ObjectType.DOCUMENT,
                                                              metadata={"source_key": hit.source_key})}  # fmt: skip
    if hit.prev_chunk_id is not None:
        relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=node_id(hit.prev_chunk_id),
                                                                   node_type=ObjectType.TEXT)  # fmt: skip
    if hit.next_chunk_id is not None:
        relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=node_id(hit.next_chunk_id),
                                                               node_type=ObjectType.TEXT)  # fmt: skip
    hidden = [key for key in IDS if key in metadata]
    node = TextNode(id_=node_id(hit.chunk_id), text=text, metadata=metadata, relationships=relationships,
                    excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=hidden)  # fmt: skip
    return NodeWithScore(node=node, score=hit.score)


class ConnectorRetriever(BaseRetriever):
    """`connector.search()` as a LlamaIndex retriever.

    Give it a `connector.Client` (shared, closed by you) or a `dsn` (a client of its own, closed by `close()` or
    `with`): the client embeds the question with the database's own model.
    """

    def __init__(
        self,
        client: Any = None,  # a connector.Client
        *,
        dsn: str | None = None,
        k: int = 5,
        hybrid: bool = True,
        filter: dict | None = None,  # noqa: A002 - the SQL function's parameter name
        context: int = 0,
        **kwargs: Any,  # BaseRetriever's: callback_manager, verbose, ...
    ) -> None:
        if (client is None) == (dsn is None):
            raise ValueError("ConnectorRetriever takes a connector.Client or a dsn: one of the two")
        if client is None:
            from connector.search.client import Client

            client = Client(dsn)
        self.client = client
        self._owns_client = dsn is not None
        self.k, self.hybrid, self.filter, self.context = k, hybrid, dict(filter or {}), context
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        results = self.client.search(query_bundle.query_str, self.k, hybrid=self.hybrid, filter=self.filter,
                                     context=self.context)  # fmt: skip
        return [to_node(r) for r in results]

    def close(self) -> None:
        """Close the client this retriever opened from a dsn (a client given to it is left to its owner)."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> ConnectorRetriever:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
