"""Properties of the rules that must hold on any input: a rules object of any shape parses to a rule or
a typed error, and a parsed rule evaluates any request to true, false or a typed error."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hookrunner.errors import HookrunnerError
from hookrunner.hooks import rules
from hookrunner.hooks.request import Request
from hookrunner.hooks.rules import parse_rule

KINDS = ["value", "regex", "payload-hmac-sha1", "payload-hmac-sha256", "payload-hmac-sha512", "payload-hash-sha1",
         "payload-hash-sha256", "payload-hash-sha512", "ip-whitelist", "scalr-signature", "nonsense"]
SOURCES = ["url", "query", "header", "payload", "request", "raw-request-body", "string", "entire-payload", "bogus"]
NAMES = st.sampled_from(["a", "a.b", "list.0", "X-Sig", "method", "remote-addr", "", "a.-1"]) | st.text(max_size=6)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)
PARAMETER = st.fixed_dictionaries(
    {}, optional={"source": st.sampled_from(SOURCES) | ANY_JSON, "name": NAMES | ANY_JSON, "envname": ANY_JSON}
)
MATCH = st.fixed_dictionaries(
    {"type": st.sampled_from(KINDS) | ANY_JSON},
    optional={
        "parameter": PARAMETER | ANY_JSON,
        "value": st.sampled_from(["x", "1", ""]) | ANY_JSON,
        "regex": st.sampled_from(["^a", "(", "a{2,1}", "(?P<n>x)", "\\C", "[[:alpha:]]", "(?i)x"]) | ANY_JSON,
        "secret": st.sampled_from(["s", ""]) | ANY_JSON,
        "ip-range": st.sampled_from(["127.0.0.1/32", "10.0.0.0/8 ::1/128", "bad", "1.2.3.4", ""]) | ANY_JSON,
    },
)
RULES = st.recursive(
    st.builds(lambda m: {"match": m}, MATCH | ANY_JSON),
    lambda inner: st.one_of(
        st.builds(lambda rs: {"and": rs}, st.lists(inner, max_size=3) | ANY_JSON),
        st.builds(lambda rs: {"or": rs}, st.lists(inner, max_size=3) | ANY_JSON),
        st.builds(lambda r: {"not": r}, inner | ANY_JSON),
        st.dictionaries(st.sampled_from(["and", "or", "not", "match", "other"]), inner, min_size=2, max_size=3),
    ),
    max_leaves=6,
)
VALUES = st.text(max_size=8) | st.sampled_from(["x", "1", "127.0.0.1"])


@st.composite
def requests(draw: st.DrawFn) -> Request:
    body = draw(st.binary(max_size=20))
    headers: dict[str, Any] = draw(st.dictionaries(st.sampled_from(["X-Sig", "X-Signature", "Date"]), VALUES))
    if draw(st.booleans()):
        headers["X-Sig"] = "sha256=" + hmac.new(b"s", body, hashlib.sha256).hexdigest()
    payload = draw(st.none() | st.dictionaries(st.sampled_from(["a", "list", "b"]), ANY_JSON, max_size=3))
    return Request(
        id="rid",
        method=draw(st.sampled_from(["POST", "GET", "post"])),
        remote_addr=draw(st.sampled_from(["127.0.0.1:1", "[::1]:2", "bad", "10.1.2.3:4"])),
        content_type="application/json",
        body=body,
        headers=headers,
        query=draw(st.dictionaries(st.sampled_from(["a", "a.b", "q"]), VALUES, max_size=3)),
        payload=payload,
        allow_signature_errors=draw(st.booleans()),
    )


@given(RULES | ANY_JSON, requests())
def test_any_rules_object_parses_and_evaluates_or_fails_typed(data: Any, req: Request) -> None:
    try:
        rule = parse_rule(data) if isinstance(data, dict) or data is None else parse_rule({"and": data})
    except HookrunnerError:
        return
    if rule is None:
        return
    assert isinstance(rule.describe(), str)
    try:
        assert rule.evaluate(req) in (True, False)
    except HookrunnerError:
        pass


def _drafted(data: Any) -> Any:
    """parse_rule's answer by the drafts alone (its plain path turned off): the rule, or the error's text."""
    saved = rules._plain_rule
    rules._plain_rule = lambda data: None  # type: ignore[assignment]
    try:
        return parse_rule(data)
    except (HookrunnerError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        rules._plain_rule = saved


def _parsed(data: Any) -> Any:
    try:
        return parse_rule(data)
    except (HookrunnerError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"


TEXT = st.none() | st.sampled_from(["", "x", "s", "^a", "10.0.0.0/8"]) | st.text(max_size=4)
PLAIN_RULES = st.recursive(
    st.builds(
        lambda m: {"match": m},
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(KINDS) | TEXT,
                "value": TEXT,
                "secret": TEXT,
                "regex": TEXT,
                "ip-range": TEXT,
                "parameter": st.none()
                | st.fixed_dictionaries(
                    {},
                    optional={
                        "source": TEXT,
                        "name": TEXT,
                        "envname": TEXT,
                        "base64decode": st.none() | st.booleans(),
                    },
                ),
            },
        ),
    ),
    lambda inner: (
        st.builds(lambda rs: {"and": rs}, st.lists(inner, max_size=3))
        | st.builds(lambda rs: {"or": rs}, st.lists(inner, max_size=3))
        | st.builds(lambda r: {"not": r}, inner)
    ),
    max_leaves=6,
)
FOLDED = st.sampled_from(
    ["Match", "AND", "Or", "nOt", "Type", "VALUE", "Parameter", "Source", "NAME", "ſource"]
)


@settings(max_examples=400)
@given(PLAIN_RULES | RULES | ANY_JSON, st.lists(FOLDED, max_size=2))
def test_the_plain_path_gives_what_the_drafts_give(data: Any, folded: list[str]) -> None:
    # A key at the top named ignoring case (or with a long s), or unknown there: the drafts decide those.
    if isinstance(data, dict):
        for key in folded:
            data[key] = data.pop(key.lower().replace("ſ", "s"), {"match": {}})
    assert _parsed(data) == _drafted(data)


def test_the_plain_path_takes_the_usual_rules() -> None:
    parameter = {"source": "payload", "name": "ref"}
    usual = [
        {"match": {"type": "value", "value": "refs/heads/main", "parameter": parameter}},
        {
            "and": [
                {"match": {"type": "payload-hmac-sha256", "secret": "s", "parameter": parameter}},
                {"not": {"match": {"type": "regex", "regex": "^x", "parameter": parameter}}},
            ]
        },
        {"or": [{"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/8"}}, {"match": {}}]},
    ]
    for data in usual:
        assert rules._plain_rule(data) is not None
        assert rules._plain_rule(data) == _drafted(data)
    for data in (
        {"Match": {}},
        {"match": {"value": 1}},
        {"and": [{}]},
        {"match": {"parameter": {"Name": "x"}}},
        {},
    ):
        assert rules._plain_rule(data) is None
