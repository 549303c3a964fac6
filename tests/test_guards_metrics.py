"""Guards, SC, BI and selection on hand-made cases whose answers are known."""

from __future__ import annotations

import pytest

from connector import guards
from connector.chunkers.base import make_chunk
from connector.errors import DocumentError
from connector.metrics import METRICS, weighted_score
from connector.metrics.blocks import block_integrity
from connector.metrics.size import size_compliance
from connector.models import Block, Candidate, Chunk, Scored
from connector.select import choose
from connector.settings import ChunkingSettings, ScoringSettings, Settings

CFG = ChunkingSettings()


def chunks_at(text: str, cuts: list[int]) -> list[Chunk]:
    bounds = [0, *cuts, len(text)]
    return [c for a, b in zip(bounds, bounds[1:], strict=False) if (c := make_chunk(text, a, b, CFG.encoding))]


def test_tiny_chunk_merges_into_next_when_it_fits() -> None:
    text = "Short heading line.\n\n" + "word " * 300 + "\n\n" + "word " * 300
    cut1 = text.index("word")
    cut2 = text.index("word", cut1 + 1500)
    chunks = chunks_at(text, [cut1, cut2])
    assert chunks[0].token_count < 100
    out = guards.apply(text, chunks, CFG)
    assert len(out) == 2
    assert out[0].start == 0 and out[0].text.startswith("Short heading line.")
    assert out[1].start == chunks[2].start


def test_tiny_last_chunk_merges_into_previous() -> None:
    text = "word " * 400 + "\n\nThe end."
    chunks = chunks_at(text, [text.index("The end.")])
    out = guards.apply(text, chunks, CFG)
    assert len(out) == 1 and out[0].text.endswith("The end.")


def test_tiny_chunk_prefers_the_next_chunk_over_the_previous() -> None:
    text = "alpha " * 300 + "\n\nTiny middle.\n\n" + "omega " * 300
    tiny = text.index("Tiny middle.")
    chunks = chunks_at(text, [tiny, text.index("omega")])
    out = guards.apply(text, chunks, CFG)
    assert len(out) == 2
    assert out[0] == chunks[0], "the previous chunk is left alone"
    assert out[1].start == tiny and out[1].text.startswith("Tiny middle.")


def test_tiny_chunk_falls_back_to_the_previous_chunk_when_the_next_is_too_big() -> None:
    text = "alpha " * 300 + "\n\nTiny middle.\n\n" + "omega " * 1148
    chunks = chunks_at(text, [text.index("Tiny middle."), text.index("omega")])
    out = guards.merge_tiny(text, chunks, CFG)  # the tiny guard alone: the big neighbour stays whole
    assert len(out) == 2
    assert out[0].start == 0 and out[0].text.endswith("Tiny middle.")
    assert out[1] == chunks[2]


def test_a_merge_within_the_size_limit_is_preferred_to_one_within_the_merge_limit() -> None:
    text = "alpha " * 500 + "\n\nTiny middle.\n\n" + "omega " * 1098
    chunks = chunks_at(text, [text.index("Tiny middle."), text.index("omega")])
    out = guards.merge_tiny(text, chunks, CFG)
    # Next would make 1100 < n <= 1150 (allowed, but outside Size Compliance); previous stays within 1100.
    assert len(out) == 2 and out[0].text.endswith("Tiny middle.") and out[0].token_count <= 1100


def test_tiny_chunk_between_full_neighbours_is_rebalanced_not_left_tiny() -> None:
    text = "word " * 1149 + "\n\nTiny.\n\n" + "word " * 1149
    chunks = chunks_at(text, [text.index("Tiny."), text.index("word", text.index("Tiny."))])
    assert [c.token_count > 1100 for c in chunks] == [True, False, True]
    out = guards.merge_tiny(text, chunks, CFG)  # the tiny guard alone: no merge fits within 1150
    assert len(out) == 3 and out[0] == chunks[0]
    assert all(CFG.min_tokens <= c.token_count <= CFG.max_tokens for c in out[1:])
    assert out[1].text.startswith("Tiny.") and out[2].text == text[out[2].start :].strip()


def test_oversize_chunk_is_resplit() -> None:
    text = ". ".join(["This sentence has a handful of words in it"] * 400)
    out = guards.apply(text, chunks_at(text, []), CFG)
    assert len(out) > 1 and all(c.token_count <= CFG.max_tokens for c in out)
    assert "".join(text[c.start : c.end] for c in out).replace(" ", "") == text.replace(" ", "")


def test_size_compliance_counts_chunks_in_range() -> None:
    assert size_compliance([99, 100, 1100, 1101], 100, 1100) == 0.5
    assert size_compliance([], 100, 1100) is None


def test_size_compliance_is_measured_before_the_guards_repair_the_sizes(tmp_path) -> None:
    from connector import candidates, chunkers
    from connector.convert import convert
    from connector.metrics import DocumentMetrics, Resources

    # 12 sentences of ~12 tokens: `sentence` with 2 a chunk makes 24-token chunks, all under min_tokens; the tiny
    # guard merges them into compliant ones. SC says the strategy missed the range, not that the guards repaired it.
    text = " ".join(f"Sentence {i} is about the weather and says little else of note." for i in range(12))
    cfg = ChunkingSettings(strategies=[{"kind": "sentence", "sentences": 2}], min_tokens=50, max_tokens=200,
                           merge_limit=210)  # fmt: skip
    doc = convert(text.encode(), "text/plain", cfg)
    (candidate,) = candidates.generate(doc, chunkers.build(cfg), cfg, parallel=False)
    assert len(candidate.raw_token_counts) == 6 and all(n < 50 for n in candidate.raw_token_counts)
    assert all(50 <= c.token_count <= 200 for c in candidate.chunks)
    weights = {"rc": 0, "icc": 0, "dcc": 0, "rt": 0, "bi": 0}
    raw = Settings(data_dir=tmp_path, chunking=cfg, weights=weights)
    after = Settings(data_dir=tmp_path, chunking=cfg, weights=weights, metrics={"sc_before_guards": False})
    assert DocumentMetrics(doc, raw, Resources(None, None)).score(candidate).metrics["sc"] == 0.0
    assert DocumentMetrics(doc, after, Resources(None, None)).score(candidate).metrics["sc"] == 1.0


def test_block_integrity_counts_each_cut_block_once_with_tolerance() -> None:
    blocks = [Block(0, 100), Block(102, 200), Block(202, 300)]
    whole = [Chunk(0, 300, "", 1)]
    assert block_integrity(blocks, whole) == 1.0
    cut_inside_one = [Chunk(0, 150, "", 1), Chunk(150, 300, "", 1)]
    assert block_integrity(blocks, cut_inside_one) == pytest.approx(2 / 3)
    cut_twice_in_one = [Chunk(0, 120, "", 1), Chunk(120, 160, "", 1), Chunk(160, 300, "", 1)]
    assert block_integrity(blocks, cut_twice_in_one) == pytest.approx(2 / 3)
    within_tolerance = [Chunk(0, 105, "", 1), Chunk(105, 300, "", 1)]  # 3 chars into block 2: not a break
    assert block_integrity(blocks, within_tolerance) == 1.0
    at_boundary = [Chunk(0, 102, "", 1), Chunk(102, 300, "", 1)]
    assert block_integrity(blocks, at_boundary) == 1.0
    assert block_integrity([], whole) is None


@pytest.mark.parametrize(
    ("cut", "broken"),
    [(105, False), (106, True), (194, True), (195, False)],  # block [100, 200): more than 5 chars on each side
)
def test_block_integrity_tolerance_edges(cut: int, broken: bool) -> None:
    blocks = [Block(100, 200)]
    chunks = [Chunk(0, cut, "", 1), Chunk(cut, 300, "", 1)]
    assert block_integrity(blocks, chunks) == (0.0 if broken else 1.0)


def test_weighted_score_renormalises_over_defined_metrics() -> None:
    values = dict.fromkeys(METRICS)
    values.update(sc=1.0, bi=0.5)
    assert weighted_score(values, ScoringSettings()) == pytest.approx(0.75)
    assert weighted_score(values, ScoringSettings(sc=3.0, bi=1.0)) == pytest.approx(0.875)
    assert weighted_score(dict.fromkeys(METRICS), ScoringSettings()) is None


def _scored(name: str, score: float | None, chunks: int = 1) -> Scored:
    candidate = Candidate(name, tuple(Chunk(0, 1, "x", 1) for _ in range(chunks)))
    return Scored(candidate, {}, score)


def test_choose_takes_highest_and_breaks_ties_by_configured_order() -> None:
    assert choose([_scored("page", 0.8), _scored("recursive_1100", 0.9)]).candidate.strategy == "recursive_1100"
    assert choose([_scored("page", 0.9), _scored("recursive_1100", 0.9)]).candidate.strategy == "page"
    assert choose([_scored("recursive_1100", 0.9), _scored("page", 0.9)]).candidate.strategy == "recursive_1100"


def test_choose_without_any_usable_candidate_fails_the_document() -> None:
    failed = Scored(Candidate("page", (), error="ValueError: boom"), {}, None)
    with pytest.raises(DocumentError, match="page: ValueError: boom"):
        choose([failed, _scored("recursive_1100", None, chunks=0)])
