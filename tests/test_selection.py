"""Selection that follows retrieval: the Retrievability metric, strategies as config objects, `connector tune`
(learning the weights) and `connector explain`'s reasons, each on inputs whose right answer is known."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError

from connector.chunkers import build
from connector.chunkers.base import make_chunk
from connector.chunkers.sentences import sentence_spans
from connector.db.rows import StoredCandidate
from connector.metrics.retrievability import holders, retrievability, retrievability_texts, sample_probes
from connector.metrics.vectors import StaticEncoder, VectorCache
from connector.models import Block, Chunk, Document
from connector.reports import contributions, why
from connector.settings import ChunkingSettings, ScoringSettings
from connector.strategies import LangChain, Recursive, Sections, TokenWindow
from connector.tuning.envfile import write_weights
from connector.tuning.weights import Row, quality, tune
from tests.conftest import FIXTURES, child_env, connector_cmd, output_of
from tests.test_batches import _insert

TOPICS = {
    "pasta": [
        "Bring a large pot of salted water to a rolling boil before adding the dry pasta.",
        "Stir the spaghetti during the first minute so the strands do not stick together in the pot.",
        "Taste the noodles a minute before the time printed on the packet to check they are al dente.",
        "Save a cup of the starchy cooking water because it helps the sauce cling to the pasta.",
        "Drain the pasta quickly and toss it with the warm tomato sauce and grated parmesan cheese.",
    ],
    "orbits": [
        "A satellite in low Earth orbit circles the planet roughly every ninety minutes at high speed.",
        "Raising an orbit requires a prograde burn of the engine at the lowest point of the ellipse.",
        "Geostationary satellites sit above the equator and match the rotation of the Earth exactly.",
        "Atmospheric drag slowly lowers the orbit of the space station, so its thrusters reboost it.",
        "Transfer orbits between planets use the gravity of the Sun and careful timing of launch windows.",
    ],
    "tax": [
        "Employees file an income tax return each spring to report wages and claim their deductions.",
        "Capital gains on shares held longer than a year are taxed at a lower rate than salary income.",
        "Self-employed workers pay quarterly estimated tax to avoid penalties for underpayment at year end.",
        "Charitable donations are deductible only when the taxpayer itemizes instead of the standard deduction.",
        "An audit by the revenue service asks the taxpayer to document the receipts behind each deduction.",
    ],
    "roses": [
        "Plant rose bushes where they receive at least six hours of direct sunlight every day.",
        "Prune the roses in late winter, cutting each cane just above an outward facing bud.",
        "Water the roots deeply once a week rather than sprinkling the leaves, which invites black spot.",
        "Feed the rose bed with compost and a balanced fertilizer when the first leaves appear in spring.",
        "Deadhead faded blooms through the summer so the plant keeps producing new flowers.",
    ],
}
TEXT = "\n\n".join(" ".join(sentences) for sentences in TOPICS.values())
SPANS = sentence_spans(TEXT)


def chunks(bounds) -> list[Chunk]:
    return [c for a, b in bounds if (c := make_chunk(TEXT, a, b, "o200k_base"))]


def paragraphs() -> list[tuple[int, int]]:
    out, pos = [], 0
    for p in TEXT.split("\n\n"):
        a = TEXT.index(p, pos)
        out.append((a, a + len(p)))
        pos = a + len(p)
    return out


@pytest.fixture(scope="module")
def encoder(models_dir: Path) -> StaticEncoder:
    return StaticEncoder(models_dir)


def rt(candidate: list[Chunk], encoder: StaticEncoder, budget: int) -> float | None:
    probes = sample_probes(TEXT, SPANS, 48)
    vectors = VectorCache(encoder)
    vectors.prepare(retrievability_texts(TEXT, candidate, probes))
    return retrievability(TEXT, candidate, probes, vectors, budget)


def test_rt_rewards_chunks_that_follow_the_topics(encoder: StaticEncoder) -> None:
    # Each sentence, masked out of its paragraph, finds that paragraph first: the other three are about other things.
    assert rt(chunks(paragraphs()), encoder, budget=600) == 1.0


def test_rt_guards_both_degenerate_winners(encoder: StaticEncoder) -> None:
    per_sentence = chunks(SPANS)
    assert rt(per_sentence, encoder, budget=len(TEXT)) == 0.0, "a sentence alone leaves no context to find"
    giant = chunks([(0, len(TEXT))])
    assert rt(giant, encoder, budget=1000) == 0.0, "one chunk longer than the budget is never reached in time"
    assert rt(giant, encoder, budget=len(TEXT)) == 1.0, "within a budget that reads everything, it is"


def test_rt_drops_when_boundaries_ignore_the_topics(encoder: StaticEncoder) -> None:
    # Chunks of five sentences shifted by two: each mixes two topics, and no chunk is about one thing.
    shifted = chunks(
        [(0, SPANS[2][1]), *((SPANS[i][0], SPANS[i + 4][1]) for i in (3, 8, 13)), (SPANS[18][0], len(TEXT))]
    )
    assert rt(shifted, encoder, budget=600) < rt(chunks(paragraphs()), encoder, budget=600)


def test_rt_counts_a_probe_cut_by_a_boundary_as_missed(encoder: StaticEncoder) -> None:
    probes = sample_probes(TEXT, SPANS, 48)
    cut = probes[3].start + 10  # inside the fourth probe
    candidate = chunks([(0, cut), (cut, len(TEXT))])
    assert holders(candidate, probes)[3] is None
    assert rt(candidate, encoder, budget=len(TEXT)) == (len(probes) - 1) / len(probes)


def test_probes_are_deterministic_even_and_skip_short_sentences() -> None:
    text = "Short one. " * 5 + " ".join(f"This sentence number {i} has at least eight words in it." for i in range(100))
    probes = sample_probes(text, sentence_spans(text), 10)
    assert probes == sample_probes(text, sentence_spans(text), 10)
    assert len(probes) == 10 and all(len(p.text.split()) >= 8 for p in probes)
    numbers = [int(p.text.split()[3]) for p in probes]
    assert numbers == sorted(numbers) and numbers[0] < 10 and numbers[-1] > 90, "spread through the document"
    assert sample_probes("Too short. Still short.", sentence_spans("Too short. Still short."), 10) == []


def test_holders_finds_the_chunk_of_overlapping_candidates() -> None:
    probes = sample_probes(TEXT, SPANS, 48)
    windows = chunks([(SPANS[i][0], SPANS[min(i + 3, len(SPANS) - 1)][1]) for i in range(0, len(SPANS), 2)])
    for probe, i in zip(probes, holders(windows, probes), strict=True):
        assert i is not None and windows[i].start <= probe.start and probe.end <= windows[i].end


# Strategies as configuration objects


def test_names_are_presets_and_objects_are_configs() -> None:
    cfg = ChunkingSettings(
        strategies=["recursive_1100", "recursive_300_overlap60", "sections_merged", {"kind": "token_window"}]
    )
    assert cfg.strategy_names == ("recursive_1100", "recursive_300_overlap60", "sections_merged", "token_window")
    assert cfg.strategies[1] == Recursive(max_tokens=300, overlap_tokens=60)
    assert cfg.strategies[2] == Sections(merge=True)
    assert Recursive(max_tokens=800).name == "recursive_800" and LangChain().name == "langchain_4000"
    built = build(cfg)
    assert [c.name for c in built] == list(cfg.strategy_names)
    assert built[1].params["overlap_tokens"] == 60 and built[2].params == {"max_tokens": cfg.max_tokens, "merge": True}
    named = ChunkingSettings(strategies=[{"kind": "recursive", "max_tokens": 700, "name": "mine"}])
    assert named.strategy_names == ("mine",) and build(named)[0].name == "mine"


def test_environment_variables_keep_working(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "CONNECTOR_CHUNK_STRATEGIES", '["sentence", "token_window", {"kind": "recursive", "max_tokens": 500}]'
    )
    monkeypatch.setenv("CONNECTOR_CHUNK_SENTENCES_PER_CHUNK", "3")
    monkeypatch.setenv("CONNECTOR_CHUNK_WINDOW_TOKENS", "256")
    cfg = ChunkingSettings()
    assert cfg.strategy_names == ("sentence", "token_window", "recursive_500")
    assert cfg.strategies[0].sentences == 3 and cfg.strategies[1] == TokenWindow(
        size=256, overlap=50, name="token_window"
    )
    assert cfg.forced("sentence").strategies[0].sentences == 3, "forced runs resolve presets with the same knobs"


def test_bad_strategy_configs_are_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="unknown chunking strategy 'recursive'"):
        ChunkingSettings(strategies=["recursive"])
    with pytest.raises(ValidationError, match="max_tokens"):
        ChunkingSettings(strategies=[{"kind": "recursive", "max_tokens": 0}])
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ChunkingSettings(strategies=[{"kind": "sentence", "size": 3}])
    with pytest.raises(ValidationError, match="at least one strategy"):
        ChunkingSettings(strategies=[])
    with pytest.raises(ValidationError, match="unknown encoder 'minlm'; known: minilm"):
        ChunkingSettings(strategies=[{"kind": "semantic", "encoder": "minlm"}])


@pytest.mark.parametrize(
    ("value", "says"),
    [('["nope"]', "unknown chunking strategy 'nope'"), ("page", 'error parsing value for field "strategies"')],
)
def test_a_bad_strategy_setting_is_one_line_on_the_command_line(tmp_path: Path, value: str, says: str) -> None:
    env = {**child_env(tmp_path), "CONNECTOR_CHUNK_STRATEGIES": value}  # the second is not JSON
    result = subprocess.run(connector_cmd("status"), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "configuration error:" in result.stderr and says in result.stderr
    assert "Traceback" not in result.stderr


def test_a_replica_with_a_misspelt_encoder_refuses_to_start_and_takes_no_row(migrated_dsn, start_process) -> None:
    """The semantic strategy's encoder was looked up only when a document was chunked: a replica started with a typo
    beside healthy ones claimed its share of the queue and failed every row, for good ("no chunking strategy
    produced chunks (semantic_90_minlm: FatalError: unknown embedder 'minlm'…)")."""
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        _insert(conn, 4)
    strategies = '[{"kind": "semantic", "encoder": "minlm"}]'
    proc = start_process("run", "--once", "--no-watch", "--dsn", migrated_dsn, "--embedder", "fake",
                         CONNECTOR_CHUNK_STRATEGIES=strategies)  # fmt: skip
    assert proc.wait(120) == 2, output_of(proc)
    assert "configuration error:" in output_of(proc) and "unknown encoder 'minlm'" in output_of(proc)
    with psycopg.connect(migrated_dsn) as conn:
        rows = conn.execute("SELECT status, attempts, count(*) FROM connector.documents GROUP BY 1, 2").fetchall()
    assert rows == [("pending", 0, 4)], "no row claimed, none failed"


def test_forcing_an_unknown_strategy_is_a_configuration_error() -> None:
    from connector.errors import FatalError

    with pytest.raises(FatalError, match="strategy 'recursive_0'"):
        ChunkingSettings().forced("recursive_0")
    with pytest.raises(FatalError, match="unknown chunking strategy 'nope'"):
        ChunkingSettings().forced("nope")


def test_same_parameters_run_once_and_names_follow_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_CHUNK_RECURSIVE_OVERLAP_TOKENS", "150")  # recursive_1100 = recursive_1100_overlap150
    names = ChunkingSettings().strategy_names
    assert "recursive_1100" in names and "recursive_1100_overlap150" not in names
    assert TokenWindow(size=300, overlap=30).name == "token_window_300_30" and TokenWindow().name == "token_window"
    both = ChunkingSettings(strategies=[{"kind": "token_window"}, {"kind": "token_window", "size": 256}])
    assert both.strategy_names == ("token_window", "token_window_256_50")


def test_merged_sections_pack_short_sections_and_cut_only_at_headings() -> None:
    entries = [f"## Question {i}\n\nThe answer to question {i} fits in one short sentence." for i in range(40)]
    text = "\n\n".join(entries)
    heading_starts = [text.index(f"## Question {i}\n") for i in range(40)]
    blocks = tuple(
        Block(s, e, "heading") for s, e in zip(heading_starts, [*heading_starts[1:], len(text)], strict=True)
    )
    doc = Document(text, blocks)
    cfg = ChunkingSettings(strategies=["sections", {"kind": "sections", "merge": True, "max_tokens": 120}])
    plain, merged = (c.split(doc).chunks for c in build(cfg))
    assert len(plain) == 40
    assert 1 < len(merged) < 40 and all(c.token_count <= 120 for c in merged)
    assert all(c.start in heading_starts for c in merged), "a merged chunk still starts at a heading"
    assert "".join(c.text for c in merged).replace("\n", "") == text.replace("\n", "")


# connector tune

DEFAULTS = ScoringSettings().as_dict()  # the weights in use unless configured: the paper's five equal, RT 0


def rows_where(metric: str, docs: int = 24, seed: int = 1) -> list[Row]:
    """Three candidates per document with random metric values; recall is 1 for the candidate with the highest
    `metric` and 0 for the others: the right weights put everything on `metric`."""
    rng = random.Random(seed)
    rows = []
    for d in range(docs):
        values = [{m: rng.random() for m in ("rc", "icc", "bi", "rt")} for _ in range(3)]
        best = max(range(3), key=lambda i: values[i][metric])
        rows += [Row(f"d{d}", f"s{i}", values[i], float(i == best), float(i == best)) for i in range(3)]
    return rows


def test_tune_finds_the_metric_that_predicts_retrieval() -> None:
    result = tune(rows_where("rt"), ["rc", "icc", "bi", "rt"], DEFAULTS, folds=4)
    assert result.weights == {"rc": 0.0, "icc": 0.0, "bi": 0.0, "rt": 1.0}
    for fold in result.folds:  # each fold, fitted without its documents, still leans on the metric that matters
        assert fold.weights["rt"] >= 0.8 and fold.tuned[0] >= fold.current[0]
    assert result.gain > 0.2 and result.shown


def test_tune_measures_its_gain_against_the_weights_in_use_not_equal_ones() -> None:
    """Weights already on the metric that predicts retrieval leave nothing to gain: the gain over equal weights
    (RT included, which the defaults leave out) was claimed, and written, as if tuning had found it."""
    rows = rows_where("rc")
    already = tune(rows, ["rc", "icc", "bi", "rt"], {**DEFAULTS, "rc": 1.0, "icc": 0.0, "bi": 0.0}, folds=4)
    assert already.gain == 0.0 and not already.shown
    assert set(already.correlations) == {"current", "equal", "fitted", "paper (equal, no rt)"}
    assert tune(rows, ["rc", "icc", "bi", "rt"], DEFAULTS, folds=4).shown, "against the defaults there is a gain"


def test_tune_claims_nothing_when_no_metric_predicts_retrieval() -> None:
    rng = random.Random(7)
    noise = [Row(r.doc, r.strategy, r.metrics, float(rng.random() < 0.5), 0.5) for r in rows_where("rt", seed=7)]
    result = tune(noise, ["rc", "icc", "bi", "rt"], DEFAULTS, folds=4)
    assert not result.shown


def test_tune_needs_two_documents_and_two_folds() -> None:
    with pytest.raises(ValueError, match="at least two documents"):
        tune([Row("a", "s", {"rt": 1.0}, 1.0, 1.0)], ["rt"], DEFAULTS)
    with pytest.raises(ValueError, match="at least two folds"):
        tune(rows_where("rt"), ["rt"], DEFAULTS, folds=1)


def test_weights_that_cannot_score_a_document_count_it_as_lost() -> None:
    # RC undefined on every candidate of d1 (no coreference pairs): weights on RC alone would fail d1 in the sidecar
    # (no candidate has a score), so the simulation must count it as retrieving nothing, not as its first candidate.
    rows = [
        Row("d1", "s0", {"rc": None, "bi": 0.9}, 1.0, 1.0),
        Row("d1", "s1", {"rc": None, "bi": 0.5}, 1.0, 1.0),
        Row("d2", "s0", {"rc": 0.9, "bi": 0.1}, 1.0, 1.0),
        Row("d2", "s1", {"rc": 0.1, "bi": 0.9}, 0.0, 0.0),
    ]
    by_doc = {"d1": rows[:2], "d2": rows[2:]}
    assert quality(by_doc, ["d1", "d2"], {"rc": 1.0, "bi": 0.0}) == (0.5, 0.5)
    assert quality(by_doc, ["d1", "d2"], {"rc": 0.6, "bi": 0.4}) == (1.0, 1.0)


def test_weights_are_written_where_the_settings_read_them(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("CONNECTOR_WATCH_DIR=docs\nCONNECTOR_WEIGHT_RC=0.9\nexport CONNECTOR_WEIGHT_BI=0.5\n")
    env.chmod(0o600)  # it holds secrets: writing the weights must not make it readable by others
    write_weights(env, {"rc": 0.0, "icc": 0.2, "dcc": 0.2, "bi": 0.2, "sc": 0.0, "rt": 0.4})
    write_weights(env, {"rc": 0.0, "icc": 0.2, "dcc": 0.2, "bi": 0.2, "sc": 0.0, "rt": 0.4})  # idempotent
    text = env.read_text()
    assert text.count("CONNECTOR_WEIGHT_RT=0.4") == 1 and "CONNECTOR_WEIGHT_RC=0.9" not in text
    assert "CONNECTOR_WATCH_DIR=docs" in text and "export" not in text
    assert env.stat().st_mode & 0o777 == 0o600
    read = ScoringSettings(_env_file=env)
    assert read.as_dict() == {"rc": 0.0, "icc": 0.2, "dcc": 0.2, "bi": 0.2, "sc": 0.0, "rt": 0.4}


def test_tune_command_end_to_end(tmp_path: Path, dsn: str) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("apache-2.0.txt", "debian-manifesto.txt", "lppl-1.3c.pdf", "dockerfile-reference.md"):
        shutil.copy(FIXTURES / name, corpus)
    env_file = tmp_path / "tuned.env"
    result = subprocess.run(
        connector_cmd("tune", "--qa", str(FIXTURES / "qa.jsonl"), "--docs", str(corpus), "--folds", "2",
                      "--env-file", str(env_file), "--json", "--dsn", dsn, "--embedder", "fake"),
        cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["documents"] == 4 and len(report["folds"]) == 2 * 3, "two folds, three shuffles"
    assert set(report["weights"]) == set(report["metrics"]) and "rt" in report["metrics"]
    assert sum(report["weights"].values()) == pytest.approx(1.0)
    # Written exactly when the gain is shown, and never otherwise.
    assert env_file.exists() == report["shown"] == (report["written"] is not None)


# connector explain's reasons


def stored(strategy: str, chosen: bool, chunks: int, tokens: float, cut: int, **metrics) -> StoredCandidate:
    values = dict.fromkeys(("rc", "icc", "dcc", "bi", "sc", "rt"))
    values.update(metrics)
    defined = [v for v in values.values() if v is not None]
    shape = {"tokens_mean": tokens, "tokens_min": 100, "tokens_max": 1100, "units": 200, "units_cut": cut,
             "out_of_range": 0, "tokens_p10": 200, "tokens_p90": 1000}  # fmt: skip
    return StoredCandidate(strategy, chunks, score=sum(defined) / len(defined), elapsed_ms=1.0, chosen=chosen,
                           error=None, params={}, rc_backend=None, metric_ms={}, shape=shape, **values)  # fmt: skip


def test_explain_says_which_metrics_decided_and_what_the_runner_up_changes() -> None:
    weights = dict.fromkeys(("rc", "icc", "dcc", "bi", "sc", "rt"), 0.2)
    winner = stored("sections", True, 30, 850.0, 2, rc=0.95, bi=0.99, sc=1.0, rt=0.612)
    runner = stored("recursive_600", False, 55, 460.0, 14, rc=0.974, bi=0.934, sc=1.0, rt=0.451)
    lines = why([runner, winner], weights)
    # Four metrics defined: each weighs a quarter. Score 3.552 / 4 against 3.359 / 4.
    assert lines[0] == "sections won with 0.888, ahead of recursive_600 (0.840) by 0.048."
    assert "Decided by RT +0.040 (0.612 vs 0.451), BI +0.014 (0.990 vs 0.934)." in lines
    assert "In recursive_600's favour: RC -0.006 (0.950 vs 0.974)." in lines
    assert lines[-1] == (
        "Choosing recursive_600 instead would change: 55 chunks instead of 30, 460 tokens a chunk on average "
        "instead of 850 (100–1100 instead of 100–1100), 14 of 200 protected blocks cut instead of 2."
    )
    assert sum(contributions(winner, weights).values()) == pytest.approx(winner.score)


def test_explain_without_a_contest() -> None:
    alone = stored("recursive_1100", True, 3, 500.0, 0, bi=1.0)
    assert why([alone], dict.fromkeys(("bi",), 1.0)) == ["recursive_1100 won unopposed: it was the only candidate "
                                                          "with chunks"]  # fmt: skip
    assert why([stored("page", False, 3, 500.0, 0, bi=1.0)], {"bi": 1.0}) == [
        "no candidate was chosen (the document is not done)"
    ]
