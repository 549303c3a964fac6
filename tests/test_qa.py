"""How `connector eval` judges retrieved chunks: hand-made cases whose answers are known."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector import qa

EVIDENCE = "The quick brown fox jumps over the lazy dog near the river bank"


def record(doc: str = "a.txt", kind: str = "factoid", evidence: str = EVIDENCE) -> qa.QARecord:
    return qa.QARecord(id="q", doc=doc, question="?", evidence=evidence, kind=kind)


def test_hit_ignores_whitespace_differences() -> None:
    chunk = "Intro.\n\nThe quick  brown fox\njumps over the lazy dog near\tthe river bank. More."
    assert qa.is_hit(EVIDENCE, chunk)
    assert not qa.is_hit(EVIDENCE, chunk.replace("lazy", "sleepy"))


def test_evidence_quoted_from_the_rendered_page_is_a_hit_on_its_markdown() -> None:
    """Markup left a space before punctuation (`**sxid**, **aide**` read "sxid , aide"), so a question whose
    evidence was quoted from the page as a reader sees it ("sxid, aide") missed in every run."""
    from tests.conftest import FIXTURES

    markdown = (FIXTURES / "dockerfile-reference.md").read_text()
    at = markdown.index("`RUN`, `CMD`,")
    chunk = markdown[at - 200 : at + 200]
    assert qa.is_hit("RUN, CMD,", chunk)
    assert qa.is_hit("such as sxid, aide (and tripwire)", "such as **sxid**, **aide** ( **and** tripwire)")
    assert not qa.is_hit("sxid, aide", "**sxid**, **tripwire**")


def test_covered_share_counts_the_longest_contiguous_run_of_words() -> None:
    words = EVIDENCE.split()  # 13 words
    first_ten = " ".join(words[:10])
    assert qa.covered_share(EVIDENCE, f"... {first_ten}") == pytest.approx(10 / 13)
    assert qa.is_lenient_hit(EVIDENCE, f"... {first_ten}")
    assert not qa.is_lenient_hit(EVIDENCE, " ".join(words[:8]))  # 8/13 = 0.62 < 0.7
    # Words must match whole: "thequick" is not "the quick".
    assert qa.covered_share("the quick", "thequick") == 0.0


def test_judge_ranks_only_chunks_of_the_right_document() -> None:
    retrieved = [("b.txt", EVIDENCE), ("a.txt", "unrelated"), ("a.txt", "x " + EVIDENCE + " y")]
    judged = qa.judge(record(), retrieved)
    assert (judged.rank, judged.lenient_rank) == (3, 3)
    assert qa.judge(record(), retrieved[:2]).rank is None


def test_summary_recall_and_mrr_overall_and_by_kind() -> None:
    judged = [
        qa.Judged(record(kind="table"), 1, 1),
        qa.Judged(record(kind="table"), 4, 2),
        qa.Judged(record(kind="list"), None, 3),
        qa.Judged(record(kind="list"), None, None),
    ]
    s = qa.summarise(judged)
    assert s["all"] == qa.Scores(questions=4, recall=0.5, mrr=(1 + 0.25) / 4, lenient_recall=0.75)
    assert s["table"] == qa.Scores(questions=2, recall=1.0, mrr=0.625, lenient_recall=1.0)
    assert s["list"] == qa.Scores(questions=2, recall=0.0, mrr=0.0, lenient_recall=0.5)


def test_load_reads_the_corpus_format_and_reports_bad_lines(tmp_path) -> None:
    good = {"id": "d1", "doc": "x.pdf", "question": "q?", "evidence": "e", "answer": "a", "kind": "list"}
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(good) + "\n\n")
    assert qa.load(path) == [qa.QARecord("d1", "x.pdf", "q?", "e", "list", "a")]
    path.write_text(json.dumps(good) + "\n" + json.dumps({"doc": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"qa.jsonl:2: not a QA record"):
        qa.load(path)


TOKENS = st.sampled_from(["fox", "the", "x", "3.14", "a|b", "**bold**", "`code`", "e.g.", "\\|", "---", "né"])
TEXT = st.lists(st.one_of(TOKENS, st.text("ab |*\n\t", max_size=4)), max_size=12).map(" ".join)
GLUE = st.text("ab|* \n", max_size=3)  # joins the evidence to its neighbours, often inside a word


@given(evidence=TEXT, before=TEXT, after=TEXT, left=GLUE, right=GLUE, spacing=st.sampled_from([" ", "\n", "  \t"]))
def test_a_hit_is_always_a_lenient_hit(evidence, before, after, left, right, spacing) -> None:
    chunk = before + left + spacing.join(evidence.split(" ")) + right + after
    if qa.is_hit(evidence, chunk):
        assert qa.is_lenient_hit(evidence, chunk)
        assert qa.covered_share(evidence, chunk) == 1.0
    judged = qa.judge(record(evidence=evidence), [("a.txt", before), ("a.txt", chunk), ("a.txt", after)])
    assert judged.rank is None or (judged.lenient_rank is not None and judged.lenient_rank <= judged.rank)


def test_evidence_quoted_from_inside_words_is_a_hit_and_a_lenient_hit() -> None:
    chunk = "...the next section explains it"
    assert qa.is_hit("xt section expl", chunk) and qa.is_lenient_hit("xt section expl", chunk)
    summary = qa.summarise([qa.judge(record(evidence="xt section expl"), [("a.txt", chunk)])])["all"]
    assert summary.lenient_recall >= summary.recall == 1.0
