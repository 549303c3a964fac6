"""The metrics that embed text (ICC, DCC, RT) only when the candidates cut a document differently
(`metrics.embed_when_decisive`): the argument it relies on, and the same winners as measuring everything, on the
rows `connector bench --rows` makes (short and long) and on real documents."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from connector.metrics import EMBEDDING, same_cuts, weighted_score
from connector.models import Candidate, Chunk, Scored
from connector.pipeline import Chooser
from connector.select import choose
from connector.settings import ScoringSettings, Settings
from tests.test_rc_when_decisive import rows_and_documents

UNIT = st.floats(0, 1, allow_nan=False)
# SC is a share of chunks, k of n: two different shares differ by at least 1/n², never by a rounding error (any two
# floats a hair apart would be a tie after the weighted mean's rounding on one side and not on the other).
SHARE = st.integers(1, 1000).flatmap(lambda n: st.integers(0, n).map(lambda k: k / n))
WEIGHTS = st.builds(
    ScoringSettings,
    rc=st.sampled_from([0.0, 0.5, 1.0]),
    icc=st.sampled_from([0.0, 1.0, 2.0]),
    dcc=st.sampled_from([0.0, 1.0]),
    bi=st.sampled_from([0.0, 1.0]),
    sc=st.sampled_from([0.0, 1.0, 3.0]),
    rt=st.sampled_from([0.0, 1.0]),
)


@given(WEIGHTS, st.data())
@examples(max_examples=500, deadline=None)
def test_when_every_candidate_cuts_alike_the_embedding_metrics_cannot_change_the_winner(weights, data) -> None:
    """The same chunks give every candidate the same RC, ICC, DCC, BI and RT (defined or not); only SC differs. The
    winner with those measured is the winner without the embedding ones, ties included."""
    shared = {name: data.draw(st.one_of(st.none(), UNIT)) for name in ("rc", "icc", "dcc", "bi", "rt")}
    chunks = (Chunk(0, 10, "x", 1),)
    full, without = [], []
    for n in range(data.draw(st.integers(1, 6))):
        candidate = Candidate(f"s{n}", chunks if data.draw(st.integers(0, 4)) else ())
        values = {**shared, "sc": data.draw(SHARE)}
        lean = {k: (None if k in EMBEDDING else v) for k, v in values.items()}
        full.append(Scored(candidate, values, weighted_score(values, weights) if candidate.chunks else None))
        without.append(Scored(candidate, lean, weighted_score(lean, weights) if candidate.chunks else None))
    if not any(s.score is not None for s in without):  # the fallback measures them (see `score_all`)
        return
    assert choose(without).candidate.strategy == choose(full).candidate.strategy


def test_same_cuts_looks_at_the_candidates_that_can_win() -> None:
    whole = (Chunk(0, 10, "x", 1),)
    halves = (Chunk(0, 5, "x", 1), Chunk(5, 10, "x", 1))
    assert same_cuts([Candidate("a", whole), Candidate("b", whole), Candidate("c", ())])
    assert same_cuts([Candidate("a", whole), Candidate("b", halves, error="ValueError: x")])
    assert not same_cuts([Candidate("a", whole), Candidate("b", halves)])
    assert not same_cuts([Candidate("a", ()), Candidate("b", (), error="skipped: no pages")])


def _choosers(settings: Settings) -> tuple[Chooser, Chooser]:
    every = settings.model_copy(update={"metrics": settings.metrics.model_copy(update={"embed_when_decisive": False})})
    return Chooser.load(settings, parallel=False), Chooser.load(every, parallel=False)


def test_the_same_winners_as_measuring_every_metric(tmp_path: Path) -> None:
    """Rows of 600 and 2,400 characters and whole real documents: the same winner, chunk for chunk, and the same
    scores' order; where the candidates cut alike the embedding metrics are NULL and nothing was embedded for the
    metrics; where they differ, every value as when measuring everything."""
    lean, every = _choosers(Settings(data_dir=tmp_path))
    alike = differ = 0
    for source in rows_and_documents([(600, 150), (2400, 80)]):
        a, b = lean.choose(source), every.choose(source)
        assert a.winner.candidate.strategy == b.winner.candidate.strategy, source.source_key
        assert a.winner.candidate.chunks == b.winner.candidate.chunks
        ranked = [s.candidate.strategy for s in sorted(a.scored, key=lambda s: -(s.score or -1))]
        assert ranked == [s.candidate.strategy for s in sorted(b.scored, key=lambda s: -(s.score or -1))]
        if same_cuts([s.candidate for s in a.scored]):
            alike += 1
            assert all(s.metrics[k] is None for s in a.scored for k in EMBEDDING)
            assert "metric:embed" not in a.timings and "metric:embed" in b.timings
            assert [s.metrics["sc"] for s in a.scored] == [s.metrics["sc"] for s in b.scored]
        else:
            differ += 1
            assert [s.metrics for s in a.scored] == [s.metrics for s in b.scored]
            assert [s.score for s in a.scored] == [s.score for s in b.scored]
    assert alike >= 100, "most short rows are one chunk for every strategy"
    assert differ >= 40, "longer rows and documents are cut differently"
