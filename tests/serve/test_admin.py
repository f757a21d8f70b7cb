"""The admin listener's app: the /api/v1/ answers, the pages, the bearer token (constant-time compare), the
security headers, and hostile output (HTML, terminal escapes, invalid UTF-8, megabytes) shown safely."""

from __future__ import annotations

import base64
import io
import re
import sqlite3
import time

import pytest
from flask.testing import FlaskClient

from hookrunner.config import Config
from hookrunner.run.history import output_fields
from hookrunner.serve.admin import create_admin_app, output_text
from hookrunner.state.historystore import HistoryStore

HOSTILE = (
    b"<script>alert(1)</script><img src=x onerror=alert(2)>&amp;\n"
    b"\x1b[31mred\x1b[0m \x1b]0;title\x07 bell\x07 nul\x00\n"
    b"bad utf-8: \xff\xfe\xc3(\n"
)


def make_store() -> HistoryStore:
    store = HistoryStore()
    store.apply({"event": "hooks", "pid": 1, "files": [{"file": "/etc/hooks.json", "loaded_at": 1.0, "hooks": ["deploy", "idle"]}]})
    now = time.time()
    for n, outcome in enumerate(("ok", "failed", "timed_out", "refused", "cancelled", "replayed", "ok")):
        store.apply({"event": "run", "key": f"k{n}", "id": f"run{n}", "hook": "deploy", "accepted_at": now + n,
                     "outcome": outcome, "started_at": now + n, "ended_at": now + n + 0.5,
                     "exit_code": 2 if outcome == "failed" else None, "argv": ["/bin/deploy", f"<arg{n}>"],
                     "env": [["TOKEN", 6]], **output_fields(HOSTILE if n == 6 else b"fine\n", 64 << 10)})
    return store


@pytest.fixture
def client() -> FlaskClient:
    return create_admin_app(make_store(), None, Config()).test_client()


@pytest.fixture
def guarded() -> FlaskClient:
    return create_admin_app(make_store(), b"s3cret-token", Config()).test_client()


def test_hooks_api(client: FlaskClient) -> None:
    answer = client.get("/api/v1/hooks")
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    hooks = {h["id"]: h for h in answer.json["hooks"]}  # type: ignore[index]
    assert hooks["deploy"]["file"] == "/etc/hooks.json"
    assert hooks["deploy"]["loaded_at"] == "1970-01-01T00:00:01.000Z"
    assert hooks["deploy"]["last_run"]["id"] == "run6" and hooks["deploy"]["last_run"]["outcome"] == "ok"
    assert hooks["idle"]["last_run"] is None


def test_runs_api_filters_and_pages(client: FlaskClient) -> None:
    runs = client.get("/api/v1/runs").json
    assert [r["id"] for r in runs["runs"]] == [f"run{n}" for n in range(6, -1, -1)]  # type: ignore[index]
    assert runs["next_before"] is None  # type: ignore[index]
    assert [r["id"] for r in client.get("/api/v1/runs?outcome=failed").json["runs"]] == ["run1"]  # type: ignore[index]
    assert client.get("/api/v1/runs?hook=idle").json["runs"] == []  # type: ignore[index]
    page = client.get("/api/v1/runs?limit=2").json
    assert [r["id"] for r in page["runs"]] == ["run6", "run5"]  # type: ignore[index]
    following = client.get(f"/api/v1/runs?limit=2&before={page['next_before']}").json  # type: ignore[index]
    assert [r["id"] for r in following["runs"]] == ["run4", "run3"]  # type: ignore[index]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", page["runs"][0]["accepted_at"])  # type: ignore[index]


@pytest.mark.parametrize("query", ["outcome=nope", "limit=0", "limit=501", "limit=x", "before=-1"])
def test_bad_queries_are_400_in_json(client: FlaskClient, query: str) -> None:
    answer = client.get(f"/api/v1/runs?{query}")
    assert answer.status_code == 400 and "error" in answer.json  # type: ignore[operator]


def test_one_run_with_its_output(client: FlaskClient) -> None:
    record = client.get("/api/v1/runs/run6").json
    assert record["argv"] == ["/bin/deploy", "<arg6>"] and record["env"] == [["TOKEN", 6]]  # type: ignore[index]
    assert base64.b64decode(record["output_base64"]) == HOSTILE  # type: ignore[index]
    assert record["output"] == HOSTILE.decode("utf-8", "replace")  # type: ignore[index]
    assert client.get("/api/v1/runs/nope").status_code == 404


def test_every_answer_carries_the_security_headers(client: FlaskClient) -> None:
    for path in ("/", "/runs", "/runs/run1", "/api/v1/runs", "/static/admin.css", "/static/refresh.js", "/nope"):
        with client.get(path) as answer:
            assert answer.headers["Content-Security-Policy"].startswith("default-src 'self'"), path
            assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_pages_show_hooks_strips_runs_and_filters(client: FlaskClient) -> None:
    page = client.get("/").get_data(as_text=True)
    assert 'data-hook="deploy"' in page and 'data-hook="idle"' in page and "never run" in page
    assert page.count('class="bar outcome-') == 7  # the strip: one bar per run
    assert '<noscript><meta http-equiv="refresh"' in page and 'src="/static/refresh.js"' in page
    assert "http://" not in page and "https://" not in page  # nothing from elsewhere
    runs = client.get("/runs?outcome=timed_out").get_data(as_text=True)
    assert 'data-run="run2"' in runs and 'data-run="run1"' not in runs
    assert '<option value="timed_out" selected>' in runs
    older = client.get("/runs?limit=3").get_data(as_text=True)
    assert 'class="older" href="/runs?' in older


def test_hostile_output_is_escaped_on_the_run_page(client: FlaskClient) -> None:
    page = client.get("/runs/run6").get_data(as_text=True)
    output = page[page.index('<pre class="output" id="output">'):page.index("</pre>")]
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&amp;amp;" in output
    assert "\x1b" not in page and "\x00" not in page and "\x07" not in page
    assert "red  bell\ufffd nul\ufffd" in output
    assert "bad utf-8: \ufffd\ufffd\ufffd(" in output
    assert "<code>&lt;arg6&gt;</code>" in page


def test_output_text_drops_terminal_escapes() -> None:
    assert output_text(b"\x1b[1;32mgreen\x1b[0m\r\nnext\x1b]8;;http://x\x1b\\link") == "green\nnextlink"


def test_megabytes_of_output_stay_bounded() -> None:
    store = HistoryStore()
    big = b"<b>" * ((10 << 20) // 3) + b"\xff" * 100 + b"END"
    store.apply({"event": "run", "key": "k", "id": "big", "hook": "h", "outcome": "ok", **output_fields(big, 64 << 10)})
    client = create_admin_app(store, None, Config()).test_client()
    record = client.get("/api/v1/runs/big").json
    assert record["output_size"] == len(big) and record["output_truncated"] is True  # type: ignore[index]
    assert len(base64.b64decode(record["output_base64"])) == 64 << 10  # type: ignore[index]
    page = client.get("/runs/big").get_data()
    assert len(page) < 600 << 10 and b"<b>" not in page and b"END" in page


def test_token_required_everywhere(guarded: FlaskClient) -> None:
    for path in ("/", "/runs", "/runs/run1", "/api/v1/hooks", "/api/v1/runs", "/api/v1/runs/run1", "/static/admin.css"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"},
                        {"Authorization": "Bearer s3cret-token-and-more"}, {"Authorization": "Bearer "}):
            answer = guarded.get(path, headers=headers)
            assert answer.status_code == 401, (path, headers)
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert b"deploy" not in answer.get_data()
        with guarded.get(path, headers={"Authorization": "Bearer s3cret-token"}) as answer:
            assert answer.status_code == 200, path


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import hmac

    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    client = create_admin_app(make_store(), b"tok", Config()).test_client()
    assert client.get("/api/v1/runs", headers={"Authorization": "Bearer tok"}).status_code == 200
    assert seen == [(b"tok", b"tok")]


def test_a_run_id_with_a_slash() -> None:
    store = HistoryStore()
    store.apply({"event": "run", "key": "k", "id": "deploy/42", "hook": "h", "outcome": "ok"})
    client = create_admin_app(store, None, Config()).test_client()
    assert client.get("/api/v1/runs/deploy/42").json["id"] == "deploy/42"  # type: ignore[index]
    assert client.get("/runs/deploy/42").status_code == 200


def test_a_failing_store_is_one_log_line_and_a_json_500(
    monkeypatch: pytest.MonkeyPatch, log_lines: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(**_: object) -> list[dict[str, object]]:
        raise sqlite3.OperationalError("database is locked")

    store = make_store()
    monkeypatch.setattr(store, "runs", broken)
    answer = create_admin_app(store, None, Config()).test_client().get("/api/v1/runs")
    assert answer.status_code == 500
    assert answer.get_json() == {"error": "the run history could not be read; see hookrunner's log"}
    assert answer.headers["Content-Security-Policy"].startswith("default-src 'self'")
    lines = log_lines.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "admin listener: GET /api/v1/runs: OperationalError: database is locked"
    ), lines
    assert "Traceback" not in capsys.readouterr().err + answer.get_data(as_text=True)
