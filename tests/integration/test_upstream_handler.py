"""Upstream webhook's own handler tests (the `hookHandlerTests` table of its webhook_test.go, tag 2.8.2),
run black-box against hookrunner and the reference, the way upstream runs them.

As upstream does: the test renders each hooks template (tests/data/upstream-webhook) with Go's
text/template, giving it the path of the echo helper as `.Hookecho`, and starts the server on the result
with `-hooks <file> -debug -ip 127.0.0.1 -port N` (and `-http-methods` for rows that set it). Each row is
sent as Go's HTTP client sends it: the row's headers, then a Content-Type header of its own, so a row
that names a Content-Type in its headers sends two. The answer's status must be the row's, its body the
row's (a regular expression searched for where the row says so), and the row's log pattern must match
what the server logged.

The reference is Debian's webhook 2.8.0, older than the table (2.8.2); it has every feature the rows
need and passes them all, so each row is also compared with it, status and whole body.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from integration_harness import (
    Response,
    free_port,
    http_request,
    implementation_argv,
    reference_available,
    stop_process,
)

from hookrunner.golang.template import Template

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "upstream-webhook"
HOOKECHO = HERE / "hookecho.py"
TEMPLATES = ("json", "yaml")
CASES: list[dict[str, Any]] = json.loads((DATA / "cases.json").read_text())["cases"]


@dataclass
class UpstreamServer:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path


def render(fmt: str, dest: Path) -> Path:
    """The hooks file upstream's genConfig writes: the template executed with `.Hookecho` set."""
    text = (DATA / f"hooks.{fmt}.tmpl").read_text()
    path = dest / f"hooks.{fmt}"
    path.write_text(Template.parse(text, path.name).execute({"Hookecho": str(HOOKECHO)}))
    return path


def start(impl: str, fmt: str, methods: str | None, base: Path) -> UpstreamServer:
    base.mkdir(parents=True, exist_ok=True)
    hooks = render(fmt, base)
    extra = ["-http-methods", methods] if methods is not None else []
    log_path = base / "server.log"
    port = free_port()
    argv = implementation_argv(impl) + [
        "-hooks", str(hooks), "-debug", "-ip", "127.0.0.1", "-port", str(port), *extra
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOK_")}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=base, env=env
        )
    server = UpstreamServer(port, process, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        try:
            http_request(port, "GET", "/", timeout=2)
            return server
        except OSError:
            time.sleep(0.05)
    stop_process(process, grace=5)
    raise RuntimeError(f"{impl} did not start: {log_path.read_bytes()[-2000:]!r}")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    started: dict[tuple[str, str, str | None], UpstreamServer] = {}
    base = tmp_path_factory.mktemp("upstream")

    def get(impl: str, fmt: str, methods: str | None) -> UpstreamServer:
        key = (impl, fmt, methods)
        if key not in started:
            name = f"{impl}-{fmt}-{len(started)}"
            started[key] = start(impl, fmt, methods, base / name)
        return started[key]

    yield get
    for server in started.values():
        stop_process(server.process, grace=10)


def go_client_request(port: int, case: dict[str, Any]) -> bytes:
    """The bytes Go's http.Client sends for the row: Host, User-Agent and Content-Length first, then the
    headers sorted by name (values in the order added), then the transport's Accept-Encoding."""
    body = case["body"].encode()
    headers: dict[str, list[str]] = {}
    for name, value in (case["headers"] or {}).items():
        headers.setdefault(name, []).append(value)
    if case["contentType"]:
        headers.setdefault("Content-Type", []).append(case["contentType"])
    lines = [f"{case['method']} /hooks/{case['id']} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines.append("User-Agent: Go-http-client/1.1")
    if body or case["method"] not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name in sorted(headers) for value in headers[name]]
    lines += ["Accept-Encoding: gzip", "Connection: close"]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + body


def send(server: UpstreamServer, case: dict[str, Any]) -> tuple[Response, str]:
    offset = server.log_path.stat().st_size
    response = http_request(server.port, case["method"], "/", raw_request=go_client_request(server.port, case))
    log = ""
    pattern = case["logMatch"]
    deadline = time.monotonic() + 5
    while True:  # the command's log lines may land just after the answer
        log = server.log_path.read_bytes()[offset:].decode("utf-8", "replace")
        if not pattern or re.search(pattern, log) or time.monotonic() > deadline:
            return response, log
        time.sleep(0.05)


def check(case: dict[str, Any], response: Response, log: str) -> list[str]:
    problems = []
    if response.status != case["respStatus"]:
        problems.append(f"status {response.status}, expected {case['respStatus']}")
    body = response.body.decode("utf-8", "replace")
    if case["bodyIsRE"]:
        if not re.search(case["respBody"], body):
            problems.append(f"body {body!r} does not match {case['respBody']!r}")
    elif case["respBody"] not in body:
        problems.append(f"body {body!r} does not contain {case['respBody']!r}")
    if case["logMatch"] and not re.search(case["logMatch"], log):
        problems.append(f"log does not match {case['logMatch']!r}:\n{log[-1500:]}")
    return problems


def methods_flag(case: dict[str, Any]) -> str | None:
    return ",".join(case["cliMethods"]) if case["cliMethods"] else None


CASE_IDS = [f"{i:02d}-{case['desc'].replace(' ', '-')}" for i, case in enumerate(CASES)]


@pytest.mark.parametrize("fmt", TEMPLATES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_hookrunner_passes_upstream_case(servers: Any, fmt: str, case: dict[str, Any]) -> None:
    server = servers("hookrunner", fmt, methods_flag(case))
    response, log = send(server, case)
    assert check(case, response, log) == []


@pytest.mark.reference
@pytest.mark.parametrize("fmt", TEMPLATES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_reference_on_upstream_case(servers: Any, fmt: str, case: dict[str, Any]) -> None:
    assert reference_available()
    server = servers("reference", fmt, methods_flag(case))
    response, log = send(server, case)
    assert check(case, response, log) == []


@pytest.mark.reference
@pytest.mark.parametrize("fmt", TEMPLATES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_same_answer_as_reference(servers: Any, fmt: str, case: dict[str, Any]) -> None:
    """Stricter than upstream's check: hookrunner's status and whole body are the reference's."""
    ours, _ = send(servers("hookrunner", fmt, methods_flag(case)), case)
    theirs, _ = send(servers("reference", fmt, methods_flag(case)), case)
    port = re.compile(rb"127\.0\.0\.1:\d+")
    assert (ours.status, port.sub(b"<addr>", ours.body)) == (theirs.status, port.sub(b"<addr>", theirs.body))
