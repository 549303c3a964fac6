"""The llm_regex strategy through the real openai client against a local stub endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from connector import candidates
from connector.chunkers import build
from connector.chunkers.llm_regex import LLMRegexChunker
from connector.convert import convert
from connector.settings import ChunkingSettings, LLMSettings
from tests.llm_stub import ChatStub

ARTICLES = "\n".join(
    f"Article {n}. Title {n}\n" + f"Clause text number {n} with several words. " * 30 for n in range(1, 7)
)


def settings_for(stub: ChatStub | None, tmp_path: Path, **llm) -> ChunkingSettings:
    cfg = LLMSettings(
        base_url=stub.base_url if stub else None,
        api_key=SecretStr("sk-test-secret"),
        model="stub-model",
        cache_dir=tmp_path / "cache",
        **llm,
    )
    return ChunkingSettings(strategies=("llm_regex",), llm=cfg)


def generate(text: str, cfg: ChunkingSettings):
    doc = convert(text.encode(), "text/plain", cfg)
    (candidate,) = candidates.generate(doc, build(cfg), cfg, parallel=False)
    return doc, candidate


def test_the_pattern_splits_the_whole_document_and_is_cached(tmp_path: Path) -> None:
    with ChatStub("Here you go: <regex>\n(?m)^Article \\d+\\.\n</regex>") as stub:
        cfg = settings_for(stub, tmp_path)
        doc, candidate = generate(ARTICLES, cfg)
        assert candidate.error is None
        assert [c.text.split(".")[0] for c in candidate.chunks] == [f"Article {n}" for n in range(1, 7)]
        assert candidate.params["regex"] == "(?m)^Article \\d+\\."
        assert "fallback" not in candidate.params
        (request,) = stub.requests
        assert request["path"] == "/v1/chat/completions"
        assert request["auth"] == "Bearer sk-test-secret"
        assert request["body"]["model"] == "stub-model"
        prompt = request["body"]["messages"][0]["content"]
        assert "<regex>" in prompt and prompt.endswith(ARTICLES)
        generate(ARTICLES, cfg)
        assert len(stub.requests) == 1, "the second run used the cached pattern"


def test_only_the_beginning_of_a_long_document_is_sent(tmp_path: Path) -> None:
    with ChatStub("<regex>(?m)^Article</regex>") as stub:
        generate(ARTICLES * 20, settings_for(stub, tmp_path, context_tokens=500))
        prompt = stub.requests[0]["body"]["messages"][0]["content"]
        sent = prompt.split("# Document (beginning)\n", 1)[1]
        assert ARTICLES.startswith(sent) or (ARTICLES * 20).startswith(sent)
        assert 0 < len(sent) < 4000 and sent.endswith("\n"), "whole lines, within the budget"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("I would split on articles.", "returned no <regex>"),
        ("<regex>(unclosed</regex>", "invalid pattern"),
        ("<regex>(a|aa)+$</regex>", "ran longer than"),  # catastrophic backtracking on the text below
    ],
)
def test_bad_answers_degrade_to_one_chunk_that_the_guards_resplit(tmp_path: Path, answer: str, reason: str) -> None:
    text = "a" * 3000 + "!\n\n" + ARTICLES
    with ChatStub(answer) as stub:
        _doc, candidate = generate(text, settings_for(stub, tmp_path, regex_timeout=0.3))
    assert candidate.error is None
    assert reason in candidate.params["fallback"]
    assert len(candidate.chunks) >= 2 and all(c.token_count <= 1150 for c in candidate.chunks)


def test_without_an_endpoint_the_strategy_is_skipped_and_says_why(tmp_path: Path) -> None:
    _doc, candidate = generate(ARTICLES, settings_for(None, tmp_path))
    assert candidate.error == "skipped: no LLM endpoint configured (CONNECTOR_LLM_BASE_URL)"
    assert candidate.chunks == ()


def test_an_unreachable_endpoint_fails_only_this_candidate(tmp_path: Path) -> None:
    cfg = ChunkingSettings(
        strategies=("llm_regex", "recursive_1100"),
        llm=LLMSettings(base_url="http://127.0.0.1:9/v1", timeout=2, cache_dir=tmp_path / "c"),
    )
    doc = convert(ARTICLES.encode(), "text/plain", cfg)
    llm, recursive = candidates.generate(doc, build(cfg), cfg, parallel=False)
    assert llm.error and "Connection" in llm.error and llm.chunks == ()
    assert recursive.error is None and recursive.chunks


def test_the_api_key_is_not_in_the_recorded_params(tmp_path: Path) -> None:
    llm = LLMSettings(base_url="http://x/v1", api_key=SecretStr("sk-secret"))
    chunker = LLMRegexChunker(llm, ChunkingSettings().encoding)
    assert "sk-secret" not in str(chunker.params)


def test_the_pattern_cache_lives_in_the_data_dir_unless_set(tmp_path: Path, monkeypatch) -> None:
    """It was `.connector/llm-regex` under the working directory whatever CONNECTOR_DATA_DIR said: in the container
    (a read-only /app, state on a volume) the pattern paid for could not be kept."""
    from connector.settings import Settings

    monkeypatch.delenv("CONNECTOR_LLM_CACHE_DIR", raising=False)
    assert Settings(data_dir=tmp_path / "state").chunking.llm.cache_dir == tmp_path / "state" / "llm-regex"
    monkeypatch.setenv("CONNECTOR_LLM_CACHE_DIR", str(tmp_path / "mine"))
    assert Settings(data_dir=tmp_path / "state").chunking.llm.cache_dir == tmp_path / "mine"
