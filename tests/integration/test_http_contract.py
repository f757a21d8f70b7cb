"""The spec tests: every integration case against hookrunner, for the JSON and the YAML copy of the hooks.

The expected answers are the reference's (docs/compatibility.md). Set HOOKRUNNER_IT_TARGET=reference to
run the same table against /usr/bin/webhook, which is how the table itself is validated.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from integration_cases import AUTO, CASES, Case, normalise
from integration_harness import FORMATS, HOOKS_DIR, ServerPool, send_case

TARGET = os.environ.get("HOOKRUNNER_IT_TARGET", "hookrunner")
GLOBAL_HEADERS = {"default": (("X-Global", "g"), ("X-Second", "two words")), "methods": (("X-Global", "g"),)}


def test_json_and_yaml_hooks_are_the_same() -> None:
    from_json = json.loads((HOOKS_DIR / "hooks.json").read_text())
    from_yaml = yaml.safe_load((HOOKS_DIR / "hooks.yaml").read_text())
    assert from_json == from_yaml
    assert len(from_json) > 50


def check_case(server_pool: ServerPool, target: str, fmt: str, case: Case) -> None:
    server = server_pool.get(target, fmt, case.flags)
    headers, body = case.dynamic() if case.dynamic else (case.headers, case.body)
    outcome = send_case(
        server,
        case.method,
        case.path,
        headers,
        body,
        case.raw_request,
        case.files_removed,
        case.reaches_handler,
    )
    response = outcome.response
    got = (response.status, normalise(response.body))
    assert response.status == case.status, f"status {got!r}"
    if case.expect_body is not None:
        assert normalise(response.body) == case.expect_body
    expected_type: str | None = case.content_type
    if expected_type == AUTO:
        expected_type = "text/plain; charset=utf-8" if response.body or case.method == "HEAD" else None
    assert response.header("Content-Type") == expected_type, response.headers
    for name, value in GLOBAL_HEADERS.get(case.flags, ()):
        assert response.header(name) == (value if case.global_headers else None), response.headers
    for name, wanted_value in case.expect_headers:
        assert response.header(name) == wanted_value, response.headers
    assert tuple(response.interim) == case.interim
    messages = [entry.message for entry in outcome.logs]
    for wanted in case.logs:
        assert any(wanted in message for message in messages), f"{wanted!r} not logged in {messages!r}"
    if case.files_removed:
        assert outcome.leftover_files == []


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_contract(server_pool: ServerPool, fmt: str, case: Case) -> None:
    check_case(server_pool, TARGET, fmt, case)
