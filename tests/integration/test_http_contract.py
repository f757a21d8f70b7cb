"""The spec tests: every integration case against hookrunner, for the JSON and the YAML copy of the hooks.

The expected answers are the reference's (docs/compatibility.md), except for the deliberate differences
listed there. Set HOOKRUNNER_IT_TARGET=reference to run the same table against /usr/bin/webhook, which is
how the table itself is validated.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml
from integration_cases import CASES, Case, mismatches, run_case
from integration_harness import FORMATS, HOOKS_DIR, ServerPool, http_request

TARGET = os.environ.get("HOOKRUNNER_IT_TARGET", "hookrunner")


def test_json_and_yaml_hooks_are_the_same() -> None:
    from_json = json.loads((HOOKS_DIR / "hooks.json").read_text())
    from_yaml = yaml.safe_load((HOOKS_DIR / "hooks.yaml").read_text())
    assert from_json == from_yaml
    assert len(from_json) > 50


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_contract(server_pool: ServerPool, fmt: str, case: Case) -> None:
    outcome = run_case(server_pool, TARGET, fmt, case)
    assert mismatches(case.for_target(TARGET), outcome) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_pipelined_requests_on_one_connection(server_pool: ServerPool, fmt: str) -> None:
    server = server_pool.get(TARGET, fmt)
    raw = (
        b"GET /hooks/async-message HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /hooks/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    response = http_request(server.port, "GET", "", raw_request=raw)
    assert response.status == 200 and response.body == b"queued"
    second = response.raw.split(b"queued", 1)[1]
    assert second.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert second.endswith(b"\r\n\r\nHook not found.")


@pytest.mark.parametrize("fmt", FORMATS)
def test_async_hook_answers_before_its_command_finishes(server_pool: ServerPool, fmt: str) -> None:
    server = server_pool.get(TARGET, fmt)
    offset = server.log_offset()
    started = time.monotonic()
    response = http_request(server.port, "POST", "/hooks/async-slow")
    answered = time.monotonic() - started
    assert (response.status, response.body) == (200, b"started")
    assert answered < 1.5, f"answered after {answered:.2f}s; the command sleeps 2s"
    entries = server.request_entries(offset, response.local_port)
    assert any(entry.message == "finished handling async-slow" for entry in entries)
    assert time.monotonic() - started >= 2.0
