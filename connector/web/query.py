"""A search request over HTTP, checked: `GET /search?q=…` parameters or a `POST /search` JSON body become one
`SearchRequest`, or a `BadRequest` whose message says what to send instead. The results go back as JSON."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from connector.search import FILTER_SHAPE, Result, check_request

MAX_K = 1000
"""The most hits one request may ask for (the SQL function ranks `max(4 k, 40)` candidates per ranking)."""

MAX_CONTEXT = 20
"""The most neighbours on each side of a hit that one request may join into its passage."""

DEFAULT_K = 10
MODES = ("hybrid", "vector")
GET_PARAMETERS = ("q", "k", "mode", "filter", "context")
POST_FIELDS = ("query", "k", "hybrid", "filter", "context")
_FILTER_SHAPE = FILTER_SHAPE


class BadRequest(ValueError):
    """The request cannot be searched as sent (answered 400, with this message)."""


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    k: int = DEFAULT_K
    hybrid: bool = True
    filter: dict = dataclasses.field(default_factory=dict)
    context: int = 0

    @property
    def mode(self) -> str:
        return "hybrid" if self.hybrid else "vector"


def from_query_string(params: Mapping[str, str]) -> SearchRequest:
    """`?q=…&k=10&mode=hybrid|vector&filter=<JSON object>&context=0`."""
    _no_unknown(params, GET_PARAMETERS, "parameter")
    query = _question(params.get("q"), "q")
    k = _integer(params.get("k"), "k", DEFAULT_K, 1, MAX_K)
    mode = params.get("mode", "hybrid")
    if mode not in MODES:
        raise BadRequest(f"mode must be hybrid or vector, not {mode[:100]!r}")
    raw_filter = params.get("filter") or "{}"
    try:
        filter_ = json.loads(raw_filter)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"filter is not JSON ({exc}): {_FILTER_SHAPE}") from None
    context = _integer(params.get("context"), "context", 0, 0, MAX_CONTEXT)
    return _checked(SearchRequest(query, k, mode == "hybrid", _object(filter_), context))


def from_body(body: bytes) -> SearchRequest:
    """`{"query": str, "k": int, "hybrid": bool, "filter": {...}, "context": int}`; only `query` is required."""
    try:
        fields = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f'the body is not JSON ({exc}): send {{"query": "…", "k": 10}}') from None
    if not isinstance(fields, dict):
        raise BadRequest('the body must be a JSON object: {"query": "…", "k": 10}')
    _no_unknown(fields, POST_FIELDS, "field")
    query = _question(fields.get("query"), "query")
    k = _json_integer(fields.get("k", DEFAULT_K), "k", 1, MAX_K)
    hybrid = fields.get("hybrid", True)
    if not isinstance(hybrid, bool):
        raise BadRequest(f"hybrid must be true or false, not {json.dumps(hybrid)[:100]}")
    filter_ = _object({} if fields.get("filter") is None else fields["filter"])
    context = _json_integer(fields.get("context", 0), "context", 0, MAX_CONTEXT)
    return _checked(SearchRequest(query, k, hybrid, filter_, context))


def response(request: SearchRequest, results: list[Result]) -> dict:
    """Every field of each hit (new columns of `connector.search()` appear by themselves), and its passage."""
    return {
        "query": request.query,
        "k": request.k,
        "mode": request.mode,
        "results": [
            {**dataclasses.asdict(r.hit), "passage": dataclasses.asdict(r.passage) if r.passage else None}
            for r in results
        ],
    }


def _question(value, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        shown = "missing" if value is None else "empty" if isinstance(value, str) else "not a string"
        raise BadRequest(f"{name} is {shown}: say what to look for, in words")
    return value


def _object(value) -> dict:
    if not isinstance(value, dict):
        raise BadRequest(f"filter must be a JSON object, not {json.dumps(value)[:100]}: {_FILTER_SHAPE}")
    return value


def _checked(request: SearchRequest) -> SearchRequest:
    try:
        check_request(request.query, request.filter)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return request


def _integer(value: str | None, name: str, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    # NOTE: not int() alone: it also takes "1_000", other scripts' digits, and chokes on 5000 of them.
    if not re.fullmatch(r"\s*-?[0-9]{1,9}\s*", value) or not low <= int(value) <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}, not {value[:100]!r}")
    return int(value)


def _json_integer(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:  # JSON true is an int
        raise BadRequest(f"{name} must be an integer from {low} to {high}, not {json.dumps(value)[:100]}")
    return value


def _no_unknown(given: Mapping, known: tuple[str, ...], what: str) -> None:
    if unknown := sorted(set(given) - set(known)):
        raise BadRequest(f"unknown {what} {unknown[0]!r}: the {what}s are {', '.join(known)}")
