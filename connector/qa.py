"""Question–evidence records and how a retrieved chunk is judged against them (`connector eval`).

Record format (one JSON object per line): id, doc (file name), question, evidence (verbatim, whitespace collapsed),
answer, kind. A chunk is a *hit* when its whitespace-normalised text contains the normalised evidence; it is a
*lenient hit* when it is a hit, or when it holds a contiguous run of at least `LENIENT_SHARE` of the evidence's words
(the evidence is mostly there, e.g. cut by a chunk boundary near its end). Every hit is a lenient hit by
construction, so lenient recall is never below recall: the word-run test alone would miss evidence quoted from
inside a word ("ex" in "next"), which the substring test accepts.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

LENIENT_SHARE = 0.7
BUDGET_CHARS = 20_000
"""Budgeted recall reads ranked chunks until this many characters: a fixed amount of context, whatever the chunk
size (k chunks of 4000 characters are five times the reading of k chunks of 800)."""


@dataclass(frozen=True, slots=True)
class QARecord:
    id: str
    doc: str
    question: str
    evidence: str
    kind: str = "other"
    answer: str = ""


def load(path: Path) -> list[QARecord]:
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            records.append(
                QARecord(
                    id=str(raw.get("id", n)),
                    doc=raw["doc"],
                    question=raw["question"],
                    evidence=raw["evidence"],
                    kind=raw.get("kind", "other"),
                    answer=raw.get("answer", ""),
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a QA record ({exc})") from exc
    return records


_MARKUP = re.compile(r"\\(?=[|*`_\\])|[|*`]")
_RULE = re.compile(r"(?<!\S):?-{3,}:?(?!\S)")  # a table's delimiter row, once its pipes are gone


_SPACE_BEFORE = re.compile(r" (?=[,.;:!?)\]}])")  # what markup left before punctuation: `**a**, b` → "a , b"
_SPACE_AFTER = re.compile(r"(?<=[(\[{]) ")


def normalise(text: str) -> str:
    """Whitespace collapsed and Markdown table/emphasis markup (pipes, escapes, delimiter rows, backticks,
    asterisks) dropped, on the evidence and the chunk alike: evidence is quoted as plain text, chunks of converted
    documents carry the Markdown that conversion wrote around the same words. No space before a punctuation mark
    or after an opening bracket: the rendered page's "sxid, aide" is the Markdown's `**sxid**, **aide**`."""
    text = " ".join(_RULE.sub(" ", _MARKUP.sub(" ", text)).split())
    return _SPACE_AFTER.sub("", _SPACE_BEFORE.sub("", text))


def is_hit(evidence: str, chunk_text: str) -> bool:
    return normalise(evidence) in normalise(chunk_text)


def covered_share(evidence: str, chunk_text: str) -> float:
    """Share of the evidence's words in the longest run of them that the chunk contains contiguously; 1.0 for a
    hit (the whole evidence is there, even where it starts or ends inside one of the chunk's words)."""
    if is_hit(evidence, chunk_text):
        return 1.0
    words = normalise(evidence).split()
    if not words:
        return 0.0
    haystack = f" {normalise(chunk_text)} "
    best = 0
    for i in range(len(words)):
        # Runs starting at i only get longer while they stay inside the chunk: extend greedily.
        j = i + best + 1
        while j <= len(words) and f" {' '.join(words[i:j])} " in haystack:
            best = j - i
            j += 1
    return best / len(words)


def is_lenient_hit(evidence: str, chunk_text: str) -> bool:
    return is_hit(evidence, chunk_text) or covered_share(evidence, chunk_text) >= LENIENT_SHARE


@dataclass(frozen=True, slots=True)
class Judged:
    """One question's outcome: the 1-based rank of the first (lenient) hit among the top k retrieved chunks, or None;
    and whether a hit lies within the first BUDGET_CHARS characters of the ranking."""

    record: QARecord
    rank: int | None
    lenient_rank: int | None
    in_budget: bool = False


def judge(record: QARecord, retrieved: Sequence[tuple[str, str]], k: int | None = None) -> Judged:
    """`retrieved` holds (document file name, chunk text) in rank order; only chunks of the record's document count.
    Ranks count among the first `k` (all when None); the budget reads chunks in order while they fit in
    BUDGET_CHARS (the first chunk always)."""
    rank = lenient = None
    in_budget = False
    used = 0
    for i, (doc, text) in enumerate(retrieved, start=1):
        used += len(text)
        within = used <= BUDGET_CHARS or i == 1
        hit = doc == record.doc and is_hit(record.evidence, text)
        in_budget = in_budget or (hit and within)
        if k is not None and i > k:
            if not within:
                break
            continue
        if doc != record.doc:
            continue
        if rank is None and hit:
            rank = i
        if lenient is None and is_lenient_hit(record.evidence, text):
            lenient = i
    return Judged(record, rank, lenient, in_budget)


@dataclass(frozen=True, slots=True)
class Scores:
    questions: int
    recall: float  # share of questions with a hit in the top k
    mrr: float  # mean of 1/rank of the first hit (0 without one)
    lenient_recall: float
    budget_recall: float = 0.0  # share of questions with a hit within the first BUDGET_CHARS characters


def summarise(judged: Iterable[Judged]) -> dict[str, Scores]:
    """Scores overall (key "all") and per kind."""
    groups: dict[str, list[Judged]] = defaultdict(list)
    for j in judged:
        groups["all"].append(j)
        groups[j.record.kind].append(j)
    return {
        kind: Scores(
            questions=len(js),
            recall=sum(j.rank is not None for j in js) / len(js),
            mrr=sum(1 / j.rank for j in js if j.rank) / len(js),
            lenient_recall=sum(j.lenient_rank is not None for j in js) / len(js),
            budget_recall=sum(j.in_budget for j in js) / len(js),
        )
        for kind, js in groups.items()
    }
