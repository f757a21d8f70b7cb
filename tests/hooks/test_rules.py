"""Trigger rules: decoding from a hooks file and evaluation, checked against webhook 2.8.0's behaviour.

Cases marked "verified" were run against the reference binary (/usr/bin/webhook 2.8.0, Go 1.19.8) with a
small hooks file and curl, and the answers and log lines below are what it gave.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import io
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gc_support import hookrunner_garbage

from hookrunner.errors import HookrunnerError, HooksFileError, ParameterNodeError, RuleError, SignatureError
from hookrunner.golang.time import parse_scalr_date
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.request import Request
from hookrunner.hooks.rules import (
    AndRule,
    EmptyRule,
    MatchRule,
    NotRule,
    OrRule,
    Rule,
    extract_signatures,
    go_string,
    parse_rule,
)


def make_request(
    *,
    query: dict[str, Any] | None = None,
    headers: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
    body: bytes = b"",
    remote_addr: str = "127.0.0.1:54321",
    soft: bool = False,
) -> Request:
    return Request(
        id="abc123",
        method="POST",
        remote_addr=remote_addr,
        content_type="application/json",
        body=body,
        headers=headers or {},
        query=query or {},
        payload=payload,
        allow_signature_errors=soft,
    )


def rule(data: dict[str, Any]) -> Rule:
    parsed = parse_rule(data)
    assert parsed is not None
    return parsed


def url_match(kind: str, name: str = "a", **fields: Any) -> dict[str, Any]:
    return {"match": {"type": kind, "parameter": {"source": "url", "name": name}, **fields}}


def sign(body: bytes, secret: str = "s", digest: Any = hashlib.sha256) -> str:
    return hmac.new(secret.encode(), body, digest).hexdigest()


# --- decoding --------------------------------------------------------------------------------------------


def test_no_rule_is_none() -> None:
    assert parse_rule(None) is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, False),  # verified: `trigger-rule: {}` -> "Hook rules were not satisfied."
        ({"and": []}, True),  # verified: an empty and is satisfied
        ({"or": []}, False),  # verified
        ({"not": {}}, True),  # verified: not of an empty rule
        ({"and": None, "match": {"type": "value", "value": "", "parameter": {"source": "string"}}}, True),
        ({"and": [None]}, False),  # a null element is an empty rule
        ({"match": None}, False),
        ({"not": None}, False),
    ],
)
def test_structural_rules(data: dict[str, Any], expected: bool) -> None:
    assert rule(data).check(make_request()) == (expected, None)


def test_first_set_field_wins_in_go_order() -> None:
    # Go's Rules.Evaluate looks at and, or, not, match in that order, whatever the key order.
    data = {"match": {"type": "value", "value": "x"}, "or": [], "and": [{}]}
    parsed = rule(data)
    assert isinstance(parsed, AndRule)
    assert parsed == AndRule((EmptyRule(),))
    assert isinstance(rule({"not": {}, "or": [{"and": []}]}), OrRule)
    assert isinstance(rule({"match": {}, "not": {}}), NotRule)


def test_keys_match_ignoring_case() -> None:
    # verified: AND / Match / TYPE / Value / Parameter / SOURCE / NAME all decode.
    data = {"AND": [{"Match": {"TYPE": "value", "Value": "x", "Parameter": {"SOURCE": "url", "NAME": "a"}}}]}
    parsed = rule(data)
    assert parsed == AndRule((MatchRule(type="value", value="x", parameter=Argument("url", "a")),))
    assert parsed.evaluate(make_request(query={"a": "x"})) is True
    assert rule({"match": {"IP-Range": "10.0.0.0/8", "type": "ip-whitelist"}}) == MatchRule(
        type="ip-whitelist", ip_range="10.0.0.0/8"
    )


def test_case_variants_merge_like_encoding_json() -> None:
    # verified: `Match: {type: value, parameter: ...}` plus `match: {value: m}` is one merged rule;
    # ghodss/yaml sorts the keys, so `Match` is decoded first and `match` merges into it.
    data = {"match": {"value": "m"}, "Match": {"type": "value", "parameter": {"source": "url", "name": "a"}}}
    assert rule(data) == MatchRule(type="value", value="m", parameter=Argument("url", "a"))
    # Lists decode into the existing elements too.
    data = {"and": [{"match": {"value": "v"}}], "AND": [{"match": {"type": "value"}}, {}]}
    assert rule(data) == AndRule((MatchRule(type="value", value="v"),))
    # A later null clears a pointer field but leaves a string field alone.
    assert rule({"Match": {"type": "value"}, "match": None}) == EmptyRule()
    assert rule({"match": {"Type": "regex", "type": None}}).describe().startswith("match regex")


def test_unknown_keys_are_ignored() -> None:
    assert rule({"match": {"type": "value", "value": "1", "comment": [1, 2]}, "note": "x"}) == MatchRule(
        type="value", value="1"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # verified (YAML and JSON hooks files): each value matched only the query value shown.
        (1, "1"),
        (True, "true"),
        (False, "false"),
        (1.0, "1"),
        (1000000.0, "1e+06"),
        (100000.0, "100000"),
        (12345678.0, "1.2345678e+07"),
        (3.14159265358979, "3.1415927"),  # printed as a float32
        (0.1, "0.1"),
        (0.5, "0.5"),
        (-0.0, "-0"),
        (123456.7, "123456.7"),
        (0.00001, "1e-05"),
        (123456789012345678901234, "1.2345679e+23"),  # beyond uint64: read as a float
        (18446744073709551615, "18446744073709551615"),
        (-9223372036854775809, "-9.223372e+18"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
        (None, ""),
        ("text", "text"),
    ],
)
def test_go_string(value: Any, expected: str) -> None:
    assert go_string(value) == expected


def test_go_string_rejects_objects() -> None:
    with pytest.raises(
        HooksFileError, match=r"cannot unmarshal array into Go struct field X\.y of type string"
    ):
        go_string([1], "X.y")


def test_scalar_fields_are_coerced() -> None:
    data = {"match": {"type": "value", "value": 1.0, "secret": 12, "parameter": {"source": "url", "name": 7}}}
    assert rule(data) == MatchRule(type="value", value="1", secret="12", parameter=Argument("url", "7"))
    data = {"match": {"parameter": {"base64decode": True, "envname": False}}}
    assert rule(data) == MatchRule(parameter=Argument(envname="false", base64decode=True))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # verified: the reference's load error, after its "error unmarshaling JSON: " prefix.
        (
            {"and": "x"},
            "cannot unmarshal string into Go struct field Rules.trigger-rule.and of type hook.AndRule",
        ),
        (
            {"match": "x"},
            "cannot unmarshal string into Go struct field Rules.trigger-rule.match of type hook.MatchRule",
        ),
        (
            {"match": {"value": [1]}},
            "cannot unmarshal array into Go struct field MatchRule.trigger-rule.match.value of type string",
        ),
        (
            {"match": {"parameter": {"base64decode": "true"}}},
            "cannot unmarshal string into Go struct field Argument.trigger-rule.match.parameter.base64decode "
            "of type bool",
        ),
        (
            {"or": ["x"]},
            "cannot unmarshal string into Go struct field Rules.trigger-rule.or of type hook.Rules",
        ),
        (
            {"not": [1]},
            "cannot unmarshal array into Go struct field Rules.trigger-rule.not of type hook.NotRule",
        ),
        (
            {"match": {"value": {"a": 1}}},
            "cannot unmarshal object into Go struct field MatchRule.trigger-rule.match.value of type string",
        ),
        (
            {"match": {"parameter": "x"}},
            "cannot unmarshal string into Go struct field MatchRule.trigger-rule.match.parameter "
            "of type hook.Argument",
        ),
        (
            {"and": [{"not": {"match": 5}}]},
            # verified: inside a `not` the struct is a NotRule
            "cannot unmarshal number into Go struct field NotRule.trigger-rule.and.not.match "
            "of type hook.MatchRule",
        ),
        (
            {"or": [{"and": [{"match": {"parameter": {"name": [1]}}}]}]},
            "cannot unmarshal array into Go struct field Argument.trigger-rule.or.and.match.parameter.name "
            "of type string",
        ),
        (
            {"match": {"type": "value", "Type": [1]}},  # verified: keys are decoded in sorted order
            "cannot unmarshal array into Go struct field MatchRule.trigger-rule.match.type of type string",
        ),
    ],
)
def test_wrong_types_fail_like_encoding_json(data: dict[str, Any], message: str) -> None:
    with pytest.raises(HooksFileError) as info:
        parse_rule(data)
    assert str(info.value) == "json: " + message


def test_rule_itself_must_be_an_object() -> None:
    with pytest.raises(HooksFileError, match="into Go struct field Hook.trigger-rule of type hook.Rules"):
        parse_rule(["x"])  # type: ignore[arg-type]


# --- and / or / not ------------------------------------------------------------------------------------


MISSING = url_match("value", name="missing", value="x")
TRUE = {"match": {"type": "value", "value": "t", "parameter": {"source": "string", "name": "t"}}}
FALSE = {"match": {"type": "value", "value": "f", "parameter": {"source": "string", "name": "t"}}}
BAD_SIGNATURE = {
    "match": {"type": "payload-hmac-sha1", "secret": "s", "parameter": {"source": "string", "name": "00"}}
}
NO_SECRET = {"match": {"type": "payload-hmac-sha1", "parameter": {"source": "string", "name": "00"}}}


@pytest.mark.parametrize(
    ("data", "soft", "ok", "error"),
    [
        ({"and": [TRUE, TRUE]}, False, True, None),
        ({"and": [TRUE, FALSE]}, False, False, None),
        ({"and": [FALSE, BAD_SIGNATURE]}, False, False, None),  # short-circuits before the error
        ({"and": [TRUE, MISSING]}, False, False, ParameterNodeError),
        ({"and": [TRUE, BAD_SIGNATURE]}, True, False, SignatureError),  # verified: soft failures only in or
        ({"or": [MISSING, TRUE]}, False, True, None),  # a missing value just moves on
        ({"or": [MISSING, FALSE]}, False, False, None),
        ({"or": [FALSE, TRUE]}, False, True, None),
        ({"or": [BAD_SIGNATURE, TRUE]}, False, False, SignatureError),
        ({"or": [BAD_SIGNATURE, TRUE]}, True, True, None),  # verified: soft failure, next clause decides
        ({"or": [BAD_SIGNATURE, FALSE]}, True, False, None),  # verified
        ({"or": [NO_SECRET, TRUE]}, True, False, RuleError),  # not a signature error: never soft
        ({"not": TRUE}, False, False, None),
        ({"not": FALSE}, False, True, None),
        # verified: `not` over a missing value is true *with* the error; webhook logs
        # "parameter node not found: a" and still triggers the hook.
        ({"not": MISSING}, False, True, ParameterNodeError),
        ({"or": [{"not": MISSING}, FALSE]}, False, True, None),  # verified: triggered
        ({"and": [{"not": MISSING}]}, False, False, ParameterNodeError),
        ({"not": {"not": MISSING}}, False, False, ParameterNodeError),
        ({"and": [{"or": [MISSING, {"and": [TRUE, {"not": FALSE}]}]}, TRUE]}, False, True, None),
    ],
)
def test_combinators(data: dict[str, Any], soft: bool, ok: bool, error: type[Exception] | None) -> None:
    result, err = rule(data).check(make_request(soft=soft))
    assert result is ok
    if error is None:
        assert err is None
    else:
        assert isinstance(err, error)


def test_evaluate_raises_the_error() -> None:
    with pytest.raises(ParameterNodeError, match="parameter node not found: missing"):
        rule({"and": [MISSING]}).evaluate(make_request())
    assert rule({"or": [MISSING, TRUE]}).evaluate(make_request()) is True


def test_evaluate_raises_without_a_reference_cycle() -> None:
    import weakref

    gc.disable()
    try:
        with pytest.raises(ParameterNodeError) as caught:
            rule({"and": [MISSING]}).evaluate(make_request())
        gone = weakref.ref(caught.value)
        del caught
        assert gone() is None, "the error stayed alive in a cycle with the frame that raised it"
    finally:
        gc.enable()


# --- match: value and regex ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "query", "expected"),
    [
        ({"type": "value", "value": "abc"}, {"a": "abc"}, True),
        ({"type": "value", "value": "abc"}, {"a": "abcd"}, False),
        ({"type": "value", "value": ""}, {"a": ""}, True),
        ({"type": "value", "value": "héllo"}, {"a": "héllo"}, True),
        ({"type": "regex", "regex": "^v[0-9]+$"}, {"a": "v12"}, True),
        ({"type": "regex", "regex": "b"}, {"a": "abc"}, True),  # unanchored search
        ({"type": "regex", "regex": "^b"}, {"a": "abc"}, False),
        ({"type": "regex", "regex": "(?i)ABC"}, {"a": "xabcx"}, True),
        ({"type": "regex", "regex": "^a.c$"}, {"a": "a\udcffc"}, True),  # a stray byte reads as U+FFFD
        ({"type": "regex", "regex": r"\pL+"}, {"a": "héllo"}, True),
        ({"type": "regex", "regex": "^refs/heads/(master|main)$"}, {"a": "refs/heads/main"}, True),
        ({"type": "bogus"}, {"a": "1"}, False),  # verified: an unknown type is simply false
        ({"type": "Value", "value": "1"}, {"a": "1"}, False),  # types are case-sensitive
    ],
)
def test_value_and_regex(match: dict[str, Any], query: dict[str, Any], expected: bool) -> None:
    data = {"match": {**match, "parameter": {"source": "url", "name": "a"}}}
    assert rule(data).check(make_request(query=query)) == (expected, None)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        # Go 1.19's regexp messages (the reference logs "error evaluating hook: <message>"; verified for "(").
        ("(", "missing closing ): `(`"),
        ("a**", "invalid nested repetition operator: `**`"),
        ("*a", "missing argument to repetition operator: `*`"),
        ("[a", "missing closing ]: `[a`"),
        ("[z-a]", "invalid character class range: `z-a`"),
        (r"\8", r"invalid escape sequence: `\8`"),
        ("a{2,1}", "invalid repeat count: `{2,1}`"),
        ("(?P<n", "invalid named capture: `(?P<n`"),
        ("(?<n>a)", "invalid or unsupported Perl syntax: `(?<`"),  # RE2 accepts this, Go 1.19 does not
        ("(?<=a)b", "invalid or unsupported Perl syntax: `(?<`"),
        ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
        (r"\C", r"invalid escape sequence: `\C`"),  # RE2 accepts this too
        ("a\\", "trailing backslash at end of expression: ``"),
        (")", "unexpected ): `)`"),
        # Which error Go reports first (checked against Go 1.19 over 14,000 random patterns).
        ("a**\\C", "invalid nested repetition operator: `**`"),
        ("\\C(", "invalid escape sequence: `\\C`"),
        (")(?<n>", "unexpected ): `)(?<n>`"),
        ("x{2}{1001}", "invalid repeat count: `{1001}`"),
        ("x*{2,1}", "invalid repeat count: `{2,1}`"),
        ("x{1001}?", "invalid repeat count: `{1001}`"),
        ("(\\pL{1000}){10}", "invalid repeat count: `{10}`"),
        ("(?s(?<n>", "invalid or unsupported Perl syntax: `(?s(`"),
    ],
)
def test_bad_regex_fails_when_evaluated(pattern: str, message: str) -> None:
    parsed = rule(url_match("regex", regex=pattern))
    ok, err = parsed.check(make_request(query={"a": "x"}))
    assert ok is False
    assert isinstance(err, RuleError)
    assert str(err) == "error parsing regexp: " + message
    # verified: with the parameter missing the regex is never compiled, so the rule is just false.
    ok, err = parsed.check(make_request())
    assert ok is False and isinstance(err, ParameterNodeError)


def test_go_syntax_that_re2_also_accepts() -> None:
    for pattern in [
        r"\Q*\E",
        "[[:alpha:]]+",
        "(?P<n>a)",
        "a{,3}",
        "[]a]",
        r"x\Q(?<\E",
        r"\p{^L}{1000}",
        "[(?<]",
    ]:
        assert rule(url_match("regex", regex=pattern)).check(make_request(query={"a": "x"}))[1] is None


def test_missing_source_is_a_hard_error() -> None:
    # verified: `match: {type: bogus}` (no parameter) answers 500 "no source for value retrieval".
    ok, err = rule({"match": {"type": "bogus"}}).check(make_request())
    assert ok is False
    assert isinstance(err, HookrunnerError) and not isinstance(err, ParameterNodeError)
    assert str(err) == "no source for value retrieval"


def test_a_failed_rule_leaves_no_cycle_for_the_collector() -> None:
    """The request handler keeps a failed rule's error (Go's pair): as a raised exception's traceback it held
    the rule's frames and, through them, the handler's own, which held the error: a cycle per request
    with its request in it (18,000 objects left by 4,000 requests on the gevent worker)."""
    missing = rule({"and": [url_match("value", value="x"), url_match("value", name="b", value="y")]})
    bad_signature = rule(url_match("payload-hmac-sha256", secret="s"))

    def handle(checked: Rule, req: Request) -> str:
        ok, error = checked.check(req)
        return f"{ok} {error}"

    def both() -> None:
        assert handle(missing, make_request(query={"a": "x"})) == "False parameter node not found: b"
        assert handle(bad_signature, make_request(query={"a": "00"}, body=b"{}")).startswith("False invalid")

    assert hookrunner_garbage(both) == []


def test_payload_parameter() -> None:
    data = {
        "match": {"type": "value", "value": "main", "parameter": {"source": "payload", "name": "ref.name"}}
    }
    assert rule(data).check(make_request(payload={"ref": {"name": "main"}})) == (True, None)
    ok, err = rule(data).check(make_request(payload=None))
    assert ok is False and isinstance(err, ParameterNodeError)


# --- match: payload signatures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "prefix", "expected"),
    [
        ("abc", "sha1=", ["abc"]),
        ("sha1=abc", "sha1=", ["abc"]),
        ("sha256=abc", "sha1=", ["sha256=abc"]),  # no comma: only the expected prefix is removed
        ("sha1=a,sha1=b", "sha1=", ["a", "b"]),
        ("sha1=a,b,sha256=c", "sha1=", ["a"]),  # with commas, parts without the prefix are dropped
        ("a,b", "sha1=", []),
        ("sha1=a, sha1=b", "sha1=", ["a"]),  # no trimming: " sha1=b" lacks the prefix
    ],
)
def test_extract_signatures(source: str, prefix: str, expected: list[str]) -> None:
    assert extract_signatures(source, prefix) == expected


@pytest.mark.parametrize(
    ("kind", "digest", "prefix"),
    [
        ("payload-hmac-sha1", hashlib.sha1, "sha1="),
        ("payload-hmac-sha256", hashlib.sha256, "sha256="),
        ("payload-hmac-sha512", hashlib.sha512, "sha512="),
    ],
)
def test_hmac_signatures(kind: str, digest: Any, prefix: str) -> None:
    body = b'{"a": 1}'
    good = sign(body, digest=digest)
    parsed = rule(
        {"match": {"type": kind, "secret": "s", "parameter": {"source": "header", "name": "x-sig"}}}
    )

    def outcome(header: str, payload: bytes = body) -> tuple[bool, Exception | None]:
        return parsed.check(make_request(headers={"X-Sig": header}, body=payload))

    assert outcome(good) == (True, None)
    assert outcome(prefix + good) == (True, None)
    assert outcome(f"{prefix}0000,{prefix}{good}") == (True, None)  # any one of several may match
    assert outcome(f"{good},{prefix}0000")[0] is False  # with commas the prefix is required
    ok, err = outcome(prefix + "abc,xyz")
    assert ok is False and isinstance(err, SignatureError)
    assert str(err) == "invalid payload signatures [abc]"
    ok, err = outcome("nope")
    assert str(err) == "invalid payload signatures [nope]"


def test_empty_body_with_right_signature() -> None:
    # verified: POST with no body and X-Sig: sha256=<hmac of ""> triggers the hook.
    parsed = rule(
        {
            "match": {
                "type": "payload-hmac-sha256",
                "secret": "s",
                "parameter": {"source": "header", "name": "X-Sig"},
            }
        }
    )
    assert parsed.check(make_request(headers={"X-Sig": "sha256=" + sign(b"")})) == (True, None)
    ok, err = parsed.check(make_request(headers={"X-Sig": "sha256=abc,sha256=def"}))
    # verified: "error evaluating hook: invalid payload signatures [abc def] on empty payload"
    assert ok is False and str(err) == "invalid payload signatures [abc def] on empty payload"


def test_signature_errors_from_the_reference() -> None:
    parsed = rule(
        {
            "match": {
                "type": "payload-hmac-sha256",
                "secret": "s",
                "parameter": {"source": "header", "name": "X-Sig"},
            }
        }
    )
    # verified: "sha256=abc,foo" with body "z" -> "invalid payload signatures [abc]"; "abc,def" -> "[]".
    assert str(parsed.check(make_request(headers={"X-Sig": "sha256=abc,foo"}, body=b"z"))[1]) == (
        "invalid payload signatures [abc]"
    )
    assert str(parsed.check(make_request(headers={"X-Sig": "abc,def"}, body=b"z"))[1]) == (
        "invalid payload signatures []"
    )


def test_empty_secret() -> None:
    # verified: "error evaluating hook: signature validation secret can not be empty" (500).
    parsed = rule(
        {"match": {"type": "payload-hmac-sha256", "parameter": {"source": "header", "name": "X-Sig"}}}
    )
    ok, err = parsed.check(make_request(headers={"X-Sig": "a"}))
    assert ok is False and isinstance(err, RuleError)
    assert str(err) == "signature validation secret can not be empty"


@pytest.mark.parametrize(
    ("kind", "line"),
    [
        # verified: exact text, logged without a request id, before the signature is checked.
        (
            "payload-hash-sha1",
            "warn: use of deprecated option payload-hash-sha1; use payload-hmac-sha1 instead",
        ),
        (
            "payload-hash-sha256",
            "warn: use of deprecated option payload-hash-sha256: use payload-hmac-sha256 instead",
        ),
        (
            "payload-hash-sha512",
            "warn: use of deprecated option payload-hash-sha512: use payload-hmac-sha512 instead",
        ),
    ],
)
def test_deprecated_hash_types(kind: str, line: str, log_lines: io.StringIO) -> None:
    digest = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}[
        kind.rsplit("-", 1)[1]
    ]
    parsed = rule(
        {"match": {"type": kind, "secret": "s", "parameter": {"source": "header", "name": "X-Sig"}}}
    )
    assert parsed.check(make_request(headers={"X-Sig": sign(b"x", digest=digest)}, body=b"x")) == (True, None)
    ok, err = parsed.check(make_request(headers={"X-Sig": "abc"}, body=b"x"))
    assert ok is False and str(err) == "invalid payload signatures [abc]"
    lines = log_lines.getvalue().splitlines()
    assert len(lines) == 2
    for logged in lines:
        assert re.fullmatch(r"\[webhook\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d " + re.escape(line), logged)


# --- match: ip-whitelist ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ip_range", "remote", "expected"),
    [
        ("127.0.0.1", "127.0.0.1:5", True),
        ("127.0.0.2", "127.0.0.1:5", False),
        ("10.0.0.0/8", "10.20.30.40:5", True),
        ("10.0.0.0/8", "11.0.0.1:5", False),
        ("  10.0.0.0/8 \t 127.0.0.0/24 ", "127.0.0.99:5", True),  # verified: any range, spaces around
        ("0.0.0.0/0", "[::1]:5", False),  # families never mix
        ("::/0", "127.0.0.1:5", False),
        ("::1", "[::1]:5", True),  # verified
        ("::1", "127.0.0.1:5", False),  # verified
        ("0:0:ffff::5", "[::1]:5", True),  # verified: a bare IPv6 address means /32, a whole network
        ("0:0:0:1::", "[::1]:5", True),  # verified
        ("0:1::", "[::1]:5", False),
        ("127.0.0.1", "[::1]:5", False),  # verified
        ("2001:db8::/32", "[2001:db8:1::7]:443", True),
        ("127.0.0.1", "[::ffff:127.0.0.1]:5", True),  # a v4-mapped peer is an IPv4 peer
        ("::ffff:127.0.0.0/104", "127.0.0.1:5", True),  # and a v4-mapped network an IPv4 one
        ("10.0.0.0/08", "10.1.1.1:5", True),  # Go accepts leading zeros in the prefix length
        ("127.0.0.1 bad/99", "127.0.0.1:5", True),  # verified: ranges after a match are never parsed
    ],
)
def test_ip_whitelist(ip_range: str, remote: str, expected: bool) -> None:
    parsed = rule({"match": {"type": "ip-whitelist", "ip-range": ip_range}})
    assert parsed.check(make_request(remote_addr=remote)) == (expected, None)


@pytest.mark.parametrize(
    ("ip_range", "remote", "message"),
    [
        ("10.0.0.0/33", "127.0.0.1:5", "invalid CIDR address: 10.0.0.0/33"),  # verified
        ("bad 127.0.0.1", "127.0.0.1:5", "invalid CIDR address: bad/32"),  # verified
        ("127.0.0.01", "127.0.0.1:5", "invalid CIDR address: 127.0.0.01/32"),
        ("fe80::1%eth0", "127.0.0.1:5", "invalid CIDR address: fe80::1%eth0/32"),
        ("10.0.0.0/+8", "127.0.0.1:5", "invalid CIDR address: 10.0.0.0/+8"),
        ("::/129", "[::1]:5", "invalid CIDR address: ::/129"),
        ("127.0.0.1", "@", "invalid IP address found in remote address '@'"),
        ("127.0.0.1", "::1", "invalid IP address found in remote address '::1'"),  # no port, no brackets
        ("127.0.0.1", "[fe80::1%eth0]:5", "invalid IP address found in remote address '[fe80::1%eth0]:5'"),
    ],
)
def test_ip_whitelist_errors(ip_range: str, remote: str, message: str) -> None:
    ok, err = rule({"match": {"type": "ip-whitelist", "ip-range": ip_range}}).check(
        make_request(remote_addr=remote)
    )
    assert ok is False and isinstance(err, RuleError)
    assert str(err) == message


def test_ip_whitelist_ignores_parameter() -> None:
    data = {
        "match": {
            "type": "ip-whitelist",
            "ip-range": "127.0.0.1",
            "parameter": {"source": "url", "name": "x"},
        }
    }
    assert rule(data).check(make_request()) == (True, None)


# --- match: scalr-signature ------------------------------------------------------------------------------


def scalr_headers(when: float, body: bytes = b"body", secret: str = "s") -> dict[str, str]:
    date = time.strftime("%a %d %b %Y %H:%M:%S UTC", time.gmtime(when))
    signature = hmac.new(secret.encode(), body + date.encode(), hashlib.sha1).hexdigest()
    return {"X-Signature": signature, "Date": date}


SCALR = {"match": {"type": "scalr-signature", "secret": "s"}}


@pytest.mark.parametrize(
    ("offset", "expected"),
    [(0, True), (-290, True), (290, True), (-320, False), (320, False), (-86400, False)],
)
def test_scalr_window(offset: int, expected: bool) -> None:
    # verified: -299 s triggered, -302 s gave "invalid payload signature outdated".
    ok, err = rule(SCALR).check(make_request(headers=scalr_headers(time.time() + offset), body=b"body"))
    assert ok is expected
    if expected:
        assert err is None
    else:
        assert isinstance(err, SignatureError) and str(err) == "invalid payload signature outdated"


def test_scalr_edges() -> None:
    now = time.time()
    # Without either header the rule is simply false (verified: "Hook rules were not satisfied.").
    headers = scalr_headers(now)
    assert rule(SCALR).check(make_request(headers={"X-Signature": headers["X-Signature"]})) == (False, None)
    assert rule(SCALR).check(make_request(headers={"Date": headers["Date"]})) == (False, None)
    # A wrong signature (verified: "invalid payload signature a").
    ok, err = rule(SCALR).check(make_request(headers={"X-Signature": "a", "Date": "x"}))
    assert ok is False and isinstance(err, SignatureError) and str(err) == "invalid payload signature a"
    # The body is part of what is signed.
    ok, err = rule(SCALR).check(make_request(headers=scalr_headers(now, body=b"other"), body=b"body"))
    assert isinstance(err, SignatureError)
    # An empty key is a hard error.
    ok, err = rule({"match": {"type": "scalr-signature"}}).check(make_request(headers=headers, body=b"body"))
    assert str(err) == "signature validation signing key can not be empty"
    # A soft failure in an or.
    data = {"or": [SCALR, TRUE]}
    assert rule(data).check(make_request(headers={"X-Signature": "a", "Date": "x"}, soft=True)) == (
        True,
        None,
    )


@pytest.mark.parametrize(
    ("date", "message"),
    [
        # verified, each exactly as the reference logged it.
        (
            "Fri 8 Sep 2017 11:24:32 UTC",
            'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse "8 Sep 2017 11:24:32 UTC" as "02"',
        ),
        ("Fri 08 Sep 2017 25:24:32 UTC", ": hour out of range"),
        ("Fri 31 Feb 2017 11:24:32 UTC", ": day out of range"),
        ("fri 08 sep 2017 11:24:32 XYZ extra", ': extra text: " extra"'),
        (
            "Fri, 08 Sep 2017 11:24:32 UTC",
            'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse ", 08 Sep 2017 11:24:32 UTC" as " "',
        ),
        ("Fri 08 Sep 2017 11:24:32", 'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse "" as "MST"'),
        (
            "Fri 08 Sep 20x7 11:24:32 UTC",
            'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse " 11:24:32 UTC" as "2006"',
        ),
        ("Fri 08 Sep 2017 11:60:32 UTC", ": minute out of range"),
        ("Fri 08 Sep 2017 11:24:32 utc", 'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse "utc" as "MST"'),
        (
            "Fri 08 Sep 2017 11:24:32 ABCDEF",
            'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse "ABCDEF" as "MST"',
        ),
        (
            "Xyz 08 Sep 2017 11:24:32 UTC",
            'as "Mon 02 Jan 2006 15:04:05 MST": cannot parse "Xyz 08 Sep 2017 11:24:32 UTC" as "Mon"',
        ),
    ],
)
def test_scalr_date_errors(date: str, message: str) -> None:
    expected = f'parsing time "{date}"' + (message if message.startswith(":") else " " + message)
    with pytest.raises(RuleError) as info:
        parse_scalr_date(date)
    assert str(info.value) == expected
    # The same text reaches the log through the rule, after the signature has been checked.
    signature = hmac.new(b"s", b"body" + date.encode(), hashlib.sha1).hexdigest()
    ok, err = rule(SCALR).check(make_request(headers={"X-Signature": signature, "Date": date}, body=b"body"))
    assert ok is False and isinstance(err, RuleError) and str(err) == str(info.value)


# --- describe --------------------------------------------------------------------------------------------


def test_describe() -> None:
    data = {"and": [url_match("value", value="x"), {"not": url_match("regex", regex="^a")}, {"or": []}, {}]}
    assert rule(data).describe() == "and(match value url:a, not(match regex '^a' url:a), or(), {})"
    assert "secret" not in repr(rule({"match": {"type": "payload-hmac-sha1", "secret": "hunter2"}}))
    assert "hunter2" not in repr(rule({"match": {"type": "payload-hmac-sha1", "secret": "hunter2"}}))


# --- differential: the same rules and requests through the reference binary -----------------------------

REFERENCE = "/usr/bin/webhook"


def _sig(kind: str, body: bytes) -> str:
    digest = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}[kind]
    return sign(body, digest=digest)


def _hmac_rule(kind: str, secret: str = "s") -> dict[str, Any]:
    return {"match": {"type": kind, "secret": secret, "parameter": {"source": "header", "name": "x-sig"}}}


# (case id, trigger rule, query, headers, body, soft signature failures)
DIFFERENTIAL_CASES: list[tuple[str, dict[str, Any], dict[str, str], dict[str, str], bytes, bool]] = [
    ("empty", {}, {}, {}, b"", False),
    ("and-empty", {"and": []}, {}, {}, b"", False),
    ("or-empty", {"or": []}, {}, {}, b"", False),
    (
        "value-num",
        {"match": {"type": "value", "value": 1.0, "parameter": {"source": "url", "name": "a"}}},
        {"a": "1"},
        {},
        b"",
        False,
    ),
    (
        "value-big",
        {"match": {"type": "value", "value": 1e21, "parameter": {"source": "url", "name": "a"}}},
        {"a": "1e+21"},
        {},
        b"",
        False,
    ),
    (
        "value-bool",
        {"match": {"type": "value", "value": True, "parameter": {"source": "url", "name": "a"}}},
        {"a": "true"},
        {},
        b"",
        False,
    ),
    ("regex-search", url_match("regex", regex="b+"), {"a": "abbc"}, {}, b"", False),
    ("regex-bad", url_match("regex", regex="x{2,1}"), {"a": "x"}, {}, b"", False),
    ("regex-perl", url_match("regex", regex="(?<n>x)"), {"a": "x"}, {}, b"", False),
    ("regex-missing", url_match("regex", regex="("), {}, {}, b"", False),
    ("not-missing", {"not": url_match("value", value="x")}, {}, {}, b"", False),
    ("or-not-missing", {"or": [{"not": url_match("value", value="x")}, FALSE]}, {}, {}, b"", False),
    ("and-missing", {"and": [TRUE, url_match("value", value="x")]}, {}, {}, b"", False),
    (
        "case-keys",
        {"OR": [{"MATCH": {"TYPE": "value", "VALUE": "x", "PARAMETER": {"Source": "url", "Name": "a"}}}]},
        {"a": "x"},
        {},
        b"",
        False,
    ),
    ("sha1", _hmac_rule("payload-hmac-sha1"), {}, {"X-Sig": "sha1=" + _sig("sha1", b"hi")}, b"hi", False),
    (
        "sha256-multi",
        _hmac_rule("payload-hmac-sha256"),
        {},
        {"X-Sig": "sha256=00,sha256=" + _sig("sha256", b"hi")},
        b"hi",
        False,
    ),
    ("sha512-bad", _hmac_rule("payload-hmac-sha512"), {}, {"X-Sig": "sha512=00,zz"}, b"hi", False),
    ("sha256-empty-ok", _hmac_rule("payload-hmac-sha256"), {}, {"X-Sig": _sig("sha256", b"")}, b"", False),
    ("sha256-empty-bad", _hmac_rule("payload-hmac-sha256"), {}, {"X-Sig": "a,b"}, b"", False),
    ("hash-alias", _hmac_rule("payload-hash-sha1"), {}, {"X-Sig": _sig("sha1", b"hi")}, b"hi", False),
    ("no-secret", _hmac_rule("payload-hmac-sha1", secret=""), {}, {"X-Sig": "a"}, b"hi", False),
    ("soft-or", {"or": [_hmac_rule("payload-hmac-sha1"), TRUE]}, {}, {"X-Sig": "bad"}, b"hi", True),
    ("hard-or", {"or": [_hmac_rule("payload-hmac-sha1"), TRUE]}, {}, {"X-Sig": "bad"}, b"hi", False),
    ("soft-and", {"and": [_hmac_rule("payload-hmac-sha1")]}, {}, {"X-Sig": "bad"}, b"hi", True),
    ("ip-v4", {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/8 127.0.0.0/30"}}, {}, {}, b"", False),
    ("ip-v6-bare", {"match": {"type": "ip-whitelist", "ip-range": "::1"}}, {}, {}, b"", False),
    (
        "ip-mapped",
        {"match": {"type": "ip-whitelist", "ip-range": "::ffff:127.0.0.0/120"}},
        {},
        {},
        b"",
        False,
    ),
    ("ip-bad", {"match": {"type": "ip-whitelist", "ip-range": "1.2.3.4/40"}}, {}, {}, b"", False),
    ("ip-bad-late", {"match": {"type": "ip-whitelist", "ip-range": "127.0.0.1 x"}}, {}, {}, b"", False),
    ("unknown-type", url_match("bogus"), {"a": "1"}, {}, b"", False),
    ("no-source", {"match": {"type": "value"}}, {}, {}, b"", False),
    (
        "scalr-bad-date",
        {"match": {"type": "scalr-signature", "secret": "s"}},
        {},
        {
            "X-Signature": hmac.new(b"s", b"hi" + b"Fri 8 Sep 2017 1:2:3 UTC", hashlib.sha1).hexdigest(),
            "Date": "Fri 8 Sep 2017 1:2:3 UTC",
        },
        b"hi",
        False,
    ),
    (
        "scalr-old",
        {"match": {"type": "scalr-signature", "secret": "s"}},
        {},
        {
            "X-Signature": hmac.new(b"s", b"hi" + b"Fri 08 Sep 2017 11:24:32 UTC", hashlib.sha1).hexdigest(),
            "Date": "Fri 08 Sep 2017 11:24:32 UTC",
        },
        b"hi",
        False,
    ),
]


def _ours(
    data: dict[str, Any], query: dict[str, str], headers: dict[str, str], body: bytes, soft: bool
) -> str:
    ok, err = rule(data).check(
        make_request(query=query, headers=headers, body=body, remote_addr="127.0.0.1:40000", soft=soft)
    )
    if err is not None and not isinstance(err, ParameterNodeError):
        return f"error: {err}"
    return "triggered" if ok else "mismatch"


@pytest.mark.reference
@pytest.mark.slow
@pytest.mark.skipif(not os.access(REFERENCE, os.X_OK), reason="the reference webhook is not installed")
def test_differential_against_reference(tmp_path: Path) -> None:
    true = shutil.which("true") or "/bin/true"
    hooks = [
        {
            "id": case_id,
            "execute-command": true,
            "response-message": "yes",
            "trigger-rule": data,
            "trigger-signature-soft-failures": soft,
        }
        for case_id, data, _, _, _, soft in DIFFERENTIAL_CASES
    ]
    hooks_file = tmp_path / "hooks.json"
    hooks_file.write_text(json.dumps(hooks))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log_path = tmp_path / "webhook.log"
    with open(log_path, "wb") as log_file:
        argv = [
            REFERENCE,
            "-hooks",
            str(hooks_file),
            "-ip",
            "127.0.0.1",
            "-port",
            str(port),
            "-verbose",
            "-x-request-id",
        ]
        server = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
        answers = {}
        for case_id, _, query, headers, body, _ in DIFFERENTIAL_CASES:
            url = f"http://127.0.0.1:{port}/hooks/{case_id}?" + urllib.parse.urlencode(query)
            request = urllib.request.Request(
                url, data=body, method="POST", headers={**headers, "X-Request-Id": case_id}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    answers[case_id] = (response.status, response.read().decode())
            except urllib.error.HTTPError as error:
                answers[case_id] = (error.code, error.read().decode())
        time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=5)
    logged = {}
    for line in log_path.read_text().splitlines():
        found = re.search(r"\[([\w-]+)\] error evaluating hook: (.*)$", line)
        if found:
            logged[found.group(1)] = found.group(2)
    kinds = set()
    for case_id, data, query, headers, body, soft in DIFFERENTIAL_CASES:
        status, text = answers[case_id]
        if status == 500:
            theirs = f"error: {logged[case_id]}"
        else:
            assert status == 200, (case_id, status, text)
            assert text in ("yes", "Hook rules were not satisfied."), (case_id, text)
            theirs = "triggered" if text == "yes" else "mismatch"
        assert _ours(data, query, headers, body, soft) == theirs, case_id
        kinds.add(theirs.partition(":")[0])
    assert kinds == {"triggered", "mismatch", "error"}
