"""Log lines for people (`text`, default) or for log pipelines (`json`, one object per line); both carry the
document id and source key of every line about a document (passed by the worker as `extra`). Neither ever carries
a secret of the running settings: `handler()` scrubs every record (`connector.secrets.SecretFilter`), and both
formatters scrub what they write."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterator

from connector.secrets import SecretFilter, scrub

_CONTEXT = ("document_id", "source_key")
# The document this thread works on, for lines logged by code that does not know it (a converter saying a PDF is
# damaged, in a pool process): `about()` sets it, every handler's `_DocumentFilter` adds it to the record.
_document: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar("document", default=None)


@contextlib.contextmanager
def about(document_id: int, source_key: str) -> Iterator[None]:
    token = _document.set({"document_id": document_id, "source_key": source_key})
    try:
        yield
    finally:
        _document.reset(token)


class _DocumentFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_document.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


# Control characters (a newline in a file name would forge a log line), line separators, and the surrogates that
# stand for the undecodable bytes of a non-UTF-8 file name (they cannot even be written to a UTF-8 stream).
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with every character that could break or forge a log line escaped as `repr` writes it (`\\n`,
    `\\x1b`, `\\udcff`): the one helper for file names and source keys in log lines and messages."""
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], text)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        # One record, one line: what a message interpolates (file names, errors) cannot start another line; a
        # traceback, appended after this by format(), keeps its lines.
        return printable(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(f"{k}={printable(str(getattr(record, k)))}" for k in _CONTEXT if hasattr(record, k))
        return scrub(f"{line} [{context}]" if context else line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub(record.getMessage()),
            **{k: getattr(record, k) for k in _CONTEXT if hasattr(record, k)},
        }
        if record.exc_info or record.exc_text:
            entry["exception"] = scrub(record.exc_text or self.formatException(record.exc_info))
        return json.dumps(entry, default=lambda v: scrub(str(v)))


def formatter(kind: str) -> logging.Formatter:
    return JsonFormatter() if kind == "json" else TextFormatter()


def handler(kind: str) -> logging.Handler:
    """The stderr handler of every command: scrubbed records, in the configured format."""
    out = logging.StreamHandler(sys.stderr)
    out.addFilter(_DocumentFilter())
    out.addFilter(SecretFilter())
    out.setFormatter(formatter(kind))
    return out
