"""RC only when it can change the winner (`metrics.rc_when_decisive`): the bound it relies on, and the same winners
as scoring everything, on real documents and on the rows `connector bench --rows` makes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from connector.bench import rows as rows_bench
from connector.metrics import rc_cannot_change_choice, weighted_score
from connector.models import Candidate, Chunk, Scored, SourceDocument
from connector.pipeline import Chooser
from connector.select import choose
from connector.settings import ScoringSettings, Settings
from tests.conftest import FIXTURES

WEIGHTS = ScoringSettings()
UNIT = st.floats(0, 1, allow_nan=False)
METRIC = st.one_of(st.none(), UNIT)


@st.composite
def scored_without_rc(draw) -> list[Scored]:
    """Candidates of one to five chunks (some failed), scored on every metric but RC, as the lazy path scores them."""
    out = []
    for n in range(draw(st.integers(1, 6))):
        chunks = draw(st.integers(0, 5))
        candidate = Candidate(f"s{n}", tuple(Chunk(10 * i, 10 * i + 10, "x", 1) for i in range(chunks)))
        values = {"rc": None, "icc": draw(METRIC), "dcc": draw(METRIC), "bi": draw(METRIC), "sc": draw(METRIC),
                  "rt": None}  # fmt: skip
        if draw(st.booleans()):  # candidates often share values (the same chunks): ties must go as `choose` says
            values = dict(out[-1].metrics) if out else values
        out.append(Scored(candidate, values, weighted_score(values, WEIGHTS) if chunks else None))
    return out


@given(scored_without_rc(), st.data())
@examples(max_examples=400, deadline=None)
def test_when_rc_cannot_change_the_choice_no_rc_values_do(scored: list[Scored], data) -> None:
    """Whatever the pairs turn out to be (none at all: RC undefined everywhere; some: RC 1 for a single chunk, any
    value in [0, 1] for the others), the winner is the one chosen without RC."""
    if not rc_cannot_change_choice(scored, WEIGHTS):
        return
    winner = choose(scored).candidate.strategy
    for _ in range(8):
        with_rc = []
        for s in scored:
            rc = 1.0 if len(s.candidate.chunks) == 1 else data.draw(st.sampled_from([0.0, 1.0, data.draw(UNIT)]))
            values = {**s.metrics, "rc": rc}
            with_rc.append(Scored(s.candidate, values, weighted_score(values, WEIGHTS) if s.candidate.chunks else None))
        assert choose(with_rc).candidate.strategy == winner


def test_a_close_race_needs_rc_and_a_clear_one_does_not() -> None:
    one = Candidate("whole", (Chunk(0, 10, "x", 1),))
    two = Candidate("halves", (Chunk(0, 5, "x", 1), Chunk(5, 10, "x", 1)))

    def race(a: dict, b: dict) -> bool:
        return rc_cannot_change_choice([Scored(one, a, weighted_score(a, WEIGHTS)),
                                        Scored(two, b, weighted_score(b, WEIGHTS))], WEIGHTS)  # fmt: skip

    high = {"rc": None, "icc": 0.8, "dcc": None, "bi": 1.0, "sc": 1.0, "rt": None}
    low = {**high, "icc": 0.7}
    assert race(high, low), "the single chunk leads, and RC can only add to its lead"
    assert not race(low, high), "the split one leads without RC; RC 1 for the single chunk could overtake it"
    assert race(high, high), "a tie goes to the first listed, and RC cannot lift the second above RC 1"
    # Listed first, the split candidate trails without RC (0.8125 against 0.833) but ties with RC 1 (0.875 each,
    # to the last bit): a tie it would win.
    whole = {"rc": None, "icc": 0.5, "dcc": None, "bi": 1.0, "sc": 1.0, "rt": None}
    split = {"rc": None, "icc": None, "dcc": None, "bi": 1.0, "sc": 0.625, "rt": None}
    first = Scored(two, split, weighted_score(split, WEIGHTS))
    second = Scored(one, whole, weighted_score(whole, WEIGHTS))
    assert choose([first, second]) is second
    assert weighted_score({**split, "rc": 1.0}, WEIGHTS) == weighted_score({**whole, "rc": 1.0}, WEIGHTS)
    assert not rc_cannot_change_choice([first, second], WEIGHTS)


def rows_and_documents(rows: list[tuple[int, int]]) -> list[SourceDocument]:
    """`connector bench --rows` rows of the fixtures (n rows of about `chars` characters, for each (chars, n)), then
    three whole real documents (text, Markdown, HTML)."""
    sources = []
    for chars, n in rows:
        sources += [SourceDocument(len(sources), "sql", str(k), r.title, r.body.encode(), "text/plain", "")
                    for k, r in enumerate(rows_bench.workload([FIXTURES], n, chars))]  # fmt: skip
    for n, name in enumerate(["apache-2.0.txt", "dockerfile-reference.md", "postgresql-15-datatype-numeric.html"]):
        mime = {"txt": "text/plain", "md": "text/markdown", "html": "text/html"}[name.rsplit(".", 1)[1]]
        sources.append(SourceDocument(1000 + n, "folder", name, None, (FIXTURES / name).read_bytes(), mime, ""))
    return sources


def _choosers(settings: Settings) -> tuple[Chooser, Chooser]:
    every = settings.model_copy(update={"metrics": settings.metrics.model_copy(update={"rc_when_decisive": False})})
    return Chooser.load(settings, parallel=False), Chooser.load(every, parallel=False)


def test_the_same_winners_as_scoring_every_metric(tmp_path: Path) -> None:
    """Short rows (mostly one chunk for the winner) and whole real documents: the same winner, chunk for chunk;
    where RC was found, every candidate's values, score and breaks as when scoring everything; both paths taken."""
    lazy, every = _choosers(Settings(data_dir=tmp_path))
    sources = rows_and_documents([(2400, 120)])
    skipped = found = 0
    for source in sources:
        a, b = lazy.choose(source), every.choose(source)
        assert a.winner.candidate.strategy == b.winner.candidate.strategy, source.source_key
        assert a.winner.candidate.chunks == b.winner.candidate.chunks
        if any(s.rc_backend for s in a.scored):
            found += 1
            assert [s.metrics for s in a.scored] == [s.metrics for s in b.scored]
            assert [s.score for s in a.scored] == [s.score for s in b.scored]
            assert [s.breaks for s in a.scored] == [s.breaks for s in b.scored]
            assert "metric:coref" in a.timings
        else:
            skipped += 1
            assert all(s.metrics["rc"] is None for s in a.scored)
            assert "metric:coref" not in a.timings, "no coreference pairs were looked for"
            assert all(b["kind"] != "reference" for s in a.scored for b in s.breaks)
            assert a.winner.score == weighted_score({**b.winner.metrics, "rc": None}, ScoringSettings())
    assert skipped >= len(sources) // 3, "the short rows mostly need no RC"
    assert found >= 3, "the long documents do"
