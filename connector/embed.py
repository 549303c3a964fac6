"""Embedding stage: only the winner's chunks are embedded, with their page range and heading path attached.

What the model reads is the chunk under a heading line made from the `embed_template` setting (e.g. the document's
title and the chunk's section path), so a chunk that says "the fee is 40 EUR" is found by a question that names
the section it sits in; the stored text is the chunk alone. Each model window keeps its own vector and its span in
the document (a chunk longer than the model's input is several windows), so search can rank a chunk by its best
window.

A chunk that starts inside a table, below its header row, is read under that header row too (`table_header`): a
long table's rows, cut from their header by a chunker, still say what each column is (which value is the "body mass"
a question asks about). The stored text is unchanged, so offsets stay exact.
"""

from __future__ import annotations

from connector.embedders import Embedder
from connector.embedders.base import Embeddings
from connector.models import Candidate, Chunk, Document, EmbeddedChunk, EmbeddedWindow
from connector.visible import visible

HEADING_SEPARATOR = " › "


def embed_winner(
    document: Document, winner: Candidate, embedder: Embedder, template: str, title: str | None
) -> tuple[EmbeddedChunk, ...]:
    texts, prefixes = winner_texts(document, winner, template, title)
    return attach(document, winner, embedder.embed(texts), prefixes)


def winner_texts(
    document: Document, winner: Candidate, template: str, title: str | None
) -> tuple[list[str], list[int]]:
    """What the model reads for each of the winner's chunks, and the length of the heading before each chunk."""
    paths = [document.section_path_at(c.start) for c in winner.chunks]
    prefixes = [
        heading_prefix(template, title, path) + table_header(document, c.start)
        for path, c in zip(paths, winner.chunks, strict=True)
    ]
    texts = [
        p + c.text + suffix(template, title, path) for p, c, path in zip(prefixes, winner.chunks, paths, strict=True)
    ]
    return texts, [len(p) for p in prefixes]


def attach(document: Document, winner: Candidate, result: Embeddings, prefixes: list[int]) -> tuple[EmbeddedChunk, ...]:
    """The winner's chunks with their vectors (`result`, one row per text of `winner_texts`), windows and places."""
    return tuple(
        EmbeddedChunk(
            ordinal=i,
            chunk=c,
            embedding=result.vectors[i],
            page_start=document.page_at(c.start),
            page_end=document.page_at(c.end - 1),
            section_path=document.section_path_at(c.start),
            windows=tuple(_in_document(w, c, prefixes[i]) for w in result.window_spans[i]),
            chunk_type=chunk_type(document, c),
        )
        for i, c in enumerate(winner.chunks)
    )


def heading_prefix(template: str, title: str | None, section_path: tuple[str, ...]) -> str:
    """The template's part before `{text}`, filled in; empty when there is nothing to say (no title, no section)."""
    section_path = _shown(section_path)
    if not (title or section_path):
        return ""
    return _fill(template.split("{text}", 1)[0], title, section_path)


def suffix(template: str, title: str | None, section_path: tuple[str, ...]) -> str:
    """The template's part after `{text}`, filled in likewise."""
    section_path = _shown(section_path)
    if not (title or section_path):
        return ""
    return _fill(template.split("{text}", 1)[1], title, section_path)


def _shown(section_path: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(p for p in section_path if visible(p))  # a heading of zero-width spaces says nothing


def _fill(part: str, title: str | None, section_path: tuple[str, ...]) -> str:
    section = HEADING_SEPARATOR.join(section_path)
    heading = HEADING_SEPARATOR.join(p for p in (title or "", section) if p)
    return part.format(title=title or "", section=section, heading=heading)


def _in_document(window, chunk: Chunk, prefix_len: int) -> EmbeddedWindow:
    """A window's span in the embedded text → its span in the document (the heading prefix is not in it)."""
    start, end = document_span(window.start, window.end, chunk.start, chunk.end, prefix_len)
    return EmbeddedWindow(start, end, window.vector)


def document_span(start: int, end: int, chunk_start: int, chunk_end: int, prefix_len: int) -> tuple[int, int]:
    size = chunk_end - chunk_start
    a = min(max(start - prefix_len, 0), size)
    b = min(max(end - prefix_len, a), size)
    return chunk_start + a, chunk_start + b


def table_header(document: Document, offset: int) -> str:
    """The header and delimiter rows of the table a chunk starting at `offset` starts in, when the chunk does not
    hold them itself; "" otherwise."""
    block = document.block_at(offset)
    if block is None or block.kind != "table" or offset < block.start:
        return ""
    table = document.markdown[block.start : min(block.end, block.start + HEADER_WINDOW)]
    return header_rows(table, block.start, offset)


HEADER_WINDOW = 64 * 1024
"""Characters of a table read for its header rows: a header row longer than that is not repeated."""


def header_rows(table: str, table_start: int, offset: int) -> str:
    """The first two lines of `table` (a table block's text from `table_start` on; blank lines before it skipped),
    ending with a newline, when a chunk starting at `offset` does not start with them; "" otherwise. Shared by the
    writer and by `reembed`, whose stored chunks give the table's start and text from the database."""
    lead = len(table) - len(table.lstrip("\n"))
    lines = table[lead:].split("\n", 2)
    if len(lines) < 3:
        return ""
    return f"{lines[0]}\n{lines[1]}\n" if offset > table_start + lead else ""


def embedding_text(
    template: str, title: str | None, section_path: tuple[str, ...], text: str, table_head: str = ""
) -> tuple[str, int]:
    """What the model reads for a stored chunk (under `table_head`, its table's header rows, if it starts in a
    table below them), and the length of the heading before its text."""
    prefix = heading_prefix(template, title, section_path) + table_head
    return prefix + text + suffix(template, title, section_path), len(prefix)


_TYPE_BY_KIND = {"table": "table", "list": "list", "code": "code"}


def chunk_type(document: Document, chunk) -> str:
    """text, table, list or code: the kind of the blocks holding most of the chunk's characters."""
    share: dict[str, int] = {}
    for block in document.blocks:
        if block.end <= chunk.start:
            continue
        if block.start >= chunk.end:
            break
        kind = _TYPE_BY_KIND.get(block.kind, "text")
        share[kind] = share.get(kind, 0) + min(block.end, chunk.end) - max(block.start, chunk.start)
    return max(share, key=share.get) if share else "text"
