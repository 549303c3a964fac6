"""LLM-guided regex splitting (algorithm-spec §2): an LLM reads the first ~8000 tokens and answers with one Python
regex that marks where chunks start; the pattern then splits the whole document.

Ours: the pattern runs under a hard time limit (the `regex` module's timeout: a catastrophically backtracking
pattern must not hang a worker); an invalid, missing or timed-out pattern degrades to one chunk for the whole
document, which the oversize guard re-splits, and the reason is recorded with the candidate; patterns are cached
on disk by content hash, so a document is sent to the endpoint once; any OpenAI-compatible endpoint works.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import regex

from connector import tokens
from connector.chunkers.base import Split, make_chunk
from connector.errors import NotApplicable
from connector.models import Document
from connector.settings import LLMSettings

ANSWER = re.compile(r"<regex>\s*(.+?)\s*</regex>", re.IGNORECASE | re.DOTALL)

PROMPT = """# Task
You split documents into chunks for retrieval. Read the beginning of a document and write the single best
delimiter for it: one regular expression, valid for Python's `re` module, that matches at the start of every chunk.

# Output
Answer with the pattern only, inside <regex>...</regex>. No explanation.

# Guidelines
- The pattern must be valid and must work on the whole document, not only on this beginning.
- Each chunk should be self-contained: a section, a clause, an entry.
- Never split inside a table, a figure, a paragraph, or a list of short items.
- Never separate a title from its text, or a footnote from the text it belongs to.

# Example
Input:
Article 1. Scope
This regulation applies to ...
Article 2. Definitions
For the purposes of ...

Answer:
<regex>(?m)^Article \\d+\\.</regex>

# Document (beginning)
"""


@dataclass(frozen=True)
class LLMRegexChunker:
    llm: LLMSettings
    encoding: str
    name: str = "llm_regex"

    @property
    def params(self) -> dict:
        return {"model": self.llm.model, "context_tokens": self.llm.context_tokens}

    def split(self, document: Document) -> Split:
        if not self.llm.base_url:
            raise NotApplicable("no LLM endpoint configured (CONNECTOR_LLM_BASE_URL)")
        text = document.markdown
        pattern = self._pattern(text)
        notes: dict = {"regex": pattern}
        cuts: list[int] = []
        if pattern is None:
            notes["fallback"] = "the model returned no <regex>...</regex>"
        elif "\x00" in pattern or not _storable(pattern):
            # A NUL or a lone surrogate (a reply's JSON may escape one: `\ud800`) is in no text or jsonb Postgres
            # takes: kept as it was, the pattern failed the whole document, every try (the reply is cached).
            notes["regex"] = pattern.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
            notes["fallback"] = "invalid pattern: it holds a NUL or a lone surrogate"
        else:
            try:
                cuts = sorted({m.start() for m in regex.finditer(pattern, text, timeout=self.llm.regex_timeout)})
            except TimeoutError:
                notes["fallback"] = f"the pattern ran longer than {self.llm.regex_timeout} s"
            except (regex.error, ValueError) as exc:
                notes["fallback"] = f"invalid pattern: {exc}"
        bounds = [0, *(c for c in cuts if 0 < c < len(text)), len(text)]
        chunks = [make_chunk(text, a, b, self.encoding) for a, b in zip(bounds, bounds[1:], strict=False)]
        return Split([c for c in chunks if c is not None], notes)

    def _pattern(self, text: str) -> str | None:
        key = hashlib.sha256(f"{self.llm.model}\n{text}".encode()).hexdigest()
        cached = self.llm.cache_dir / f"{key}.json"
        if cached.exists():
            return json.loads(cached.read_text())["regex"]
        answer = self._ask(_beginning(text, self.llm.context_tokens, self.encoding))
        match = ANSWER.search(answer or "")
        pattern = match.group(1) if match else None
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(json.dumps({"regex": pattern, "answer": answer}))
        tmp.replace(cached)
        return pattern

    def _ask(self, beginning: str) -> str:
        from openai import OpenAI

        key = self.llm.api_key.get_secret_value() if self.llm.api_key else "unused"
        client = OpenAI(base_url=self.llm.base_url, api_key=key, timeout=self.llm.timeout, max_retries=1)
        try:
            response = client.chat.completions.create(
                model=self.llm.model,
                temperature=0,
                messages=[{"role": "user", "content": PROMPT + beginning}],
            )
        finally:
            client.close()
        return response.choices[0].message.content or ""


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _beginning(text: str, budget: int, encoding: str) -> str:
    """Whole lines from the start of `text` up to `budget` tokens."""
    lines = text.splitlines(keepends=True)
    counts = tokens.count_many(lines, encoding)
    used, kept = 0, []
    for line, n in zip(lines, counts, strict=True):
        if used + n > budget and kept:
            break
        kept.append(line)
        used += n
    return "".join(kept)
