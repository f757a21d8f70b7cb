"""The Flask app answer by answer, through Flask's test client (the real-process tests are integration/)."""

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from gc_support import hookrunner_garbage

from hookrunner.config import Config, Header
from hookrunner.hooks.load import HookRegistry
from hookrunner.hooks.request import Request
from hookrunner.run.executor import CommandRunner
from hookrunner.serve.answers import MSG_UNJOURNALED
from hookrunner.serve.app import HookApp, create_app
from hookrunner.state.journal import JournalUnwritable

HOOKS = [
    {"id": "async", "execute-command": "/bin/true", "response-message": "queued"},
    {"id": "silent", "execute-command": "/bin/true"},
    {
        "id": "echo",
        "execute-command": "/bin/echo",
        "include-command-output-in-response": True,
        "pass-arguments-to-command": [
            {"source": "payload", "name": "a.b"},
            {"source": "query", "name": "q"},
            {"source": "header", "name": "x-thing"},
            {"source": "payload", "name": "missing"},
        ],
        "response-headers": [{"name": "x-from-hook", "value": "yes"}],
    },
    {
        "id": "guarded",
        "execute-command": "/bin/true",
        "response-message": "ok",
        "trigger-rule-mismatch-http-response-code": 403,
        "trigger-rule": {
            "and": [
                {"match": {"type": "value", "value": "push", "parameter": {"source": "header", "name": "X-Event"}}},
                {"match": {"type": "payload-hmac-sha256", "secret": "s3", "parameter": {"source": "header", "name": "X-Sig"}}},
            ]
        },
    },
    {"id": "post-only", "execute-command": "/bin/true", "http-methods": [" post "]},
    {"id": "fails", "execute-command": "/bin/false", "include-command-output-in-response": True},
    {"id": "fails-loud", "execute-command": "/bin/sh", "include-command-output-in-response": True,
     "include-command-output-in-response-on-error": True,
     "pass-arguments-to-command": [{"source": "string", "name": "-c"}, {"source": "string", "name": "echo '<html>'; exit 2"}]},
    {"id": "missing-cmd", "execute-command": "/nonexistent/cmd", "include-command-output-in-response": True},
    {"id": "created", "execute-command": "/bin/true", "success-http-response-code": 201, "response-message": "c"},
    {"id": "odd-code", "execute-command": "/bin/true", "success-http-response-code": 999, "response-message": "o"},
    {"id": "nested/id", "execute-command": "/bin/true", "response-message": "nested"},
]  # fmt: skip


def hooks_client(tmp_path: Path, runner: CommandRunner) -> FlaskClient:
    """A test client of the app serving HOOKS, with one global header, running through `runner`."""
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps(HOOKS))
    config = Config(hooks=(str(path),), headers=(Header("x-global", "g"),))
    registry = HookRegistry(config.hooks_files)
    registry.load_initial()
    return create_app(config, registry, runner).test_client()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    runner = CommandRunner()
    yield hooks_client(tmp_path, runner)
    runner.shutdown(5)


def test_root(client: FlaskClient) -> None:
    response = client.get("/")
    assert (response.status_code, response.data) == (200, b"OK")
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.headers["X-Global"] == "g"


def test_unknown_hook(client: FlaskClient) -> None:
    response = client.post("/hooks/nope")
    assert (response.status_code, response.data) == (404, b"Hook not found.")
    assert "X-Global" not in response.headers


def test_path_outside_the_prefix_is_gos_404(client: FlaskClient) -> None:
    response = client.get("/elsewhere")
    assert (response.status_code, response.data) == (404, b"404 page not found\n")
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_async_answers_at_once_with_the_message(client: FlaskClient) -> None:
    response = client.post("/hooks/async")
    assert (response.status_code, response.data) == (200, b"queued")
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_empty_message_has_no_content_type(client: FlaskClient) -> None:
    response = client.post("/hooks/silent")
    assert (response.status_code, response.data) == (200, b"")
    assert "Content-Type" not in response.headers
    assert response.headers["X-Global"] == "g"


def test_captured_output_with_every_source(client: FlaskClient) -> None:
    response = client.post("/hooks/echo?q=1&q=2", json={"a": {"b": [1, "<x>"]}}, headers={"X-Thing": "t"})
    assert response.status_code == 200
    assert response.data == b'[1,"\\u003cx\\u003e"] 1 t \n'
    assert response.headers["X-From-Hook"] == "yes"


@pytest.mark.parametrize(
    ("headers", "status", "body"),
    [
        (
            {"X-Event": "push", "X-Sig": "sha256=" + hmac.new(b"s3", b"{}", hashlib.sha256).hexdigest()},
            200,
            b"ok",
        ),
        ({"X-Event": "pull", "X-Sig": "whatever"}, 403, b"Hook rules were not satisfied."),
        ({"X-Event": "push"}, 403, b"Hook rules were not satisfied."),  # missing header: soft
        ({"X-Event": "push", "X-Sig": "sha256=00"}, 500, b"Error occurred while evaluating hook rules."),
    ],
)
def test_rules(client: FlaskClient, headers: dict[str, str], status: int, body: bytes) -> None:
    response = client.post(
        "/hooks/guarded", data=b"{}", headers={"Content-Type": "application/json", **headers}
    )
    assert (response.status_code, response.data) == (status, body)


def test_methods(client: FlaskClient) -> None:
    assert client.post("/hooks/post-only").status_code == 200
    response = client.get("/hooks/post-only")
    assert (response.status_code, response.data) == (405, b"")
    assert "Content-Type" not in response.headers


def test_command_failures(client: FlaskClient) -> None:
    generic = b"Error occurred while executing the hook's command. Please check your logs for more details."
    assert (client.post("/hooks/fails").status_code, client.post("/hooks/fails").data) == (500, generic)
    assert client.post("/hooks/missing-cmd").data == generic
    loud = client.post("/hooks/fails-loud")
    assert (loud.status_code, loud.data) == (500, b"<html>\n")
    assert loud.headers["Content-Type"] == "text/html; charset=utf-8"  # sniffed, as Go does


def test_configured_codes(client: FlaskClient) -> None:
    assert client.post("/hooks/created").status_code == 201
    assert client.post("/hooks/odd-code").status_code == 200  # Go has no text for 999


def test_ids_may_contain_slashes(client: FlaskClient) -> None:
    assert client.post("/hooks/nested/id").data == b"nested"


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "seen"),
    [
        # Go prints an IPv4 peer of a dual-stack listener (the default -ip) as IPv4.
        ("::ffff:192.0.2.1", None, (), b"192.0.2.1:4242\n"),
        ("2001:db8::1", None, (), b"[2001:db8::1]:4242\n"),
        # -trusted-proxies: believed from a trusted peer only, and then with port 0.
        ("::ffff:192.0.2.1", "203.0.113.7", ("192.0.2.0/24",), b"203.0.113.7:0\n"),
        ("192.0.2.1", "203.0.113.7, 198.51.100.4", ("192.0.2.0/24",), b"198.51.100.4:0\n"),
        ("198.51.100.9", "203.0.113.7", ("192.0.2.0/24",), b"198.51.100.9:4242\n"),
        ("192.0.2.1", "203.0.113.7", (), b"192.0.2.1:4242\n"),  # without the flag nothing changes
    ],
)
def test_remote_addr(
    tmp_path: Path, peer: str, forwarded: str | None, trusted: tuple[str, ...], seen: bytes
) -> None:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps([{
        "id": "addr", "execute-command": "/bin/echo", "include-command-output-in-response": True,
        "pass-arguments-to-command": [{"source": "request", "name": "remote-addr"}],
    }]))
    config = Config(hooks=(str(path),), trusted_proxies=trusted)
    registry = HookRegistry(config.hooks_files)
    registry.load_initial()
    runner = CommandRunner()
    try:
        app = create_app(config, registry, runner).test_client()
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        response = app.post("/hooks/addr", headers=headers,
                            environ_base={"REMOTE_ADDR": peer, "REMOTE_PORT": "4242"})
        assert (response.status_code, response.data) == (200, seen)
    finally:
        runner.shutdown(5)


def test_json_parameters_that_do_not_parse_leave_no_cycle(tmp_path: Path) -> None:
    """The errors of parse-parameters-as-json come back as values: as raised exceptions, their tracebacks
    held the frame that kept them in its list, a cycle per request for the cyclic collector."""
    path = tmp_path / "hooks.json"
    hook = {"id": "j", "execute-command": "/bin/true", "parse-parameters-as-json": [
        {"source": "header", "name": "X-Data"}, {"source": "query", "name": "q"}]}
    path.write_text(json.dumps([hook]))
    config = Config(hooks=(str(path),))
    registry = HookRegistry(config.hooks_files)
    registry.load_initial()
    app = HookApp(config, registry, CommandRunner())
    parsed = registry.match("j")
    assert parsed is not None
    req = Request(id="r", method="POST", remote_addr="127.0.0.1:1", content_type="", body=b"",
                  headers={"X-Data": "{not json"}, query={"q": "[1"}, payload=None)

    def handle() -> list[str]:
        errors = app.parse_json_parameters(parsed, req)
        return [type(error).__name__ for error in errors]

    assert handle() == ["GoJSONError", "GoJSONError"]
    assert hookrunner_garbage(handle) == []


class _UnwritableJournal:
    """The run journal (-state-dir) on a full disk, as the app sees it: it cannot record a run, and says
    so for readiness (tests/run/test_journal.py fills a real one)."""

    enabled = True

    def __init__(self) -> None:
        self.can_write = False
        self.finishes: tuple[list[int], str] | None = None

    def record(self, spec: object) -> int:
        if not self.can_write:
            raise JournalUnwritable("/state/journal.sqlite3")
        return 1

    def writable(self) -> bool:
        return self.can_write

    owner = "this-boot"

    def claim_left_overs(self) -> list[object]:
        return []

    def started(self, run_id: int, leader: object, attempt: int | None = None) -> bool:
        return True

    def add_process(self, run_id: int, process: object, attempt: int | None = None) -> bool:
        return True

    def finished(self, run_ids: list[int], exit_status: str, attempt: int | None = None) -> bool:
        self.finishes = (run_ids, exit_status)
        return True

    def close(self) -> None:
        pass


def test_a_run_the_journal_cannot_record_is_503_with_retry_after_and_readiness_follows(tmp_path: Path) -> None:
    runner = CommandRunner()
    journal = _UnwritableJournal()
    runner.journal = journal  # type: ignore[assignment]
    client = hooks_client(tmp_path, runner)
    for hook, hook_header in (("async", None), ("echo", "yes")):
        response = client.post(f"/hooks/{hook}")
        assert (response.status_code, response.data) == (503, MSG_UNJOURNALED)
        assert response.headers["Retry-After"] == "5"
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert response.headers["X-Global"] == "g"
        assert response.headers.get("X-From-Hook") == hook_header
    assert runner.running == runner.queued == 0  # nothing ran
    assert client.get("/healthz").status_code == 200  # alive, only not ready
    response = client.get("/healthz?ready")
    assert (response.status_code, response.data) == (503, MSG_UNJOURNALED)
    journal.can_write = True
    assert client.get("/healthz?ready").status_code == 200
    assert client.post("/hooks/async").status_code == 200
    runner.shutdown(5)
    assert journal.finishes == ([1], "exit status 0")
