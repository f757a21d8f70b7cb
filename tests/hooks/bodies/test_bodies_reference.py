"""Differential checks of the four body parsers against the reference binary (/usr/bin/webhook 2.8.0),
over the "verified" tables of test_json_body.py, test_form_body.py, test_xml_body.py and
test_multipart_body.py; skipped when the reference is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_form_body import FORM_CASES
from test_json_body import JSON_CASES
from test_multipart_body import MULTIPART_CASES, run_multipart
from test_xml_body import XML_CASES

from hookrunner.errors import PayloadParseError
from hookrunner.golang.json import go_json_dumps
from hookrunner.hooks.bodies import parse_form_payload, parse_json_payload, parse_xml_payload

# --- differential checks against the reference binary ---

reference = pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The reference with a hook that prints entire-payload; yields its hook URL and its log file."""
    workdir = tmp_path_factory.mktemp("reference")
    hooks = [
        {
            "id": "ep",
            "execute-command": "/usr/bin/printf",
            "include-command-output-in-response": True,
            "parse-parameters-as-json": [{"source": "payload", "name": "forced"}],
            "pass-arguments-to-command": [{"source": "string", "name": "%s"}, {"source": "entire-payload"}],
        }
    ]
    (workdir / "hooks.json").write_text(json.dumps(hooks))
    port = free_port()
    log_path = workdir / "webhook.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                "webhook",
                "-hooks",
                str(workdir / "hooks.json"),
                "-ip",
                "127.0.0.1",
                "-port",
                str(port),
                "-verbose",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LC_ALL": "C"},
        )
    try:
        deadline = time.monotonic() + 10
        while b"serving hooks" not in log_path.read_bytes():
            assert time.monotonic() < deadline, "the reference did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/hooks/ep", log_path
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def ask_reference(
    server: tuple[str, Path], content_type: str, body: bytes, query: str = ""
) -> tuple[int, str, str]:
    url, log_path = server
    before = len(log_path.read_bytes())
    request = urllib.request.Request(url + query, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, text = response.status, response.read().decode("utf-8", "surrogateescape")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    # The request's log lines are written before the answer is sent.
    log = log_path.read_bytes()[before:].decode("utf-8", "surrogateescape")
    return status, text, log


def parse_error_line(log: str) -> str | None:
    match = re.search(r"\[\w+\] (error parsing (?:JSON|form|XML) (?:array )?payload[^\n]*)", log)
    return match.group(1) if match else None


SAMPLE_BODIES: list[tuple[str, Any, bytes]] = (
    [("application/json", parse_json_payload, body) for body, _, _ in JSON_CASES]
    + [("application/x-www-form-urlencoded", parse_form_payload, body) for body, _, _ in FORM_CASES]
    + [("application/xml", parse_xml_payload, body) for body, _, _ in XML_CASES]
)


@pytest.mark.reference
@reference
@pytest.mark.parametrize(("content_type", "parser", "body"), SAMPLE_BODIES)
def test_body_parsers_match_the_reference(
    reference_server: tuple[str, Path], content_type: str, parser: Any, body: bytes
) -> None:
    status, text, log = ask_reference(reference_server, content_type, body)
    assert status == 200
    try:
        mine, error = go_json_dumps(parser(body)), None
    except PayloadParseError as exc:
        mine, error = "null", str(exc)
    assert (mine, error) == (text, parse_error_line(log))


# The "big" case is left out: its payload is too long for the reference's command line.
REFERENCE_MULTIPART_CASES = [case for case in MULTIPART_CASES if case[0] != "big"]


@pytest.mark.reference
@reference
@pytest.mark.parametrize(
    ("label", "ct", "body", "query"), REFERENCE_MULTIPART_CASES, ids=[c[0] for c in REFERENCE_MULTIPART_CASES]
)
def test_multipart_matches_the_reference(
    reference_server: tuple[str, Path], label: str, ct: str, body: bytes, query: str
) -> None:
    status, text, log = ask_reference(reference_server, ct, body, query)
    payload, error, logs = run_multipart(ct, body, query)
    if error is not None:
        assert status == 500
        assert f"error parsing multipart form: {error}" in log
        return
    assert status == 200
    assert text == go_json_dumps(payload)
    ref_logs = re.findall(
        r"\[\w+\] ((?:found multipart|parsing multipart|error parsing JSON payload file)[^\n]*)", log
    )
    assert sorted(ref_logs) == logs
