"""A rule-based English coreference resolver: good enough to tell which cuts separate a pronoun from what it
refers to, deterministic, and ~1 s for a 300-page manual (Maverick needs minutes and a GPU for that).

Mentions, sentence by sentence:
- names: runs of capitalised words ("Elon Musk", "SpaceX"), function words stripped; a single capitalised word
  opening a sentence counts only if the document also capitalises it mid-sentence (else it is just the first
  word);
- noun phrases: a determiner, up to two adjective-like words and a head ("the package", "a new version"); plural
  when the head ends in s;
- pronouns: third-person personal and possessive (he, him, his, she, her, it, its, they, them, their, ...), and
  sentence-initial demonstratives (This, That, These, Those), which refer to what the sentence before is about.

Each pronoun is linked, centering-style, to the first agreeing mention among: the mentions before it in its own
sentence (subject first), then the subject and the other mentions of each of the `WINDOW` sentences before. he/she
need a name or a person noun; it needs a singular phrase or a name; they a plural phrase or a name. Pleonastic "it"
("it is likely that", "it seems") is skipped. A pronoun joins its antecedent's cluster, so "his" after "He" still
pairs with "Elon Musk": a pair is (nearest preceding non-pronoun mention of the cluster, pronoun).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from connector.chunkers.sentences import sentence_spans
from connector.coref.base import Pair, is_english
from connector.embedders.lexical import STOP_WORDS

WINDOW = 3  # sentences back that a pronoun may reach
KEEP_TOKENS_BELOW = 200_000  # characters: a shorter text's words are found once for both passes, a longer one's twice


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


PERSONAL = _words("he him his himself she her hers herself")
NEUTER = _words("it its itself")
PLURAL = _words("they them their theirs themselves")
DEMONSTRATIVE = _words("this that these those")
PRONOUNS = PERSONAL | NEUTER | PLURAL
_CLASSES = {
    "he": _words("he him his himself"),
    "she": _words("she her hers herself"),
    "it": NEUTER,
    "they": PLURAL,
}
DETERMINERS = _words("the a an this these those")  # "that" is mostly a conjunction mid-sentence
PERSON_NOUNS = _words(
    "man woman person user author maintainer developer programmer reader writer president founder member "
    "owner administrator admin student teacher customer client people users authors maintainers developers "
    "members readers"
)
_NOT_NAMES = (
    STOP_WORDS
    | PERSONAL
    | NEUTER
    | PLURAL
    | DEMONSTRATIVE
    | _words(
        "i we you my our your when where what why how while after before however if although because since "
        "for each every all some many most any both one two see note figure table section chapter well oh yes ah "
        "indeed perhaps now here yet still thus hence only even very within without under over about through during "
        "between among across against along around behind beyond despite except inside outside toward towards upon "
        "via unlike like"
    )
)
_ADJECTIVES = _words(
    "new old first last same other main default whole next previous current good big small large simple full free "
    "high low long short early late own"
)
_ADJECTIVE_ENDINGS = ("al", "ive", "ous", "ic", "ful", "able", "ible", "less", "ary", "ent", "ant", "ing", "ed")
_VERBS = _words(
    "made make makes took take gave give meant mean became become led leads left kept let put set got brought "
    "came went saw shows shown allows ensures helps needs requires seems appears"
)
_TOKEN = re.compile(r"[^\W\d_][\w'’-]*")
_PLEONASTIC = re.compile(
    r"\s+(?:is|was|'s|’s|seems|seemed|appears|appeared|would|will|may|might|can|could|should|must|has|had|becomes)"
    r"\b[^.!?;:]{0,40}?\b(?:that|to|whether|if|how|why|when|what)\b"
    r"|\s+(?:rains|snows|follows that|turns out|takes \w+ to)\b",
    re.IGNORECASE,
)


@dataclass(slots=True)
class Mention:
    start: int
    end: int
    kind: str  # "name", "np" or "pronoun"
    plural: bool = False
    person: bool = False  # a name, or a phrase headed by a person noun
    pronoun_class: str | None = None  # on a cluster's root: he, she, it or they, fixed by its first pronoun
    cluster: list[Mention] = field(default_factory=list, repr=False)

    def root(self) -> Mention:
        return self.cluster[0] if self.cluster else self


class HeuristicCoref:
    name = "heuristic"

    def pairs(self, text: str) -> list[Pair] | None:
        if not is_english(text):
            return None
        sentences = sentence_spans(text)
        # Each sentence's words, found once for both passes over them; in a long document found again in the second
        # pass instead: a match object and a string per word of the whole text, kept between the passes, were the
        # largest thing in memory while choosing a long document's chunks (237 MB of an 8 MB text's 443 MB peak).
        kept = [_tokens(text, start, end) for start, end in sentences] if len(text) < KEEP_TOKENS_BELOW else None
        mid_caps = _mid_sentence_capitals(text, kept or (_tokens(text, a, b) for a, b in sentences))
        history: list[list[Mention]] = []
        pairs: list[Pair] = []
        for k, (start, end) in enumerate(sentences):
            sentence_tokens, sentence_words = kept[k] if kept is not None else _tokens(text, start, end)
            mentions: list[Mention] = []
            for mention in _mentions(text, sentence_tokens, sentence_words, mid_caps):
                if mention.kind == "pronoun":
                    antecedent = self._resolve(text, mention, mentions, history, start)
                    if antecedent is not None:
                        root = antecedent.root()
                        root.pronoun_class = root.pronoun_class or _class_of(text[mention.start : mention.end])
                        root.cluster = root.cluster or [root]
                        root.cluster.append(mention)
                        mention.cluster = root.cluster
                        pairs.append(Pair(root.start, root.end, mention.start, mention.end))
                mentions.append(mention)
            history.append(mentions)
            if len(history) > WINDOW:
                history.pop(0)
        return pairs

    def _resolve(
        self, text: str, pronoun: Mention, before: list[Mention], history: list[list[Mention]], sentence_start: int
    ) -> Mention | None:
        word = text[pronoun.start : pronoun.end].lower()
        if word in DEMONSTRATIVE:
            previous = history[-1] if history else []
            return previous[0] if previous and _is_entity(previous[0]) else None
        if word == "it" and _PLEONASTIC.match(text, pronoun.end):
            return None
        candidates = [m for m in before if m.kind != "pronoun" or m.cluster]
        for sentence in reversed(history):
            candidates += sentence
        for candidate in candidates:
            if (candidate.kind != "pronoun" or candidate.cluster) and _agrees(word, candidate.root()):
                return candidate
        return None


def _is_entity(mention: Mention) -> bool:
    return mention.kind != "pronoun" or bool(mention.cluster)


def _class_of(word: str) -> str | None:
    word = word.lower()
    for name, words in _CLASSES.items():
        if word in words:
            return name
    return None


def _agrees(word: str, entity: Mention) -> bool:
    if entity.kind == "pronoun":
        return False
    if entity.pronoun_class is not None and entity.pronoun_class != _class_of(word):
        return False  # "she" after "he" for the same entity: another entity
    if word in PERSONAL:
        return entity.person and not entity.plural
    if word in NEUTER:
        return not entity.plural and not (entity.kind == "np" and entity.person)
    if word in PLURAL:
        return entity.plural or entity.kind == "name"
    return False


def _tokens(text: str, start: int, end: int) -> tuple[list[re.Match], list[str]]:
    """One sentence's words: their matches and their texts."""
    found = list(_TOKEN.finditer(text, start, end))
    return found, [m.group() for m in found]


def _mid_sentence_capitals(text: str, sentences: Iterable[tuple[list[re.Match], list[str]]]) -> set[str]:
    """Capitalised words seen after the first word of a sentence: evidence that they are names."""
    seen: set[str] = set()
    for tokens, words in sentences:
        for k in range(1, len(tokens)):
            # Only after a lower-case word and plain spacing: '"Well, ...' inside a quotation is no evidence.
            word = words[k]
            if not (word[0].isupper() and words[k - 1].islower()):
                continue
            if text[tokens[k - 1].end() : tokens[k].start()] in (" ", "\n"):
                seen.add(word)
    return seen


def _mentions(text: str, tokens: list[re.Match], words: list[str], mid_caps: set[str]) -> list[Mention]:
    """The mentions among one sentence's tokens (and their texts, `words`)."""
    out: list[Mention] = []
    i = 0
    # Only a pronoun, a determiner or a capitalised word can start a mention: the others are skipped unlooked at.
    for k in [k for k, w in enumerate(words) if w[0].isupper() or w.lower() in _MENTION_STARTS]:
        if k < i:  # inside the mention just found
            continue
        i = k
        tok = tokens[i]
        word = words[i]
        lower = word.lower()
        if lower in PRONOUNS or (i == 0 and lower in DEMONSTRATIVE and _next_is_verbish(tokens, i)):
            out.append(Mention(tok.start(), tok.end(), "pronoun"))
            i += 1
            continue
        if lower in DETERMINERS:
            # determiner, up to two adjective-like words, then the head noun: "the first program"
            j = i + 1
            while (
                j < len(tokens)
                and j - i <= 2
                and _is_phrase_word(tokens[j], tokens[j - 1], text)
                and _adjective_like(words[j])
                and j + 1 < len(tokens)
                and _is_phrase_word(tokens[j + 1], tokens[j], text)
            ):
                j += 1
            if j < len(tokens) and _is_phrase_word(tokens[j], tokens[j - 1], text):
                j += 1
            if j > i + 1:
                head = words[j - 1].lower()
                plural = head.endswith("s") and not head.endswith("ss") or lower in ("these", "those")
                out.append(Mention(tok.start(), tokens[j - 1].end(), "np", plural, head in PERSON_NOUNS))
                i = j
                continue
        # A name: a capitalised word that is not sentence-initial, or is known from mid-sentence, or starts a run of
        # capitalised words (asked last: it looks at the next token, and most words are not capitalised).
        if (
            word[0].isupper()
            and lower not in _NOT_NAMES
            and (i > 0 or word in mid_caps or (i + 1 < len(tokens) and _continues_name(tokens[i + 1], tok, text)))
        ):
            j = i + 1
            while j < len(tokens) and _continues_name(tokens[j], tokens[j - 1], text):
                j += 1
            out.append(Mention(tok.start(), tokens[j - 1].end(), "name", person=True))
            i = j
    return out


_MENTION_STARTS = PRONOUNS | DEMONSTRATIVE | DETERMINERS


_NOT_PHRASE = STOP_WORDS | PLURAL


def _is_phrase_word(tok: re.Match, previous: re.Match, text: str) -> bool:
    word = tok.group()
    gap = text[previous.end() : tok.start()]
    return gap.strip() == "" and "\n\n" not in gap and word.islower() and word not in _NOT_PHRASE


def _continues_name(tok: re.Match, previous: re.Match, text: str) -> bool:
    gap = text[previous.end() : tok.start()]
    return gap in (" ", "\n") and tok.group()[0].isupper() and tok.group().lower() not in _NOT_NAMES


def _adjective_like(word: str) -> bool:
    return word.lower() in _ADJECTIVES or word.lower().endswith(_ADJECTIVE_ENDINGS)


def _next_is_verbish(tokens: list[re.Match], i: int) -> bool:
    """'This is ...' (a pronoun) rather than 'This package ...' (a determiner)."""
    if i + 1 >= len(tokens):
        return True
    nxt = tokens[i + 1].group().lower()
    if nxt in STOP_WORDS or nxt in _VERBS or nxt.endswith("ed"):
        return True
    # "This means" / "That works": a verb in -s; but "These tools": a plural noun after a plural determiner.
    singular = tokens[i].group().lower() in ("this", "that")
    return singular and nxt.endswith("s") and not nxt.endswith("ss") and nxt not in PERSON_NOUNS
