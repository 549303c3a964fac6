"""Embedders: the fake is deterministic and word-sensitive; MiniLM loads offline and pools long texts by windows."""

from __future__ import annotations

import numpy as np
import pytest

from connector.embedders import dimension_of, load
from connector.errors import FatalError


def test_fake_embedder_is_deterministic_unit_length_and_word_sensitive() -> None:
    e = load("fake")
    a = e.embed(["Postgres stores vectors", "Postgres stores vectors", "bananas are yellow fruit"])
    assert a.vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(a.vectors, axis=1), 1.0)
    assert np.array_equal(a.vectors[0], a.vectors[1])
    query = e.embed(["where are vectors stored in postgres"]).vectors[0]
    assert query @ a.vectors[0] > query @ a.vectors[2]


def test_unknown_embedder_is_a_configuration_error() -> None:
    with pytest.raises(FatalError, match="unknown embedder"):
        dimension_of("word2vec")


@pytest.fixture(scope="module")
def minilm():
    return load("minilm")


def test_minilm_short_text_matches_the_plain_model(minilm) -> None:
    text = "The licensor grants a perpetual, worldwide, royalty-free patent license."
    ours = minilm.embed([text])
    plain = minilm._model.encode([text], normalize_embeddings=True)
    assert ours.windows == (1,)
    assert np.allclose(ours.vectors[0], plain[0], atol=1e-5)


def test_minilm_long_text_is_embedded_by_windows_not_truncated(minilm) -> None:
    head = "Cats purr and sleep in the sun all afternoon. " * 40  # ~400 word pieces: past the 256 window
    tail = "Quarterly revenue, tax filings and accounting ledgers. " * 40
    pooled = minilm.embed([head + tail])
    assert pooled.windows[0] >= 3
    truncated = minilm._model.encode([head + tail], normalize_embeddings=True)[0]
    tail_only = minilm.embed([tail]).vectors[0]
    # The tail influences the pooled vector; a truncated embedding never sees it.
    assert pooled.vectors[0] @ tail_only > truncated @ tail_only + 0.1
    assert np.isclose(np.linalg.norm(pooled.vectors[0]), 1.0, atol=1e-5)
