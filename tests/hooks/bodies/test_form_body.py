"""Tests for hookrunner.hooks.bodies.form: webhook's URL-encoded form body parser.

Every table marked "verified" was sent to the reference (/usr/bin/webhook 2.8.0, Go 1.19.8, mxj v2.7.0) by a
differential script: the reference's entire-payload output and its `error parsing ...` log line were
compared with these parsers' results, and every case agreed. test_bodies_reference.py re-runs a sample
of them against the binary when it is installed.
"""

from __future__ import annotations

import pytest

from hookrunner.errors import PayloadParseError
from hookrunner.golang.json import go_json_dumps
from hookrunner.hooks.bodies.form import parse_form_payload

# --- URL-encoded bodies (verified) ---

FORM_CASES: list[tuple[bytes, str | None, str | None]] = [
    (b"a=1&a=2&c&k=+x%20y", '{"a":"1","c":"","k":" x y"}', None),
    (b"k=1&&=v&=&a", '{"":"v","a":"","k":"1"}', None),
    (b"k=%C3%A9%FF", '{"k":"\u00e9\\ufffd"}', None),
    (b"", "{}", None),
    (b"&&&", "{}", None),
    (b"=", '{"":""}', None),
    (b"a==b", '{"a":"=b"}', None),
    (b"k=1&a.b=2", '{"a.b":"2","k":"1"}', None),
    (b"x=<>", '{"x":"\\u003c\\u003e"}', None),
    (b"a=%zz&k=2", None, 'error parsing form payload invalid URL escape "%zz"'),
    (b"a%zz=1&k=2", None, 'error parsing form payload invalid URL escape "%zz"'),
    (b"k=a%2", None, 'error parsing form payload invalid URL escape "%2"'),
    (b"a=%", None, 'error parsing form payload invalid URL escape "%"'),
    (b"a=%2x", None, 'error parsing form payload invalid URL escape "%2x"'),
    (b"a=%ZZ%zz", None, 'error parsing form payload invalid URL escape "%ZZ"'),
    (b"a=1;k=2", None, "error parsing form payload invalid semicolon separator in query"),
    # A `;` anywhere wins over an earlier bad escape, as in Go.
    (b"a=%zz&b;c", None, "error parsing form payload invalid semicolon separator in query"),
]


@pytest.mark.parametrize(("body", "payload", "error"), FORM_CASES)
def test_parse_form_payload(body: bytes, payload: str | None, error: str | None) -> None:
    if error is not None:
        with pytest.raises(PayloadParseError) as info:
            parse_form_payload(body)
        assert str(info.value) == error
        return
    assert go_json_dumps(parse_form_payload(body)) == payload
