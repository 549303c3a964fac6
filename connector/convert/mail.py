"""E-mail (`.eml`, RFC 5322 with MIME) → Markdown, with the standard library's `email` package: the Subject as
heading and title, From/To/Date, the text body (the plain-text part, else the HTML part through the HTML
reader), and the attachments named, never inlined: a base64 GIF was nine tenths of a message's text."""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage
from typing import cast

from connector.convert import html
from connector.convert.sniff import drop_controls

HEADERS = ("From", "To", "Cc", "Date")


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None


def convert(data: bytes) -> Page:
    message = cast(EmailMessage, email.message_from_bytes(data, policy=email.policy.default))  # the default policy's
    subject = " ".join(str(message.get("Subject", "") or "").split())
    blocks = [f"# {subject}"] if subject else []
    header_lines = [f"{name}: {' '.join(str(message[name]).split())}" for name in HEADERS if message[name]]
    if header_lines:
        blocks.append("\n".join(header_lines))
    body = message.get_body(preferencelist=("plain", "html"))
    if body is not None:
        text = _content(body)
        blocks.append(html.convert(text).markdown if body.get_content_subtype() == "html" else text)
    names = []
    for part in message.iter_attachments():
        name = part.get_filename() or "(unnamed)"
        names.append(f"- {name} ({part.get_content_type()})")
    if names:
        blocks.append("Attachments:\n\n" + "\n".join(names))
    markdown = drop_controls("\n\n".join(b.strip("\n") for b in blocks if b.strip()) + "\n")
    return Page(markdown, subject or None)


def _content(part: EmailMessage) -> str:
    """A text part's text, in its declared charset; bytes no charset can read are replaced, not fatal."""
    try:
        return str(part.get_content())
    except (LookupError, UnicodeError, ValueError):
        payload = part.get_payload(decode=True)
        payload = payload if isinstance(payload, bytes) else b""
        try:
            return payload.decode(part.get_content_charset() or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            return payload.decode("utf-8", errors="replace")
