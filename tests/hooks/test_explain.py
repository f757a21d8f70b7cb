"""Why a rule was not satisfied: the deciding clauses of nested and/or/not rules, with secrets redacted."""

from __future__ import annotations

import hashlib
import hmac
import io
from typing import Any

import pytest

from hookrunner.hooks.explain import MAX_CLAUSES, explain, explanation_text
from hookrunner.hooks.request import Request
from hookrunner.hooks.rules import Rule, parse_rule
from hookrunner.ops.log import GoLogger

SECRET = "s3cr3t-hmac-key"
TOKEN = "expected-token-value"


def rule(data: dict[str, Any]) -> Rule:
    parsed = parse_rule(data)
    assert parsed is not None
    return parsed


def request(
    headers: dict[str, Any] | None = None, payload: dict[str, Any] | None = None, body: bytes = b"{}"
) -> Request:
    return Request(
        id="r1",
        method="POST",
        remote_addr="10.1.2.3:5555",
        content_type="application/json",
        body=body,
        headers=headers or {},
        payload=payload,
    )


def match(kind: str, source: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"match": {"type": kind, "parameter": {"source": source, "name": name}, **extra}}


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


NESTED = {
    "and": [
        match("payload-hmac-sha256", "header", "X-Hub-Signature-256", secret=SECRET),
        {
            "or": [
                match("value", "header", "X-Token", value=TOKEN),
                match("regex", "payload", "ref", regex="^refs/heads/main$"),
            ]
        },
        {"not": match("value", "payload", "action", value="deleted")},
    ]
}


def texts(rule_data: dict[str, Any], req: Request) -> list[str]:
    the_rule = rule(rule_data)
    ok, _ = the_rule.check(req)
    assert not ok
    return [clause.text() for clause in explain(the_rule, req)]


def test_nested_or_lists_every_failed_alternative() -> None:
    body = b'{"ref":"refs/heads/dev"}'
    req = request({"X-Hub-Signature-256": sign(body), "X-Token": "wrong"}, {"ref": "refs/heads/dev"}, body)
    assert texts(NESTED, req) == [
        # X-Token looks like a credential: even a wrong value is not shown.
        "and[1].or[0].match value header:X-Token saw <redacted>: not the configured value",
        'and[1].or[1].match regex payload:ref saw "refs/heads/dev": no match for regex "^refs/heads/main$"',
    ]


def test_not_explains_the_clause_that_matched() -> None:
    body = b'{"ref":"refs/heads/main","action":"deleted"}'
    payload = {"ref": "refs/heads/main", "action": "deleted"}
    req = request({"X-Hub-Signature-256": sign(body)}, payload, body)
    assert texts(NESTED, req) == [
        'and[2].not.match value payload:action saw <redacted>: matched, and a `not` above negates it'
    ]


def test_missing_parameter_is_named() -> None:
    req = request({}, {"ref": "refs/heads/main"})
    data = {"and": [match("regex", "payload", "ref", regex="main"), match("value", "payload", "missing.key", value="x")]}
    assert texts(data, req) == ["and[1].match value payload:missing.key: parameter not found"]


def test_value_mismatch_shows_the_seen_value_but_never_the_configured_one() -> None:
    req = request({}, {"action": "opened"})
    assert texts(match("value", "payload", "action", value="closed"), req) == [
        'match value payload:action saw "opened": not the configured value'
    ]


def test_soft_signature_failure_in_or_is_redacted() -> None:
    data = {"or": [match("payload-hmac-sha1", "header", "X-Sig", secret=SECRET), match("value", "url", "k", value="v")]}
    req = request({"X-Sig": "sha1=" + "0" * 40}, {})
    req.allow_signature_errors = True
    lines = texts(data, req)
    assert lines == [
        "or[0].match payload-hmac-sha1 header:X-Sig saw <redacted>: signature mismatch",
        "or[1].match value url:k: parameter not found",
    ]


def test_ip_whitelist_shows_the_peer_and_ranges() -> None:
    data = {"match": {"type": "ip-whitelist", "ip-range": "192.168.0.0/16 127.0.0.1"}}
    assert texts(data, request()) == [
        'match ip-whitelist request:remote-addr saw "10.1.2.3:5555": not in "192.168.0.0/16 127.0.0.1"'
    ]


def test_long_values_are_cut() -> None:
    req = request({}, {"msg": "x" * 500})
    (line,) = texts(match("regex", "payload", "msg", regex="^y"), req)
    assert f'saw "{"x" * 80}"... (500 chars)' in line


def test_a_secret_never_appears_even_when_sent_in_another_parameter() -> None:
    # Someone pastes the HMAC secret into a field the rule prints: it is redacted all the same.
    req = request({}, {"ref": f"refs/heads/{SECRET}"})
    data = {"and": [match("regex", "payload", "ref", regex="^refs/heads/main$"),
                    match("payload-hmac-sha256", "header", "X", secret=SECRET)]}
    (line,) = texts(data, req)
    assert SECRET not in line
    assert "refs/heads/<redacted>" in line


def test_empty_rule() -> None:
    assert texts({}, request()) == ["rule {}: an empty rule is never satisfied"]


def test_many_clauses_are_counted_not_listed() -> None:
    data = {"or": [match("value", "url", f"q{i}", value="v") for i in range(MAX_CLAUSES + 3)]}
    the_rule = rule(data)
    line = explanation_text("h", explain(the_rule, request()))
    assert line.startswith("h trigger rules not satisfied because: or[0].match value url:q0: parameter not found; ")
    assert line.endswith("; and 3 more clause(s)")


def test_deprecated_hash_type_is_not_warned_about_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import hookrunner.hooks.rules

    stream = io.StringIO()
    monkeypatch.setattr(hookrunner.hooks.rules, "log", GoLogger(stream, enabled=True))
    data = {"and": [match("value", "url", "a", value="b"), match("payload-hash-sha1", "header", "X", secret="k")]}
    req = request({"X": "sha1=00"}, {})
    req.query = {"a": "b"}
    the_rule = rule(data)
    the_rule.check(req)
    before = stream.getvalue().count("deprecated")
    clauses = explain(the_rule, req)
    assert stream.getvalue().count("deprecated") == before == 1
    assert [c.text() for c in clauses] == [
        "and[1].match payload-hash-sha1 header:X saw <redacted>: signature mismatch"
    ]
