"""The one place that knows the running settings' secrets and scrubs them from whatever the process prints.

`register(settings)` records every `SecretStr` value of the settings and, for the DSN, every form its password can
take in a message: as libpq parses it, and as a person meant it when the DSN is malformed (the userinfo of a URL
split at the first or the last `@`, a `password=` pair read up to the next `key=`), raw, percent-decoded, quoted.
`scrub(text)` replaces each of them, then anything that looks like a DSN password (`scheme://user:…@`,
`password=…`), with `***`. The CLI applies it to every log record (`SecretFilter`), every error it prints, and
uncaught exceptions (`excepthook`, `threading_excepthook`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterable
from urllib.parse import unquote

from pydantic import BaseModel, SecretStr

MASK = "***"

_lock = threading.Lock()
_known: tuple[str, ...] = ()  # longest first, so that a secret containing another is replaced whole

_URL_PASSWORD = re.compile(r"(?i)(\bpostgres(?:ql)?://[^:/?#@\s]*:)[^@\s]*@")
_PAIR_PASSWORD = re.compile(r"""(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'"]+)""")
_URL = re.compile(r"^\s*postgres(?:ql)?://(.*)$", re.IGNORECASE | re.DOTALL)
# A `password=` pair as libpq reads it (quoted, or up to a space or `&`) and as meant (up to the next `key=`).
_PAIR_VALUES = (
    re.compile(r"""(?i)\b(?:ssl)?password\s*=\s*'((?:[^'\\]|\\.)*)'?"""),
    re.compile(r"""(?i)\b(?:ssl)?password\s*=\s*([^\s&'][^\s&]*)"""),
    re.compile(r"""(?i)\b(?:ssl)?password\s*=\s*([^\s'].*?)\s*(?=\s\w+\s*=|&|$)""", re.DOTALL),
)


def dsn_secrets(dsn: str) -> set[str]:
    """Every string that is, or may be, the DSN's password, parsable or not."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    found: set[str] = set()
    malformed = False
    try:
        params = conninfo_to_dict(dsn)
    except ProgrammingError:
        params, malformed = {}, True
    parsed = {str(v) for k, v in params.items() if k.endswith("password") and v}  # password, sslpassword
    if m := _URL.match(dsn):
        rest = m.group(1).partition("?")[0]
        first, last = rest.find("@"), rest.rfind("@")
        if first != last:  # an unencoded '@': what libpq parsed is a fragment, masking it would garble the text
            parsed = {v for v in parsed if len(v) >= 3}
    found.update(parsed)
    if m:
        for end in {first, last} - {-1}:
            user, colon, password = rest[:end].partition(":")
            if colon and len(password) >= 3:  # shorter fragments would mask every letter they match
                found.add(password)
        malformed = malformed or first != last
    for pattern in _PAIR_VALUES:
        found.update(v for v in pattern.findall(dsn) if v)
    for value in list(found):
        found.add(unquote(value, errors="replace"))
        found.add(value.replace("\\'", "'").replace("\\\\", "\\"))
    if malformed:
        # libpq echoes pieces of a malformed DSN ("missing '=' after 'cr3t'"): those pieces are secret too.
        for value in list(found):
            found.update(piece for piece in re.split(r"[\s@&]+", value) if len(piece) >= 3)
    return {v for v in found if v}


def _secret_values(model: BaseModel) -> Iterable[str]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, SecretStr):
            yield value.get_secret_value()
        elif isinstance(value, BaseModel):
            yield from _secret_values(value)


def register(settings: BaseModel) -> None:
    """Remember the secrets of these settings (added to those already known: a process may build several)."""
    dsn = getattr(settings, "dsn", None)
    if isinstance(dsn, SecretStr):
        # The DSN's secret is its password; the rest (user, host, database) is shown, redacted, in messages.
        add(*dsn_secrets(dsn.get_secret_value()))
    add(*(value for value in _secret_values(settings) if dsn is None or value != dsn.get_secret_value()))


def add(*values: str) -> None:
    global _known
    forms: set[str] = set()
    for value in values:
        if not value:
            continue
        # As printed by repr() or json.dumps(), a secret with a quote or backslash looks different.
        forms.update({value, repr(value)[1:-1], json.dumps(value)[1:-1]})
    with _lock:
        _known = tuple(sorted(set(_known) | {f for f in forms if f}, key=len, reverse=True))


def scrub(text: str) -> str:
    """`text` without any known secret, nor anything shaped like a DSN's password."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    return _PAIR_PASSWORD.sub(rf"\1{MASK}", text)


def one_line(text: str) -> str:
    """Scrubbed, on one line (libpq's messages carry a tab-indented hint on a second line)."""
    return re.sub(r"\s*\n\s*", " ", scrub(text)).strip()


class SecretFilter(logging.Filter):
    """Scrubs a record in place (message, arguments, traceback) before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        for key in ("document_id", "source_key"):
            if isinstance(getattr(record, key, None), str):
                setattr(record, key, scrub(getattr(record, key)))
        return True


def excepthook(exc_type, exc, tb) -> None:
    """An uncaught exception, printed as Python would but scrubbed (locals are never printed)."""
    sys.stderr.write(scrub("".join(traceback.format_exception(exc_type, exc, tb))))
    sys.stderr.flush()


def threading_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    sys.stderr.write(scrub(f"Exception in thread {name}:\n{text}"))
    sys.stderr.flush()


def install() -> None:
    """Scrub uncaught exceptions (main thread and others) and what logging's last-resort handler prints."""
    sys.excepthook = excepthook
    if threading.excepthook is threading.__excepthook__:  # keep a hook someone else installed on purpose
        threading.excepthook = threading_excepthook
    if logging.lastResort is not None and not any(isinstance(f, SecretFilter) for f in logging.lastResort.filters):
        logging.lastResort.addFilter(SecretFilter())
