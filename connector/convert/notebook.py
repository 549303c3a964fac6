"""Jupyter notebooks (`.ipynb`) → Markdown: Markdown cells as they are, code cells as fenced code in the kernel's
language, and of the outputs only text, cut short (`stream`, `text/plain`, `text/markdown`, errors). Images,
HTML, JavaScript and other rich outputs are dropped: base64 PNGs were most of a notebook's text and chunks, and
they say nothing a search can find."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from connector.convert.sniff import drop_controls
from connector.errors import ConversionError

OUTPUT_MAX_CHARS = 2000
"""An output's text kept, at most: a cell's result, not a log of thousands of lines."""


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None


def convert(source: str) -> Page:
    """The notebook in `source` (nbformat 3 or 4) as Markdown; `ConversionError` if it is not one."""
    try:
        notebook = json.loads(source)
    except ValueError as exc:
        raise ConversionError(f"not a readable notebook: invalid JSON ({exc})") from exc
    if not isinstance(notebook, dict) or "nbformat" not in notebook:
        raise ConversionError("not a Jupyter notebook: JSON without 'nbformat'")
    cells = notebook.get("cells")
    if cells is None:  # nbformat 3: cells inside worksheets
        cells = [c for sheet in notebook.get("worksheets") or [] for c in sheet.get("cells") or []]
    metadata = notebook.get("metadata") or {}
    language = str((metadata.get("kernelspec") or {}).get("language") or (metadata.get("language_info") or {})
                   .get("name") or "")  # fmt: skip
    blocks: list[str] = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict):
            continue
        text = _text(cell.get("source", cell.get("input", ""))).strip("\n")
        kind = cell.get("cell_type")
        if kind in ("markdown", "heading"):
            level = cell.get("level") if kind == "heading" else None  # nbformat 3's heading cells
            blocks.append(f"{'#' * int(level)} {text}" if isinstance(level, int) and 1 <= level <= 6 else text)
        elif kind == "code":
            if text.strip():
                blocks.append(_fence(text, re.sub(r"[^\w+#-]", "", language)))
            blocks.extend(_fence(out, "text") for out in _outputs(cell.get("outputs") or []))
        elif text.strip():  # raw cells: reStructuredText, LaTeX for a converter
            blocks.append(_fence(text, ""))
    return Page(drop_controls("\n\n".join(b for b in blocks if b.strip()) + "\n"), None)


def _outputs(outputs: list) -> list[str]:
    found = []
    for output in outputs:
        if not isinstance(output, dict):
            continue
        data = output.get("data") or {}
        if output.get("output_type") == "stream" or "text" in output:
            text = _text(output.get("text", ""))
        elif output.get("output_type") == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        else:
            text = _text(data.get("text/markdown") or data.get("text/plain") or "")
        text = drop_controls(text).strip("\n")  # a stream's colours: ANSI escapes that JSON held as `\u001b`
        if text.strip():
            found.append(text if len(text) <= OUTPUT_MAX_CHARS else text[:OUTPUT_MAX_CHARS] + "\n… (output cut)")
    return found


def _text(value: object) -> str:
    """A notebook string: one string, or a list of lines (nbformat's multiline strings)."""
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _fence(text: str, language: str) -> str:
    longest = max((len(m.group(0)) for m in re.finditer(r"`{3,}|~{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"
