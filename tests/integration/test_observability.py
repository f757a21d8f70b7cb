"""Observability end to end: /metrics after a scripted sequence, JSON log lines, rule explanations, readiness."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
from pathlib import Path

from integration_harness import http_request
from prometheus_client.parser import text_string_to_metric_families
from test_serving import LOG_LINE, Server, python_hook, run_owner_pids, wait_until

SECRET = "hmac-key-that-must-never-be-logged"
TOKEN = "shared-token-that-must-never-be-logged"


def replace_hooks(server: Server, text: str) -> None:
    """Swap the hooks file in one step, as editors and ConfigMaps do (no half-written file is seen)."""
    temp = server.hooks_path.with_name(".hooks.tmp")
    temp.write_text(text)
    os.replace(temp, server.hooks_path)


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str) -> Server:
    server = Server(tmp_path, hooks, *flags)
    servers.append(server)
    server.ready()
    return server


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def match(kind: str, source: str, name: str, **extra: str) -> dict[str, object]:
    return {"match": {"type": kind, "parameter": {"source": source, "name": name}, **extra}}


def samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels)."""
    response = http_request(server.port, "GET", "/metrics")
    assert response.status == 200, response.body
    assert response.header("Content-Type").startswith("text/plain; version=")  # type: ignore[union-attr]
    out = {}
    for family in text_string_to_metric_families(response.body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


# --- metrics ------------------------------------------------------------------------------------------

METRIC_HOOKS = [
    python_hook("ok", "print('fine')", **{
        "include-command-output-in-response": True,
        "trigger-rule": match("value", "url", "k", value="v"),
    }),
    python_hook("fail", "import sys; sys.exit(3)", **{"include-command-output-in-response": True}),
    python_hook("killed", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                **{"include-command-output-in-response": True}),
    {"id": "missing-command", "execute-command": "/no/such/command", "include-command-output-in-response": True},
    {"id": "signed", "execute-command": "/bin/true",
     "trigger-rule": match("payload-hmac-sha256", "header", "X-Hub-Signature-256", secret=SECRET)},
    {"id": "post-only", "execute-command": "/bin/true", "http-methods": ["POST"]},
]


def test_metrics_count_a_scripted_sequence(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, METRIC_HOOKS, "-metrics")
    port = server.port
    script = [
        ("POST", "/hooks/ok?k=v", 200),
        ("POST", "/hooks/ok?k=v", 200),
        ("POST", "/hooks/ok?k=nope", 200),  # rules not satisfied (webhook answers 200 by default)
        ("POST", "/hooks/ok", 200),  # a missing parameter: not satisfied either
        ("POST", "/hooks/fail", 500),
        ("POST", "/hooks/killed", 500),
        ("POST", "/hooks/missing-command", 500),
        ("GET", "/hooks/post-only", 405),
        ("GET", "/hooks/scanner-1", 404),
        ("GET", "/hooks/scanner-2", 404),
    ]
    for method, target, status in script:
        assert http_request(port, method, target).status == status, target
    body = b'{"a":1}'
    bad = http_request(port, "POST", "/hooks/signed", [("X-Hub-Signature-256", "sha256=00"),
                                                        ("Content-Type", "application/json")], body)
    assert bad.status == 500
    good = http_request(port, "POST", "/hooks/signed", [("X-Hub-Signature-256", sign(body)),
                                                         ("Content-Type", "application/json")], body)
    assert good.status == 200

    # A reload that works and one that does not: the hooks stay, the failure is counted.
    server.signal(signal.SIGUSR1)
    assert wait_until(lambda: server.log.count("found 6 hook(s) in file") == 2)
    server.write_hooks("[{")
    server.signal(signal.SIGHUP)
    assert server.wait_for_log("couldn't load hooks from file!")

    def counted() -> bool:
        return samples(server).get(("hookrunner_command_runs_total", (("hook", "signed"), ("status", "0")))) == 1

    assert wait_until(counted, timeout=10), samples(server)  # `signed` runs in the background
    got = samples(server)

    def value(name: str, **labels: str) -> float | None:
        return got.get((name, tuple(sorted(labels.items()))))

    requests = {
        (dict(labels)["hook"], dict(labels)["outcome"]): v
        for (name, labels), v in got.items()
        if name == "hookrunner_requests_total"
    }
    assert requests == {
        ("ok", "served"): 2,
        ("ok", "rules_not_satisfied"): 2,
        ("fail", "served"): 1,
        ("killed", "served"): 1,
        ("missing-command", "served"): 1,
        ("post-only", "method_not_allowed"): 1,
        ("", "not_found"): 2,  # unknown ids never become a label value
        ("signed", "signature_error"): 1,
        ("signed", "served"): 1,
    }
    runs = {
        (dict(labels)["hook"], dict(labels)["status"]): v
        for (name, labels), v in got.items()
        if name == "hookrunner_command_runs_total"
    }
    assert runs == {
        ("ok", "0"): 2,
        ("fail", "3"): 1,
        ("killed", "signal"): 1,
        ("missing-command", "not_found"): 1,
        ("signed", "0"): 1,
    }
    assert value("hookrunner_command_duration_seconds_count", hook="ok") == 2
    assert value("hookrunner_command_duration_seconds_count", hook="fail") == 1
    assert value("hookrunner_command_duration_seconds_count", hook="missing-command") is None
    assert (value("hookrunner_command_duration_seconds_bucket", hook="ok", le="+Inf")) == 2
    assert value("hookrunner_commands_running") == 0
    assert value("hookrunner_commands_queued") == 0
    assert value("hookrunner_hooks_loaded") == 6
    assert value("hookrunner_reloads_total", result="success") == 1
    assert value("hookrunner_reloads_total", result="failure") == 1


def test_metrics_endpoint_methods_and_running_gauge(tmp_path: Path, servers: list[Server]) -> None:
    gate = tmp_path / "gate"
    hooks = [python_hook("slow", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)")]
    server = start(tmp_path, servers, hooks, "-metrics")
    assert http_request(server.port, "POST", "/hooks/slow").status == 200  # runs in the background
    assert wait_until(lambda: samples(server)[("hookrunner_commands_running", ())] == 1)
    gate.touch()
    assert wait_until(lambda: samples(server)[("hookrunner_commands_running", ())] == 0)
    head = http_request(server.port, "HEAD", "/metrics")
    assert head.status == 200 and head.body == b""
    post = http_request(server.port, "POST", "/metrics")
    assert post.status == 405 and post.header("Allow") == "GET, HEAD"


def test_without_the_flag_metrics_is_gos_404_and_a_hook_may_own_it(tmp_path: Path, servers: list[Server]) -> None:
    hooks = [{"id": "metrics", "execute-command": "/bin/true", "response-message": "the hook"}]
    plain = start(tmp_path, servers, hooks)
    answer = http_request(plain.port, "GET", "/metrics")
    assert (answer.status, answer.body) == (404, b"404 page not found\n")
    noprefix = start(tmp_path, servers, hooks, "-urlprefix=")
    assert http_request(noprefix.port, "GET", "/metrics").body == b"the hook"
    # With -metrics, /metrics is the metrics, as docs/observability.md says; the host's, which the run owner
    # keeps: asked once the worker has one (readiness), since `/` answers before the owner greets it.
    both = start(tmp_path, servers, hooks, "-urlprefix=", "-metrics")
    assert wait_until(lambda: http_request(both.port, "GET", "/healthz?ready").status == 200), both.log
    assert b"hookrunner_hooks_loaded 1.0" in http_request(both.port, "GET", "/metrics").body


def test_a_scrape_the_run_owner_cannot_answer_is_503_never_an_empty_200(
    tmp_path: Path, servers: list[Server]
) -> None:
    """Every family is the host's, kept by the run owner: a scrape it does not answer (stopped here; at start,
    before its hello; while it is replaced) fails as Prometheus expects a target that cannot be read to."""
    hooks = [{"id": "pushed", "execute-command": "/bin/true"}]
    server = start(tmp_path, servers, hooks, "-metrics")
    assert wait_until(lambda: http_request(server.port, "GET", "/healthz?ready").status == 200), server.log
    assert http_request(server.port, "POST", "/hooks/pushed").status == 200
    owner = run_owner_pids(server.process.pid)[0]
    os.kill(owner, signal.SIGSTOP)
    try:
        away = http_request(server.port, "GET", "/metrics")
    finally:
        os.kill(owner, signal.SIGCONT)
    assert (away.status, away.body) == (503, b"The metrics cannot be read now; try again later.")
    assert away.header("Retry-After") == "1"
    assert away.header("Content-Type") == "text/plain; charset=utf-8"
    # The owner back, the same counters: nothing was lost meanwhile.
    got = samples(server)
    assert got[("hookrunner_requests_total", (("hook", "pushed"), ("outcome", "served")))] == 1
    assert got[("hookrunner_hooks_loaded", ())] == 1
    assert "Traceback" not in server.log


# --- JSON logs ----------------------------------------------------------------------------------------


def test_every_json_log_line_parses(tmp_path: Path, servers: list[Server]) -> None:
    hooks = [
        python_hook("out", "import sys; sys.stdout.buffer.write(b'line one\\nline two \\xff\\n'); sys.exit(2)",
                    **{"include-command-output-in-response": True,
                       "trigger-rule": {"or": [match("value", "url", "k", value="v"),
                                               match("regex", "url", "r", regex="^ok$")]}}),
    ]
    server = start(tmp_path, servers, hooks, "-log-format", "json", "-debug", "-metrics")
    assert http_request(server.port, "POST", "/hooks/out?k=v", [("Content-Type", "application/json")],
                        b'{"x": [1, 2]}').status == 500
    assert http_request(server.port, "POST", "/hooks/out?k=x&r=no").status == 200
    assert http_request(server.port, "GET", "/hooks/unknown").status == 404
    assert http_request(server.port, "GET", "/healthz?ready").status == 200
    assert http_request(server.port, "GET", "/metrics").status == 200
    assert server.wait_for_log('"event": "access", "msg": "200 | ')
    assert wait_until(lambda: server.log.count('"uri": "/metrics"') == 1)
    assert server.stop() == 0

    lines = server.log.splitlines()
    entries = [json.loads(line) for line in lines]  # every line, start-up and shut-down included
    assert len(entries) > 20
    for entry in entries:
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$", entry["time"])
        assert entry["level"] in ("debug", "info", "warn", "error")
        assert isinstance(entry["msg"], str)
    assert not any(LOG_LINE.match(line) for line in lines)

    by_event: dict[str, list[dict[str, object]]] = {}
    for entry in entries:
        by_event.setdefault(str(entry.get("event")), []).append(entry)
    assert [e["hook"] for e in by_event["matched"]] == ["out", "out"]
    assert [e["hook"] for e in by_event["triggered"]] == ["out"]
    output = next(e for e in entries if str(e["msg"]).startswith("command output: "))
    assert output["msg"] == "command output: line one\nline two \ufffd"
    assert output["request_id"] == by_event["triggered"][0]["request_id"]
    assert (output["hook"], output["event"]) == ("out", "command_output")
    assert [e["hook"] for e in by_event["command_finished"]] == ["out"]
    assert any(e["level"] == "error" and e["msg"] == "error occurred: exit status 2" for e in entries)
    (explanation,) = by_event["rule_explanation"]
    assert explanation["fields"] == {"clauses": [
        {"path": "or[0].match", "type": "value", "parameter": "url:k", "value": '"x"',
         "reason": "not the configured value"},
        {"path": "or[1].match", "type": "regex", "parameter": "url:r", "value": '"no"',
         "reason": 'no match for regex "^ok$"'},
    ]}
    # The access log: one entry per request, with its fields.
    access = [e for e in by_event["access"] if e["fields"]["uri"] != "/"]  # type: ignore[index]  # ready()
    assert [(e["fields"]["method"], e["fields"]["uri"], e["fields"]["status"]) for e in access] == [  # type: ignore[index]
        ("POST", "/hooks/out?k=v", 500),
        ("POST", "/hooks/out?k=x&r=no", 200),
        ("GET", "/hooks/unknown", 404),
        ("GET", "/healthz?ready", 200),
        ("GET", "/metrics", 200),
    ]
    # -debug dumps hook requests (and `/`) each way; health and metrics are not dumped.
    dumped = {e["request_id"] for e in by_event["request_dump"]}
    assert dumped == {e["request_id"] for e in by_event["response_dump"]}
    assert {e["request_id"] for e in access[:3]} <= dumped
    assert not {e["request_id"] for e in access[3:]} & dumped
    assert any(e.get("event") == "server" for e in entries)  # gunicorn's own lines are JSON too


def test_text_format_keeps_the_access_log_one_line(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [{"id": "a", "execute-command": "/bin/true"}])
    http_request(server.port, "POST", "/hooks/a")
    assert wait_until(lambda: re.search(r"\] 200 \| 0 B \| \S+ \| 127\.0\.0\.1:\d+ \| POST /hooks/a\n", server.log))
    assert all(LOG_LINE.match(line) for line in server.log.splitlines() if line)


def test_access_log_alone_without_verbose(tmp_path: Path, servers: list[Server]) -> None:
    # upstream #695: one line per request, without the dozen lines of -verbose.
    server = start(tmp_path, servers, [{"id": "a", "execute-command": "/bin/true"}], "-verbose=false", "-access-log")
    http_request(server.port, "POST", "/hooks/a")
    http_request(server.port, "GET", "/hooks/b")
    assert wait_until(lambda: "GET /hooks/b\n" in server.log)
    lines = server.log.splitlines()
    assert all(re.match(r"^\[webhook\] [\d/: ]+ \[\w+\] \d{3} \| ", line) for line in lines), lines
    assert [line.rsplit(" | ", 1)[1] for line in lines if "/hooks/" in line] == ["POST /hooks/a", "GET /hooks/b"]


# --- why a rule failed ----------------------------------------------------------------------------------

EXPLAINED = {
    "id": "deploy",
    "execute-command": "/bin/true",
    "trigger-rule": {"and": [
        match("payload-hmac-sha256", "header", "X-Hub-Signature-256", secret=SECRET),
        {"or": [
            match("value", "header", "X-Deploy-Key", value=TOKEN),
            match("regex", "payload", "ref", regex="^refs/heads/main$"),
        ]},
        {"not": match("value", "payload", "action", value="deleted")},
    ]},
}


def test_rule_explanation_for_nested_and_or_not_without_secrets(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [EXPLAINED])

    def send(payload: dict[str, str], headers: list[tuple[str, str]]) -> str:
        body = json.dumps(payload).encode()
        answer = http_request(server.port, "POST", "/hooks/deploy",
                              [("Content-Type", "application/json"), ("X-Hub-Signature-256", sign(body)), *headers],
                              body)
        assert answer.body == b"Hook rules were not satisfied."
        # The request id of this answer is in its access line; return the lines of that request.
        assert wait_until(lambda: f"| 127.0.0.1:{server.port} | POST /hooks/deploy\n" in server.log)
        return server.log

    send({"ref": "refs/heads/dev"}, [("X-Deploy-Key", "a-wrong-key")])
    send({"ref": "refs/heads/main", "action": "deleted"}, [("X-Deploy-Key", TOKEN)])
    send({"ref": "refs/heads/dev"}, [("X-Deploy-Key", "x" * 200)])
    assert wait_until(lambda: server.log.count("POST /hooks/deploy\n") == 3)
    log = server.log
    mismatch = "deploy got matched, but didn't get triggered because the trigger rules were not satisfied"
    explained = re.findall(r"\[(\w+)\] " + re.escape(mismatch) + r"\n\[webhook\] [\d/: ]+ \[(\w+)\] (.*)\n", log)
    assert [(rid == rid2, text) for rid, rid2, text in explained] == [
        (True, 'deploy trigger rules not satisfied because: '
               'and[1].or[0].match value header:X-Deploy-Key saw "a-wrong-key": not the configured value; '
               'and[1].or[1].match regex payload:ref saw "refs/heads/dev": no match for regex "^refs/heads/main$"'),
        (True, "deploy trigger rules not satisfied because: "
               "and[2].not.match value payload:action saw <redacted>: matched, and a `not` above negates it"),
        (True, 'deploy trigger rules not satisfied because: '
               f'and[1].or[0].match value header:X-Deploy-Key saw "{"x" * 80}"... (200 chars): not the configured value; '
               'and[1].or[1].match regex payload:ref saw "refs/heads/dev": no match for regex "^refs/heads/main$"'),
    ]
    assert SECRET not in log
    assert TOKEN not in log
    assert "x" * 81 not in log


def test_explanation_only_at_verbose_and_never_the_secret_in_json(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [EXPLAINED], "-log-format=json")
    body = b'{"ref": "refs/heads/dev"}'
    http_request(server.port, "POST", "/hooks/deploy",
                 [("Content-Type", "application/json"), ("X-Hub-Signature-256", sign(body)),
                  ("X-Deploy-Key", TOKEN + "-but-longer")], body)
    assert server.wait_for_log('"event": "access"')
    entries = [json.loads(line) for line in server.log.splitlines()]
    (explanation,) = [e for e in entries if e.get("event") == "rule_explanation"]
    assert explanation["hook"] == "deploy"
    assert explanation["fields"]["clauses"][0]["value"] == '"<redacted>-but-longer"'
    assert SECRET not in server.log and TOKEN not in server.log


# --- readiness ----------------------------------------------------------------------------------------


def test_readiness_while_the_hooks_file_is_broken(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, "[{ this is not a hooks file", "-hotreload", "-metrics")
    assert "couldn't load hooks from file!" in server.log

    def ready() -> int:
        return http_request(server.port, "GET", "/healthz?ready").status

    live = http_request(server.port, "GET", "/healthz")
    assert (live.status, live.body) == (200, b"OK")  # alive: the process answers
    not_ready = http_request(server.port, "GET", "/healthz?ready")
    assert (not_ready.status, not_ready.body) == (503, b"No hooks are loaded.")
    assert http_request(server.port, "GET", "/").body == b"OK"  # `/` is webhook's, unchanged

    replace_hooks(server, json.dumps([{"id": "a", "execute-command": "/bin/true"}]))
    assert wait_until(lambda: ready() == 200)
    # Broken again: the last good hooks keep being served, so the runner stays ready.
    replace_hooks(server, "[{ broken again")
    assert wait_until(lambda: samples(server)[("hookrunner_reloads_total", (("result", "failure"),))] >= 1)
    assert ready() == 200
    assert http_request(server.port, "POST", "/hooks/a").status == 200
    os.remove(server.hooks_path)
    assert wait_until(lambda: ready() == 503)
    assert samples(server)[("hookrunner_hooks_loaded", ())] == 0


def test_healthz_is_outside_the_hooks_and_a_hook_keeps_it_without_prefix(
    tmp_path: Path, servers: list[Server]
) -> None:
    hooks = [{"id": "healthz", "execute-command": "/bin/true", "response-message": "the hook"}]
    server = start(tmp_path, servers, hooks, "-urlprefix=")
    assert http_request(server.port, "GET", "/healthz?ready").body == b"the hook"
    other = start(tmp_path, servers, hooks)
    assert http_request(other.port, "GET", "/healthz?ready").body == b"OK"
    assert http_request(other.port, "GET", "/hooks/healthz").body == b"the hook"
    assert http_request(other.port, "DELETE", "/healthz").status == 405
