"""webhook's URL-encoded form body parser (Go's url.ParseQuery, the first value of each key)."""

from __future__ import annotations

from typing import Any

from hookrunner.errors import PayloadParseError
from hookrunner.golang.url import go_parse_query

__all__ = ["parse_form_payload"]


def parse_form_payload(body: bytes) -> dict[str, Any]:
    """webhook's ParseFormPayload: the first value of each key; any error Go reports drops the payload."""
    values, error = go_parse_query(body)
    if error is not None:
        raise PayloadParseError(f"error parsing form payload {error}")
    return dict(values)
