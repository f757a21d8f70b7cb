"""Tests for hookrunner.golang.json: Go-compatible JSON decoding and encoding.

Cases marked "verified" were observed on the reference (/usr/bin/webhook 2.8.0, built with Go 1.19.8):
a hook passing `entire-payload` and payload names to /usr/bin/printf with include-command-output-in-response,
plus the reference's log lines.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hookrunner.golang.json import (
    _UNCERTAIN,
    GoJSONError,
    JSONNumber,
    NilMap,
    _Decoder,
    _loads_fast,
    decode_json_map,
    go_json_dumps,
    loads_json,
)

# --- decoding ---

# (input, value as re-encoded by go_json_dumps); verified: the reference's entire-payload for each body.
DECODE_CASES: list[tuple[bytes, str]] = [
    (b'{"a":1.50,"b":12345678901234567890123}', '{"a":1.50,"b":12345678901234567890123}'),
    (b'{"a":-0.0e-5}', '{"a":-0.0e-5}'),
    (b'{"a":1}garbage', '{"a":1}'),  # a Decoder reads only the first value
    (b'{"a":1}{"b":2}', '{"a":1}'),
    (b'{"a":1,"a":2}', '{"a":2}'),  # the last duplicate key wins
    (b'{"a":"\\ud800"}', '{"a":"\ufffd"}'),  # a lone surrogate escape becomes U+FFFD
    (b'{"a":"\\ud83dx"}', '{"a":"\ufffdx"}'),
    (b'{"a":"\\ud83d\\ude00"}', '{"a":"\U0001f600"}'),
    (b'{"a":"\xff\xe2\x82A"}', '{"a":"\ufffd\ufffd\ufffdA"}'),  # each bad byte is one U+FFFD
    (b'{"a":"\\u00e9\\/"}', '{"a":"\u00e9/"}'),
    (b'{"a":[],"b":{},"c":[[]]}', '{"a":[],"b":{},"c":[[]]}'),
    (b' \t\r\n[1, "x" , true,false ,null]', '[1,"x",true,false,null]'),
    (b'1x', "1"),  # trailing bytes after a complete top-level value are never examined
    (b'"s"', '"s"'),
]


@pytest.mark.parametrize(("data", "encoded"), DECODE_CASES)
def test_loads_json_decodes_as_go(data: bytes, encoded: str) -> None:
    assert go_json_dumps(loads_json(data)) == encoded


# verified: the reference logs each of these after `error parsing JSON payload `.
DECODE_ERRORS: list[tuple[bytes, str]] = [
    (b"", "EOF"),
    (b"   ", "EOF"),
    (b'{"a":', "unexpected EOF"),
    (b"tru", "unexpected EOF"),
    (b"-", "unexpected EOF"),
    (b"1e+", "unexpected EOF"),
    (b'{"a" 1}', "invalid character '1' after object key"),
    (b"{1}", "invalid character '1' looking for beginning of object key string"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    (b"[1,]", "invalid character ']' looking for beginning of value"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b"trux", "invalid character 'x' in literal true (expecting 'e')"),
    (b'{"a":tru}', "invalid character '}' in literal true (expecting 'e')"),
    (b'"\\u12x"', "invalid character 'x' in \\u hexadecimal character escape"),
    (b'{"a":"x\\y"}', "invalid character 'y' in string escape code"),
    (b'{"a":"\x01"}', "invalid character '\\x01' in string literal"),
    (b"1.x", "invalid character 'x' after decimal point in numeric literal"),
    (b"-x", "invalid character 'x' in numeric literal"),
    (b"1ex", "invalid character 'x' in exponent of numeric literal"),
    (b'{"a":01}', "invalid character '1' after object key:value pair"),
    (b"\x0b[1]", "invalid character '\\v' looking for beginning of value"),
    (b'\xef\xbb\xbf{"a":1}', "invalid character '\u00ef' looking for beginning of value"),
    (b"'x'", "invalid character '\\'' looking for beginning of value"),
]


@pytest.mark.parametrize(("data", "message"), DECODE_ERRORS)
def test_loads_json_rejects_with_go_messages(data: bytes, message: str) -> None:
    with pytest.raises(GoJSONError) as info:
        loads_json(data)
    assert str(info.value) == message


def test_numbers_keep_their_literal_text() -> None:
    value = loads_json(b'{"n":1.50,"big":12345678901234567890123,"e":1E+2}')
    assert value == {"n": "1.50", "big": "12345678901234567890123", "e": "1E+2"}
    assert all(isinstance(v, JSONNumber) for v in value.values())


def test_deep_nesting_is_accepted_up_to_go_limit() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    value = loads_json(deep)
    depth = 0
    while value:
        value, depth = value[0], depth + 1
    assert depth == 4999
    with pytest.raises(GoJSONError, match="exceeded max depth"):
        loads_json(b"[" * 10001)


def test_str_input_is_decoded_like_bytes() -> None:
    assert loads_json('{"é":"ü"}') == {"é": "ü"}


# verified: json.Decoder into map[string]interface{}, as the reference logs it.
@pytest.mark.parametrize(
    ("data", "kind"), [(b'"x"', "string"), (b"1", "number"), (b"true", "bool"), (b"[1]", "array")]
)
def test_decode_json_map_rejects_non_objects(data: bytes, kind: str) -> None:
    with pytest.raises(GoJSONError) as info:
        decode_json_map(data)
    assert str(info.value) == f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"


def test_decode_json_map_null_is_a_nil_map() -> None:
    value = decode_json_map(b"null")
    assert isinstance(value, NilMap) and value == {}
    assert decode_json_map(b'{"a":"b"}') == {"a": "b"}


# --- encoding ---

ENCODE_CASES: list[tuple[Any, str]] = [
    ({"b": "1", "a": "2", "B": "3", "é": "4", "_": "5"}, '{"B":"3","_":"5","a":"2","b":"1","é":"4"}'),
    ("<&>", '"\\u003c\\u0026\\u003e"'),
    ("\u2028\u2029", '"\\u2028\\u2029"'),
    ("\x00\x01\x1f\x7f", '"\\u0000\\u0001\\u001f\x7f"'),
    ("\b\f\n\r\t", '"\\u0008\\u000c\\n\\r\\t"'),  # verified: Go 1.19 has no \b \f short escapes
    ('"\\/', '"\\"\\\\/"'),
    ("\udcff", '"\\ufffd"'),  # a byte that was not UTF-8
    (None, "null"),
    (NilMap(), "null"),
    ({"m": NilMap()}, '{"m":null}'),
    (True, "true"),
    (False, "false"),
    (JSONNumber("1.50"), "1.50"),
    (JSONNumber(""), "0"),
    (7, "7"),
    (1.5, "1.5"),
    (1e21, "1e+21"),
    (1e-7, "1e-7"),
    (123456789.0, "123456789"),
    ([], "[]"),
    ({}, "{}"),
    (["a", ["b", {"c": None}]], '["a",["b",{"c":null}]]'),
    (("t", 1), '["t",1]'),
]


@pytest.mark.parametrize(("value", "encoded"), ENCODE_CASES)
def test_go_json_dumps(value: Any, encoded: str) -> None:
    assert go_json_dumps(value) == encoded


# --- the C fast path agrees with the exact decoder (json._loads_fast) ---


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (JSONNumber is not str) and the same key order."""
    pending = [(a, b)]  # a loop, not recursion: the cases nest deeper than Python's recursion limit
    while pending:
        x, y = pending.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):
                return False
            pending += [(x[k], y[k]) for k in x]
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            pending += list(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


_FUZZ_STRINGS = ["", "x", "é", "\u2028", "\U0001f600", "a\\b", 'q"q', "\x00\x1f", "/", "\ufeff", "\ufffd"]
_FUZZ_NUMBERS = ["0", "-0", "1", "-12", "1.50", "-0.0e-5", "1E+2", "2e-3", "12345678901234567890123" * 3]
_FUZZ_PIECES = [
    b"\\", b'"', b"\\u", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\u00e9", b"\\/", b"\\x", b"\xff",
    b"\xed\xa0\x80", b"\xc3", b"\xef\xbb\xbf", b"NaN", b"Infinity", b"-Infinity", b"\x00", b"\t", b" ",
    b"\x0b", b"{", b"}", b"[", b"]", b",", b":", b"01", b"1.", b"1e", b"-", b"true", b"nul", b"\n",
]


def _fuzz_value(rng: Any, depth: int) -> str:
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return json.dumps(rng.choice(_FUZZ_STRINGS) * rng.randrange(1, 3), ensure_ascii=rng.random() < 0.3)
    if kind == 1:
        return rng.choice(_FUZZ_NUMBERS)
    if kind == 2:
        return rng.choice(["true", "false", "null"])
    if kind == 3:
        return json.dumps(rng.choice(_FUZZ_STRINGS), ensure_ascii=False)
    space = rng.choice(["", " ", "\n\t", "\r\n  "])
    items = [_fuzz_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 4:
        return "[" + space + ("," + space).join(items) + "]"
    keys = [json.dumps(rng.choice(_FUZZ_STRINGS + ["a", "a", "b"]), ensure_ascii=False) for _ in items]
    return "{" + space + ",".join(f"{k}{space}:{v}" for k, v in zip(keys, items, strict=True)) + "}"


def _fuzz_inputs(count: int) -> list[bytes]:
    import random

    rng = random.Random(20261122)
    inputs = []
    for _ in range(count):
        text = rng.choice(["", " ", "\n"]) + _fuzz_value(rng, 0) + rng.choice(["", " \n", "x"])
        data = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(rng.choice([0, 0, 1, 2, 3])):  # mutations: insert, delete, replace, cut
            at = rng.randrange(len(data) + 1)
            action = rng.randrange(4)
            if action == 0:
                data[at:at] = rng.choice(_FUZZ_PIECES)
            elif action == 1:
                del data[at : at + rng.randrange(1, 3)]
            elif action == 2:
                data[at : at + 1] = rng.choice(_FUZZ_PIECES)
            else:
                del data[at:]
        inputs.append(bytes(data))
    return inputs


def _exact(data: bytes) -> tuple[bool, Any]:
    try:
        return True, _Decoder(data).decode()
    except GoJSONError as exc:
        return False, str(exc)


@pytest.mark.parametrize(
    "data",
    [d for d, _ in DECODE_CASES]
    + [
        b"", b" ", b"NaN", b"[NaN]", b"-Infinity", b'"\\ud800"', b'"\\\\ud800"', b'"\\uDBFF\\uDFFF"',
        b"\xef\xbb\xbf{}", b'{"a":1} ', b'{"a":1} x', b"01", b"1.", b"-", b'"\x01"', b'"\xed\xa0\x80"',
        b"[" * 2000 + b"]" * 2000, b'{"a":' * 1500 + b"1" + b"}" * 1500, b'"' + "é\U0001f600".encode() + b'"',
        b"1" * 5000, b"\x0b1",
        b'{"a":1}\xff', b'[1,2]x"\\ud800', b'"abc"garbage', b'{"a":1}{', b"1x", b"1.5e", b"truex",
        b'\n {"a":[0,0]}]]', b'{"a":"\xff"}x',
    ],
)
def test_fast_path_agrees_with_exact_decoder_on_edge_cases(data: bytes) -> None:
    ok, exact = _exact(data)
    fast = _loads_fast(data)
    if fast is not _UNCERTAIN:
        assert ok and _same(fast, exact)
    if ok:
        assert _same(loads_json(data), exact)
    else:
        with pytest.raises(GoJSONError) as caught:
            loads_json(data)
        assert str(caught.value) == exact


def test_fast_path_agrees_with_exact_decoder_on_generated_inputs() -> None:
    answered = 0
    for data in _fuzz_inputs(4000):
        ok, exact = _exact(data)
        fast = _loads_fast(data)
        if fast is not _UNCERTAIN:
            answered += 1
            assert ok and _same(fast, exact), data
        if ok:
            assert _same(loads_json(data), exact), data
        else:
            with pytest.raises(GoJSONError) as caught:
                loads_json(data)
            assert str(caught.value) == exact, data
    assert answered > 1000  # the fast path is actually exercised


@pytest.mark.parametrize("data", [b'{"a":[0,0,0]}x', b'[1]\xff\xfe', b'"s"\\ud800', b' {"b":{}} }'])
def test_a_value_followed_by_anything_is_read_by_the_c_decoder(data: bytes) -> None:
    """Go's decoder never reads past the first value, so trailing garbage must not cost the exact
    decoder's time (a 25 MiB object with one byte after it took 20 s; issue 21)."""
    assert _loads_fast(data) is not _UNCERTAIN


def test_go_json_dumps_nests_deeper_than_the_recursion_limit() -> None:
    # Go encodes what it decoded (JSON to 10000 levels, XML without a limit); a recursive encoder failed
    # at about 1000 levels and the hook answered 500 where the reference answers 200.
    depth = 20000
    nested: Any = "x"
    for _ in range(depth):
        nested = {"b": [nested], "a": 1}
    assert go_json_dumps(nested) == '{"a":1,"b":[' * depth + '"x"' + "]}" * depth
    assert go_json_dumps([[[]], {}, [{"<": None}]]) == '[[[]],{},[{"\\u003c":null}]]'


@pytest.mark.parametrize(
    "body", [b"[0, 0, 1.5, 1.5, -7, -7, 1234, 1234]", b'[0, 0, 1.5, 1.5, -7, -7, 1234, 1234, "\xff"]']
)
def test_short_numbers_are_shared_long_ones_are_not(body: bytes) -> None:
    """A number of three characters or fewer is one object however often it comes (a body of zeros took 44
    times its size); the C decoder and the exact one (bad UTF-8 sends the body there) alike."""
    values = loads_json(body)
    assert values[:8] == ["0", "0", "1.5", "1.5", "-7", "-7", "1234", "1234"]
    assert all(type(v) is JSONNumber for v in values[:8])
    assert values[0] is values[1] and values[2] is values[3] and values[4] is values[5]
    assert values[6] is not values[7]
    assert loads_json(b"[0]")[0] is values[0]
