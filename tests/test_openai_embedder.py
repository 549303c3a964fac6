"""The `openai` embedder through the real `openai` client against an OpenAI-compatible stub on 127.0.0.1: batching,
retries (429 with Retry-After, 500, timeouts), dimensions, a wrong key, and windows over the token limit."""

from __future__ import annotations

import logging
import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector import tokens
from connector.counters import REGISTRY
from connector.embedders import close, load
from connector.errors import FatalError, TransientError
from connector.settings import EmbedSettings, Settings
from tests.embed_stub import EmbeddingStub, server_tokens

KEY = "sk-test-Zq81mPw0secretKEY4421"


def embed_settings(stub: EmbeddingStub, **overrides) -> EmbedSettings:
    values = {"base_url": stub.base_url, "api_key": KEY, "model": "text-embedding-3-small", "timeout": 5.0,
              "max_retries": 2, **overrides}  # fmt: skip
    return EmbedSettings(**values)


@pytest.fixture
def stub():
    with EmbeddingStub(dim=64, key=KEY) as s:
        yield s


@pytest.fixture
def opened():
    models = []

    def open_(embed: EmbedSettings):
        model = load("openai", embed)
        models.append(model)
        return model

    yield open_
    for m in models:
        close(m)


def test_inputs_are_batched_into_as_few_requests_as_the_batch_size_allows(stub, opened) -> None:
    model = opened(embed_settings(stub, batch_size=8, dimensions=64))
    texts = [f"note {i}: penguins live in the southern hemisphere" for i in range(29)]
    result = model.embed(texts)
    assert result.vectors.shape == (29, 64)
    assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1)
    sizes = [len(r["body"]["input"]) for r in stub.requests[1:]]  # after the one-word request at start
    assert len(sizes) <= math.ceil(29 / 8) and max(sizes) <= 8
    assert sorted(stub.texts) == sorted(texts)  # every text once (requests run concurrently)
    assert all(r["body"]["encoding_format"] == "float" and r["body"]["dimensions"] == 64 for r in stub.requests)
    # the same answer as one request per text: batching changes nothing in the vectors
    single = opened(embed_settings(stub, batch_size=1, dimensions=64)).embed(texts[:3]).vectors
    assert np.allclose(single, result.vectors[:3], atol=1e-6)


def test_the_dimension_comes_from_the_first_answer_when_not_asked_for(stub, opened) -> None:
    model = opened(embed_settings(stub))
    assert model.dim == 64 and len(stub.requests) == 1  # one short probe
    assert "dimensions" not in stub.requests[0]["body"]


def test_a_batch_from_several_threads_is_sent_with_at_most_concurrency_requests_in_flight(stub, opened) -> None:
    stub.delay = 0.05
    model = opened(embed_settings(stub, batch_size=2, dimensions=64, concurrency=3))
    texts = [f"text {i} about fjords and glaciers" for i in range(40)]
    out: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda j=j: out.__setitem__(j, model.embed(texts[j::4]).vectors))
               for j in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stub.max_in_flight <= 3
    assert stub.max_in_flight >= 2, "requests overlap"
    assert sorted(stub.texts) == sorted(texts)
    alone = opened(embed_settings(stub, dimensions=64)).embed(texts[1::4]).vectors
    assert np.allclose(out[1], alone, atol=1e-6)


def test_a_429_waits_for_retry_after_then_succeeds(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64))
    stub.fail = [("429", 1)]
    result = model.embed(["rate limited once"])
    assert result.vectors.shape == (1, 64)
    first, second = stub.requests[-2:]
    assert second["at"] - first["at"] >= 0.9  # the server said one second


def test_a_500_is_retried_and_a_persistent_one_is_a_transient_error(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64, max_retries=1))
    stub.fail = [("500",)]
    assert model.embed(["once"]).vectors.shape == (1, 64)
    stub.fail = [("500",), ("500",)]
    with pytest.raises(TransientError, match="HTTP 500"):
        model.embed(["twice"])


def test_a_timeout_is_retried_then_a_transient_error(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64, timeout=0.5, max_retries=1))
    stub.fail = [("timeout", 1.0)]
    assert model.embed(["slow once"]).vectors.shape == (1, 64)
    stub.fail = [("timeout", 1.0), ("timeout", 1.0)]
    with pytest.raises(TransientError, match="timed out"):
        model.embed(["slow twice"])


def test_vectors_sent_as_base64_are_the_same_vectors_in_input_order(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64))
    texts = ["penguins swim in cold water", "postgres stores rows in pages", "tea is brewed with hot water"]
    as_floats = model.embed(texts).vectors
    stub.base64 = True  # a server answering base64 float32 whatever was asked (the stub also reverses `data`)
    as_base64 = model.embed(texts).vectors
    assert np.allclose(as_floats, as_base64, atol=1e-6)
    alone = np.stack([model.embed([t]).vectors[0] for t in texts])  # order kept: row i is text i's vector
    assert np.allclose(alone, as_base64, atol=1e-6) and not np.allclose(alone[0], alone[1])


def test_an_answer_that_is_not_embeddings_is_a_transient_error_then_the_next_succeeds(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64))
    stub.fail = [("garbage",)]
    with pytest.raises(TransientError, match="not a list of embeddings"):
        model.embed(["behind a broken proxy"])
    assert model.embed(["behind a mended proxy"]).vectors.shape == (1, 64)


def test_a_zero_vector_is_refused_and_huge_values_keep_their_direction(stub, opened) -> None:
    """An endpoint answering zeros had them stored (and cached): the chunk's distance to any question was NaN and
    vector search never found it. Values so large that their float32 norm overflowed were normalised to zeros."""
    model = opened(embed_settings(stub, dimensions=64))
    stub.fail = [("scaled", 0.0)]
    with pytest.raises(TransientError, match="zero vector"):
        model.embed(["a faulty endpoint's answer", "and another"])
    want = model.embed(["the same text"]).vectors
    stub.fail = [("scaled", 1e24)]
    huge = model.embed(["the same text"]).vectors
    assert np.allclose(huge, want, atol=1e-6) and np.linalg.norm(huge) == pytest.approx(1.0)


def test_vectors_of_another_dimension_stop_the_process(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64))
    stub.fail = [("wrong_dim",)]
    with pytest.raises(FatalError, match="dimension mismatch: .*32-dimensional.*64 expected"):
        model.embed(["x"])


def test_a_wrong_key_is_a_clear_fatal_error_that_never_shows_the_key(stub, opened, caplog) -> None:
    wrong = "sk-wrong-Hh27vXc9-DO-NOT-PRINT"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(FatalError, match="refused the API key \\(HTTP 401\\)") as raised:
        opened(embed_settings(stub, api_key=wrong))  # the dimension probe is the first request
    shown = str(raised.value) + caplog.text
    assert wrong not in shown and wrong[-4:] not in shown and "sk-wro" not in shown


def test_no_key_for_openai_itself_is_a_configuration_error(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(FatalError, match="CONNECTOR_EMBED_API_KEY"):
        load("openai", EmbedSettings(api_key=None, base_url=None))


def test_a_text_over_the_token_limit_is_embedded_in_windows_never_truncated(stub, opened) -> None:
    model = opened(embed_settings(stub, dimensions=64, max_input_tokens=100))
    words = [f"w{i}" for i in range(600)]
    text = " ".join(words)
    result = model.embed([text])
    windows = result.window_spans[0]
    assert len(windows) == math.ceil(tokens.count(text, "cl100k_base") / 100)
    assert all(tokens.count(text[w.start : w.end], "cl100k_base") <= 100 for w in windows)
    assert "".join(text[w.start : w.end] for w in windows) == text  # every character, once, in order
    assert stub.texts == [text[w.start : w.end] for w in windows]
    pooled = sum(w.tokens * w.vector for w in windows)
    assert np.allclose(result.vectors[0], pooled / np.linalg.norm(pooled), atol=1e-6)


def test_windows_tile_any_text_and_one_holds_every_text_within_the_limit(stub, opened) -> None:
    """A text of at most `limit` UTF-8 bytes is one window without being encoded, its bytes standing for its tokens
    (never fewer than tiktoken counts); a longer one is counted and cut. Either way the windows tile the text, and a
    text tiktoken counts within the limit is one window."""
    model = opened(embed_settings(stub, dimensions=64))
    alphabet = st.sampled_from(list("ab \n.,é日本🙂") + ["penguin ", "   ", "\r\n", "ﬁ", "\u200b", "\ud800", "\udfff"])

    @given(st.lists(alphabet, max_size=120).map("".join), st.integers(16, 400))
    @settings(max_examples=400, deadline=None)
    def check(text: str, limit: int) -> None:
        windows = model._windows(text, limit)
        assert "".join(text[a:b] for a, b, _, _ in windows) == text
        counted = len(tokens.encoding("cl100k_base").encode_ordinary(text))
        if counted <= limit:
            assert len(windows) == 1 and windows[0][2] >= counted
            assert windows[0][3] == (windows[0][2] == counted and len(text.encode("utf-8", "surrogatepass")) > limit)
        else:
            assert len(windows) > 1 and all(b > a and is_count for a, b, _, is_count in windows)

    check()


def test_requests_stay_within_the_token_budget_counted_by_tiktoken(stub, opened) -> None:
    """Texts that are one window each, with their bytes as upper bounds of their tokens: a request never holds more
    than `max_request_tokens` tokens, and every text gets its own vector, in order."""
    model = opened(embed_settings(stub, dimensions=64, max_request_tokens=300, batch_size=50))
    texts = [f"{i} " + "fjord glacier moraine " * (3 + i % 7) + "日本" * (i % 3) for i in range(40)]
    result = model.embed(texts)
    assert result.vectors.shape == (40, 64)
    encoding = tokens.encoding("cl100k_base")
    counts = [len(encoding.encode_ordinary(t)) for t in texts]
    for request in stub.requests[1:]:
        assert sum(len(encoding.encode_ordinary(t)) for t in request["body"]["input"]) <= 300
    # Bounds are counted where the budget is reached: each request is filled to within one text of it (the
    # texts' bytes alone, 4 to 5 times their tokens, would have sent one text per request).
    assert len(stub.requests) - 1 <= math.ceil(sum(counts) / (300 - max(counts)))
    alone = opened(embed_settings(stub, dimensions=64, batch_size=1)).embed(texts[:5]).vectors
    assert np.allclose(alone, result.vectors[:5], atol=1e-6)


def test_embedded_tokens_are_what_the_endpoint_says_it_read_else_tiktokens_count(stub, opened) -> None:
    """`connector_embed_tokens` counts the answer's `usage.prompt_tokens` (what a provider bills, by its own
    tokenizer); an endpoint that answers without usage gets tiktoken's count of what was sent."""
    model = opened(embed_settings(stub, dimensions=64, model="counting-model"))
    texts = ["Walruses haul out on sea ice.", "Narwhal tusks are teeth."]

    def counted() -> float:
        return REGISTRY.get_sample_value("connector_embed_tokens_total", {"model": "counting-model"}) or 0.0

    before = counted()
    model.embed(texts)
    assert counted() - before == sum(server_tokens(t) for t in texts)
    stub.usage = False
    before = counted()
    model.embed(texts[:1])
    assert counted() - before == len(tokens.encoding("cl100k_base").encode_ordinary(texts[0]))


def test_a_server_counting_more_tokens_than_tiktoken_gets_shorter_windows(stub, opened, caplog) -> None:
    stub.max_tokens = 120  # its own tokens: one per 3 characters, about twice what tiktoken counts here
    model = opened(embed_settings(stub, dimensions=64, max_input_tokens=200))
    text = " ".join(f"glacier{i}" for i in range(300))
    with caplog.at_level(logging.WARNING):
        result = model.embed([text, "short one"])
    windows = result.window_spans[0]
    assert all(server_tokens(text[w.start : w.end]) <= 120 for w in windows)
    assert "".join(text[w.start : w.end] for w in windows) == text
    assert result.window_spans[1][0].end == len("short one")
    assert "CONNECTOR_EMBED_MAX_INPUT_TOKENS" in caplog.text


def test_a_text_within_the_limit_in_bytes_refused_as_too_long_is_cut_by_its_counted_tokens(stub, opened) -> None:
    """A 600-character text is one window without being counted (600 bytes, under 8191); the server, counting one
    token per 3 characters, refuses it over 120. The retry counts it (~150 tiktoken tokens) and sends windows of
    half that: two requests in all, not a third one with the same text."""
    stub.max_tokens = 120
    model = opened(embed_settings(stub, dimensions=64))
    text = " ".join(f"moraine{i}" for i in range(60))
    result = model.embed([text])
    windows = result.window_spans[0]
    assert len(stub.requests) - 1 == 2
    assert stub.requests[1]["body"]["input"] == [text]
    assert len(windows) == 2 and "".join(text[w.start : w.end] for w in windows) == text
    assert all(server_tokens(text[w.start : w.end]) <= 120 for w in windows)


def test_a_server_refusing_large_batches_with_413_gets_them_split(stub, opened) -> None:
    stub.max_batch = 3  # Text Embeddings Inference's max_client_batch_size
    model = opened(embed_settings(stub, batch_size=8, dimensions=64))
    texts = [f"item {i} on the list of fjords" for i in range(8)]
    result = model.embed(texts)
    assert result.vectors.shape == (8, 64) and set(stub.texts) == set(texts)  # refused ones are recorded too
    assert max(len(r["body"]["input"]) for r in stub.requests[-8:]) == 1  # then one by one
    alone = opened(embed_settings(stub, batch_size=1, dimensions=64)).embed(texts[:2]).vectors
    assert np.allclose(alone, result.vectors[:2], atol=1e-6)


def test_dimensions_the_model_cannot_give_stop_it_at_start(stub, opened) -> None:
    stub.fixed_dim = True
    with pytest.raises(FatalError, match="refuses a one-word request.*HTTP 400.*dimensions"):
        opened(embed_settings(stub, dimensions=256))


def test_a_recorded_endpoint_gets_the_configured_key_only_if_it_is_the_configured_endpoint() -> None:
    from connector.embedders.base import ModelSpec

    configured = Settings(embedder="openai", embed=EmbedSettings(base_url="https://user:pw@a.example/v1", api_key=KEY))
    same = configured.for_model(ModelSpec("openai", "m", 8, (("base_url", "https://a.example/v1"),)))
    assert same.embed.base_url == "https://user:pw@a.example/v1" and same.embed.api_key.get_secret_value() == KEY
    other = configured.for_model(ModelSpec("openai", "m", 8, (("base_url", "http://b.example/v1"),)))
    assert other.embed.base_url == "http://b.example/v1" and other.embed.api_key is None
    openai_itself = configured.for_model(ModelSpec("openai", "m", 8))
    assert openai_itself.embed.base_url is None and openai_itself.embed.api_key is None
