"""Log lines for people (`text`, default) or for log pipelines (`json`, one object per line); both carry the
document id and source key of every line about a document (passed by the worker as `extra`)."""

from __future__ import annotations

import json
import logging

_CONTEXT = ("document_id", "source_key")


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT if hasattr(record, k))
        return f"{line} [{context}]" if context else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **{k: getattr(record, k) for k in _CONTEXT if hasattr(record, k)},
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def formatter(kind: str) -> logging.Formatter:
    return JsonFormatter() if kind == "json" else TextFormatter()
