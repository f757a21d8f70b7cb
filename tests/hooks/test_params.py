"""Tests for hookrunner.hooks.params: dotted lookups and Argument.Get.

Cases marked "verified" were observed on the reference (/usr/bin/webhook 2.8.0, built with Go 1.19.8):
a hook passing `entire-payload` and payload names to /usr/bin/printf with include-command-output-in-response,
plus the reference's log lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from hookrunner.errors import ParameterNodeError, ValueRetrievalError
from hookrunner.golang.json import JSONNumber, NilMap
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.params import (
    NoParametersError,
    ReplacePanicError,
    argument_value,
    get_parameter,
    replace_parameter,
)
from hookrunner.hooks.request import Request

# --- get_parameter ---

PARAMS: dict[str, Any] = {
    "a.b": "literal",
    "a": {"b": "walked", "c": {"d": "deep"}},
    "commits": [{"id": "c0"}, {"id": "c1", "files": ["f0", "f1"]}],
    "empty": [],
    "n": None,
    "s": "str",
    "nil": NilMap(),
}

GET_CASES: list[tuple[str, Any]] = [
    ("a.b", "literal"),  # verified: the literal key wins over the walk
    ("a.c.d", "deep"),
    ("a.c", {"d": "deep"}),
    ("commits.0.id", "c0"),
    ("commits.1.files.1", "f1"),
    ("commits.01.id", "c1"),  # ParseUint accepts leading zeros
    ("commits.1", {"id": "c1", "files": ["f0", "f1"]}),
    ("n", None),
    ("s", "str"),
]


@pytest.mark.parametrize(("name", "expected"), GET_CASES)
def test_get_parameter_finds(name: str, expected: Any) -> None:
    assert get_parameter(name, PARAMS) == expected


GET_MISSING: list[tuple[str, str]] = [
    ("missing", "missing"),
    ("a.x", "x"),  # the error names the rest of the path where the walk stopped
    ("commits.2.id", "2.id"),
    ("commits.-1.id", "-1.id"),
    ("commits.+1.id", "+1.id"),
    ("commits.x", "x"),
    ("commits.18446744073709551616.id", "18446744073709551616.id"),
    ("empty.0", "0"),
    ("s.x", "x"),  # verified: walking into a string is `parameter node not found: x`
    ("nil.x", "x"),
    ("commits.1.files.x", "x"),
]


@pytest.mark.parametrize(("name", "key"), GET_MISSING)
def test_get_parameter_missing_is_a_parameter_node_error(name: str, key: str) -> None:
    with pytest.raises(ParameterNodeError) as info:
        get_parameter(name, PARAMS)
    assert info.value.key == key
    assert str(info.value) == f"parameter node not found: {key}"


def test_get_parameter_into_null_is_go_plain_no_parameters_error() -> None:
    # verified: the reference answers 500 and logs `error evaluating hook: no parameters`.
    with pytest.raises(NoParametersError) as info:
        get_parameter("n.x", PARAMS)
    assert str(info.value) == "no parameters"
    assert not isinstance(info.value, ParameterNodeError)
    with pytest.raises(NoParametersError):
        get_parameter("x", None)


def test_get_parameter_on_a_top_level_list() -> None:
    assert get_parameter("1", ["a", "b"]) == "b"
    with pytest.raises(ParameterNodeError):
        get_parameter("2", ["a", "b"])


# --- replace_parameter ---


def test_replace_parameter_replaces_a_top_level_key() -> None:
    params: dict[str, Any] = {"j": "{}", "k": "x"}
    assert replace_parameter("j", params, {"x": "1"}) is True
    assert params == {"j": {"x": "1"}, "k": "x"}
    assert replace_parameter("missing", params, "v") is False
    assert "missing" not in params


def test_replace_parameter_dotted_name_panics_like_webhook() -> None:
    # verified: webhook's handler panics (type assertion) and chi answers 500 `Internal Server Error`.
    with pytest.raises(ReplacePanicError, match="interface conversion"):
        replace_parameter("j.x", {"j": {"x": "{}"}}, {})


# --- argument_value ---


def make_request(**overrides: Any) -> Request:
    fields: dict[str, Any] = {
        "id": "abc123",
        "method": "POST",
        "remote_addr": "127.0.0.1:54321",
        "content_type": "application/json",
        "body": b'{"a":{"b":"<&>"}}\xff',
        "headers": {"X-Hub-Signature": "sha1=abc", "Content-Type": "application/json"},
        "query": {"q": "1", "r": ""},
        "payload": {"a": {"b": "<&>"}, "k": JSONNumber("1.50"), "list": ["x", "y"], "n": None},
    }
    fields.update(overrides)
    return Request(**fields)


ARGUMENT_CASES: list[tuple[Argument, str]] = [
    (Argument("header", "x-hub-signature"), "sha1=abc"),
    (Argument("header", "X-HUB-SIGNATURE"), "sha1=abc"),
    (Argument("url", "q"), "1"),
    (Argument("query", "r"), ""),
    (Argument("payload", "a.b"), "<&>"),
    (Argument("payload", "a"), '{"b":"\\u003c\\u0026\\u003e"}'),
    (Argument("payload", "k"), "1.50"),
    (Argument("payload", "list.1"), "y"),
    (Argument("payload", "list"), '["x","y"]'),
    (Argument("payload", "n"), "<nil>"),
    (Argument("string", "literal value"), "literal value"),
    (Argument("raw-request-body"), '{"a":{"b":"<&>"}}\udcff'),
    (Argument("request", "method"), "POST"),
    (Argument("request", "Remote-Addr"), "127.0.0.1:54321"),
    (Argument("entire-payload"), '{"a":{"b":"\\u003c\\u0026\\u003e"},"k":1.50,"list":["x","y"],"n":null}'),
    (Argument("entire-headers"), '{"Content-Type":"application/json","X-Hub-Signature":"sha1=abc"}'),
    (Argument("entire-query"), '{"q":"1","r":""}'),
]


@pytest.mark.parametrize(("arg", "value"), ARGUMENT_CASES)
def test_argument_value(arg: Argument, value: str) -> None:
    assert argument_value(arg, make_request()) == value


def test_argument_value_without_a_payload() -> None:
    # verified: with no payload entire-payload is `null` and a payload name is not found.
    req = make_request(payload=None)
    assert argument_value(Argument("entire-payload"), req) == "null"
    with pytest.raises(ParameterNodeError):
        argument_value(Argument("payload", "a"), req)
    empty = make_request(headers={}, query={})
    assert argument_value(Argument("entire-headers"), empty) == "{}"
    assert argument_value(Argument("entire-query"), empty) == "{}"


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (Argument("request", "path"), 'unsupported request key: "path"'),
        (Argument("request", 'a"b'), 'unsupported request key: "a\\"b"'),
        (Argument("nowhere", "x"), "no source for value retrieval"),
        (Argument("", "x"), "no source for value retrieval"),
    ],
)
def test_argument_value_plain_errors(arg: Argument, message: str) -> None:
    with pytest.raises(ValueRetrievalError) as info:
        argument_value(arg, make_request())
    assert str(info.value) == message


def test_argument_value_missing_names() -> None:
    req = make_request()
    with pytest.raises(ParameterNodeError):
        argument_value(Argument("header", "X-Missing"), req)
    with pytest.raises(ParameterNodeError):
        argument_value(Argument("url", "missing"), req)
    with pytest.raises(NoParametersError):
        argument_value(Argument("payload", "n.x"), req)
