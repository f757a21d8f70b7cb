"""Tests for hookrunner.golang.url: Go's url.ParseQuery."""

from __future__ import annotations

from hookrunner.golang.url import go_parse_query


def test_go_parse_query_keeps_what_it_can() -> None:
    # verified: the reference's entire-query for `?a=%zz&b=1&c=2;d=3&e=%41` is {"b":"1","e":"A"}.
    values, error = go_parse_query(b"a=%zz&b=1&c=2;d=3&e=%41&b=2")
    assert values == {"b": "1", "e": "A"}
    assert error == "invalid semicolon separator in query"
    assert go_parse_query(b"a&b=") == ({"a": "", "b": ""}, None)
