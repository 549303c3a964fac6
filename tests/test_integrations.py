"""The RAG framework adapters (`[langchain]`, `[llama-index]` extras) over a real Postgres: the corpus of
tests/test_search.py, processed by a real worker, searched through `connector.Client`."""

from __future__ import annotations

import importlib
import re
import sys

import psycopg
import pytest
from llama_index.core.schema import NodeRelationship, ObjectType

import connector
from connector.settings import Settings
from tests import test_search

corpus = test_search.corpus  # the topics and the Dockerfile manual, embedded with the fake model


def _chunk(dsn: str, chunk_id: int) -> tuple:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT c.text, c.strategy, c.prev_chunk_id, c.next_chunk_id, d.source_key FROM connector.chunks c "
            "JOIN connector.documents d ON d.id = c.document_id WHERE c.id = %s",
            (chunk_id,),
        ).fetchone()


def test_the_llama_index_retriever_returns_nodes_with_their_place_and_neighbours(
    corpus: str, settings: Settings
) -> None:
    from connector.integrations.llama_index import ConnectorRetriever

    with connector.Client(corpus, settings) as client:
        nodes = ConnectorRetriever(client=client, k=2).retrieve("flux capacitor calibration")
        manual = ConnectorRetriever(client=client, k=3, hybrid=False, filter={"source_key_prefix": "manual/"})
        in_manual = manual.retrieve("the HEALTHCHECK instruction tells the engine how to test a container")

    assert len(nodes) == 2 and nodes[0].score >= nodes[1].score
    first = nodes[0].node
    text, strategy, prev_id, next_id, source_key = _chunk(corpus, first.metadata["chunk_id"])
    assert source_key == first.metadata["source_key"] == "topics/flux" and first.text == text and "XJ42" in text
    assert first.node_id == f"chunk:{first.metadata['chunk_id']}" and first.metadata["strategy"] == strategy
    assert set(first.metadata) == {"source_key", "title", "section_path", "page_start", "page_end", "chunk_type",
                                   "strategy", "chunk_id", "document_id", "prev_chunk_id", "next_chunk_id"}  # fmt: skip
    assert first.source_node.node_id == f"document:{first.metadata['document_id']}"
    assert first.source_node.node_type == ObjectType.DOCUMENT
    # a one-chunk document: no neighbours
    assert (prev_id, next_id) == (None, None) and first.prev_node is None and first.next_node is None
    # bookkeeping ids stay out of what an LLM is shown
    assert "chunk_id" not in first.get_metadata_str("llm") and "topics/flux" in first.get_metadata_str("llm")

    # a chunk of the manual has neighbours: the relationships are the stored links
    assert {n.node.metadata["source_key"] for n in in_manual} == {"manual/dockerfile"}
    linked = next(n.node for n in in_manual if n.node.metadata["prev_chunk_id"] and n.node.metadata["next_chunk_id"])
    _, _, prev_id, next_id, _ = _chunk(corpus, linked.metadata["chunk_id"])
    assert linked.relationships[NodeRelationship.PREVIOUS].node_id == f"chunk:{prev_id}"
    assert linked.relationships[NodeRelationship.NEXT].node_id == f"chunk:{next_id}"
    assert (linked.metadata["prev_chunk_id"], linked.metadata["next_chunk_id"]) == (prev_id, next_id)


def test_the_llama_index_retriever_with_context_returns_the_passage(corpus: str, monkeypatch) -> None:
    from connector.integrations.llama_index import ConnectorRetriever

    monkeypatch.setenv("CONNECTOR_EMBEDDER", "fake")  # a retriever from a dsn reads the settings like the CLI
    question = "the HEALTHCHECK instruction"
    with ConnectorRetriever(dsn=corpus, k=1, context=1, filter={"source_key_prefix": "manual/"}) as retriever:
        [hit] = retriever.retrieve(question)
        client = retriever.client
        [expected] = client.search(question, 1, filter={"source_key_prefix": "manual/"}, context=1)
    node = hit.node
    hit_text, _, prev_id, next_id, _ = _chunk(corpus, node.metadata["chunk_id"])
    assert prev_id is not None and next_id is not None, "a hit in the middle of the manual"
    assert hit_text in node.text and _chunk(corpus, prev_id)[0] in node.text and _chunk(corpus, next_id)[0] in node.text
    assert node.text == expected.passage.text and len(node.text) > len(hit_text)
    assert (node.metadata["first_chunk_id"], node.metadata["last_chunk_id"]) == (prev_id, next_id)
    assert (node.metadata["page_start"], node.metadata["page_end"]) == (
        expected.passage.page_start,
        expected.passage.page_end,
    )
    assert node.node_id == f"chunk:{expected.hit.chunk_id}" and hit.score == pytest.approx(expected.hit.score)
    with pytest.raises(psycopg.OperationalError):  # the retriever closed the client it opened
        client.search(question, 1)
    with pytest.raises(ValueError, match="a connector.Client or a dsn"):
        ConnectorRetriever()


def test_the_langchain_retriever_carries_strategy_and_neighbour_ids(corpus: str, settings: Settings) -> None:
    from connector.integrations.langchain import ConnectorRetriever

    with connector.Client(corpus, settings) as client:
        docs = ConnectorRetriever(client=client, k=3, filter={"source_key_prefix": "manual/"}).invoke("HEALTHCHECK")
    for doc in docs:
        _, strategy, prev_id, next_id, _ = _chunk(corpus, doc.metadata["chunk_id"])
        assert (doc.metadata["strategy"], doc.metadata["prev_chunk_id"], doc.metadata["next_chunk_id"]) == (
            strategy,
            prev_id,
            next_id,
        )


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("llama_index", "llama_index.core.retrievers", "llama-index"),
        ("langchain", "langchain_core.retrievers", "langchain"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(monkeypatch, module: str, hidden: str, extra: str) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # as if the package were not installed
    monkeypatch.delitem(sys.modules, f"connector.integrations.{module}", raising=False)
    with pytest.raises(ImportError, match=re.escape(f"pip install '.[{extra}]'")):
        importlib.import_module(f"connector.integrations.{module}")
