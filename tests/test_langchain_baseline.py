"""Our LangChain-default baseline must chunk exactly as LangChain's own splitter does (differential test)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_text_splitters import RecursiveCharacterTextSplitter

from connector.chunkers.langchain import LangChainChunker
from connector.convert import convert, mime_for_path
from connector.models import Document
from tests.conftest import FIXTURES
from tests.test_convert import CHUNKING


@pytest.mark.parametrize("name", ["apache-2.0.txt", "lppl-1.3c.pdf", "dockerfile-reference.md"])
def test_same_chunks_as_langchain_on_real_documents(name: str) -> None:
    doc = convert((FIXTURES / name).read_bytes(), mime_for_path(name), CHUNKING)
    ours = LangChainChunker(CHUNKING.encoding).split(doc).chunks
    theirs = RecursiveCharacterTextSplitter(chunk_size=4000, chunk_overlap=200).split_text(doc.markdown)
    assert [c.text for c in ours] == theirs
    assert all(doc.markdown[c.start : c.end] == c.text for c in ours)


TEXT = st.lists(
    st.one_of(
        st.sampled_from(["alpha", "beta", "gamma", "supercalifragilistic" * 3]),
        st.sampled_from([" ", "  ", "\n", "\n\n", "\n\n\n"]),
    ),
    max_size=300,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(TEXT, st.integers(20, 120), st.integers(0, 30))
def test_same_chunks_as_langchain_on_generated_text(text: str, size: int, overlap: int) -> None:
    overlap = min(overlap, size - 1)
    ours = LangChainChunker(CHUNKING.encoding, chunk_size=size, overlap=overlap).split(Document(text, ())).chunks
    theirs = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap).split_text(text)
    assert [c.text for c in ours] == theirs
