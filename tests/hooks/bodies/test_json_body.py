"""Tests for hookrunner.hooks.bodies.json: webhook's JSON body parser.

Every table marked "verified" was sent to the reference (/usr/bin/webhook 2.8.0, Go 1.19.8, mxj v2.7.0) by a
differential script: the reference's entire-payload output and its `error parsing ...` log line were
compared with these parsers' results, and every case agreed. test_bodies_reference.py re-runs a sample
of them against the binary when it is installed.
"""

from __future__ import annotations

import pytest

from hookrunner.errors import PayloadParseError
from hookrunner.golang.json import go_json_dumps
from hookrunner.hooks.bodies.json import parse_json_payload

# --- JSON bodies (verified) ---

JSON_CASES: list[tuple[bytes, str | None, str | None]] = [
    (b'{"a":1.50,"b":12345678901234567890123}', '{"a":1.50,"b":12345678901234567890123}', None),
    (b'[1,{"x":"<>&"}]', '{"root":[1,{"x":"\\u003c\\u003e\\u0026"}]}', None),
    (b"  \n[]", '{"root":[]}', None),
    (b'{"a":null}', '{"a":null}', None),
    (b"null", None, None),  # Go decodes null into a nil map, without an error
    (b'{"a":1}garbage', '{"a":1}', None),
    (
        b'"x"',
        None,
        "error parsing JSON payload json: cannot unmarshal string into Go value of type map[string]interface {}",
    ),
    (
        b"1",
        None,
        "error parsing JSON payload json: cannot unmarshal number into Go value of type map[string]interface {}",
    ),
    (
        b"true",
        None,
        "error parsing JSON payload json: cannot unmarshal bool into Go value of type map[string]interface {}",
    ),
    (b"", None, "error parsing JSON payload EOF"),
    (b"  [1", None, "error parsing JSON array payload unexpected EOF"),
    (b"[1 2]", None, "error parsing JSON array payload invalid character '2' after array element"),
    (
        b"\x0b[1]",
        None,
        "error parsing JSON array payload invalid character '\\v' looking for beginning of value",
    ),
    (b'{"a" 1}', None, "error parsing JSON payload invalid character '1' after object key"),
]


@pytest.mark.parametrize(("body", "payload", "error"), JSON_CASES)
def test_parse_json_payload(body: bytes, payload: str | None, error: str | None) -> None:
    if error is not None:
        with pytest.raises(PayloadParseError) as info:
            parse_json_payload(body)
        assert str(info.value) == error
        return
    result = parse_json_payload(body)
    assert (None if result is None else go_json_dumps(result)) == payload
