"""The admin listener's Flask app: the run history's JSON API (/api/v1/) and its status pages, with their
own templates and static files (nothing fetched from elsewhere: Content-Security-Policy default-src
'self'); every request needs the bearer token when -admin-token-file is given. docs/history.md."""

from __future__ import annotations

import base64
import hmac
import re
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, abort, jsonify, render_template, request, url_for
from werkzeug.exceptions import HTTPException

from hookrunner.config import Config
from hookrunner.ops.log import log
from hookrunner.serve.adminfollow import FOLLOWER, Followers
from hookrunner.state.backend import HistoryReader, StateUnavailable
from hookrunner.state.model import FINAL_OUTCOMES, OUTCOMES

#: Sent with every answer: nothing but this listener's own files, never in a frame.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

#: Runs per page, unless ?limit= says otherwise (at most MAX_LIMIT); recent runs in a hook's strip.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
STRIP_RUNS = 30

_TIMES = ("accepted_at", "started_at", "ended_at", "loaded_at")
# Terminal escapes (CSI and OSC sequences, and lone ESC pairs), then the other control characters.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class BadQuery(HTTPException):
    code = 400


def iso_time(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def output_text(output: bytes) -> str:
    """A run's output for a page: UTF-8 (invalid bytes as U+FFFD), terminal escapes dropped, other control
    characters as U+FFFD; the template escapes the rest."""
    text = output.decode("utf-8", "replace")
    return _CONTROLS.sub("\ufffd", _ANSI.sub("", text.replace("\r\n", "\n")))


def api_record(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record as the API gives it: times in RFC 3339 (UTC), output as text and as base64."""
    result = {name: value for name, value in record.items() if name != "output"}
    for name in _TIMES:
        if name in result:
            result[name] = iso_time(result[name])
    if "output" in record:
        raw = bytes(record["output"])
        result["output"] = raw.decode("utf-8", "replace")
        result["output_base64"] = base64.b64encode(raw).decode("ascii")
    return result


def _query() -> dict[str, Any]:
    """The runs filters from the query string; raises BadQuery (400) on a bad value."""
    args = request.args
    outcome = args.get("outcome", "")
    if outcome and outcome not in OUTCOMES:
        raise BadQuery(f"outcome must be one of {', '.join(OUTCOMES)}")
    try:
        limit = int(args.get("limit") or DEFAULT_LIMIT)
        before = int(args.get("before") or 0)
    except ValueError:
        raise BadQuery("limit and before must be whole numbers") from None
    if not 1 <= limit <= MAX_LIMIT or before < 0:
        raise BadQuery(f"limit must be 1 to {MAX_LIMIT}, before 0 or more")
    return {"hook": args.get("hook", ""), "outcome": outcome, "limit": limit, "before": before}


def create_admin_app(
    store: HistoryReader, token: bytes | None, config: Config, followers: Followers | None = None
) -> Flask:
    """The app; with `followers`, runs can be followed (?follow=1) when it is served through FollowApp."""
    app = Flask("hookrunner.serve.admin", static_url_path="/static")
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @app.before_request
    def authorize() -> Response | None:
        if token is None:
            return None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token):
            return None
        answer = jsonify({"error": "this admin listener needs Authorization: Bearer <token>"})
        answer.status_code = 401
        answer.headers["WWW-Authenticate"] = 'Bearer realm="hookrunner"'
        return answer

    @app.after_request
    def secure(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        answer = jsonify({"error": exc.description or exc.name})
        answer.status_code = exc.code or 500
        return answer

    @app.errorhandler(StateUnavailable)
    def unavailable(exc: StateUnavailable) -> Response:
        # The shared history's database is away (-state-url): the log says so once (state/pgconn.py).
        answer = jsonify({"error": f"the run history cannot be read now: {exc}"})
        answer.status_code = 503
        answer.headers["Retry-After"] = str(exc.retry_after)
        return answer

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        # The history's store failing (a locked or broken database file): one line in the log, no
        # traceback to the client or the log, and the listener goes on.
        log.output(f"admin listener: {request.method} {request.path}: {type(exc).__name__}: {exc}")
        answer = jsonify({"error": "the run history could not be read; see hookrunner's log"})
        answer.status_code = 500
        return answer

    # --- the JSON API ---

    @app.get("/api/v1/hooks")
    def api_hooks() -> Response:
        hooks = store.hooks()
        for hook in hooks:
            hook["loaded_at"] = iso_time(hook["loaded_at"])
            if hook["last_run"] is not None:
                hook["last_run"] = api_record(hook["last_run"])
        return jsonify({"hooks": hooks})

    @app.get("/api/v1/runs")
    def api_runs() -> Response:
        query = _query()
        runs = store.runs(**query)
        following = runs[-1]["seq"] if len(runs) == query["limit"] else None
        return jsonify({"runs": [api_record(run) for run in runs], "next_before": following})

    # An id from X-Request-Id may hold a slash.
    @app.get("/api/v1/runs/<path:run_id>")
    def api_run(run_id: str) -> Response:
        record = store.run(run_id)
        if record is None:
            abort(404, f"no run {run_id} in the history")
        return jsonify(api_record(record))

    @app.get("/api/v1/runs/<path:run_id>/output")
    def api_output(run_id: str) -> Response:
        if followers is None or request.args.get("follow") not in ("1", "true"):
            return api_run(f"{run_id}/output")  # as before: the run whose id ends in /output
        follower = followers.follow(run_id)
        if follower is None:
            abort(404, f"no run {run_id} in the history")
        request.environ[FOLLOWER] = follower
        answer = Response(b"", mimetype="text/event-stream")
        answer.headers["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
        return answer

    # --- the pages ---

    @app.template_filter("when")
    def when(value: float | None) -> str:
        text = iso_time(value)
        return text.replace("T", " ")[:-5] if text else ""

    @app.template_filter("seconds")
    def seconds(value: float | None) -> str:
        if value is None:
            return ""
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"

    @app.template_filter("size")
    def size(value: int | None) -> str:
        """An output's size: bytes, then KiB and MiB with one decimal."""
        count = value or 0
        if count < 1024:
            return f"{count} B"
        return f"{count / 1024:.1f} KiB" if count < 1 << 20 else f"{count / (1 << 20):.1f} MiB"

    @app.context_processor
    def shared() -> dict[str, Any]:
        return {
            "outcomes": OUTCOMES,
            "final_outcomes": FINAL_OUTCOMES,
            "keep": config.state_keep,
            "durable": bool(config.state_dir),
            "shared": bool(config.state_url),
        }

    @app.get("/")
    def index() -> str:
        hooks = store.hooks()
        for hook in hooks:
            hook["strip"] = list(reversed(store.runs(hook=hook["id"], limit=STRIP_RUNS)))
        return render_template("index.html", hooks=hooks, runs=store.runs(limit=20))

    @app.get("/runs")
    def runs_page() -> str:
        try:
            query = _query()
        except BadQuery as exc:
            abort(400, exc.description)
        runs = store.runs(**query)
        older = None
        if len(runs) == query["limit"]:
            older = url_for("runs_page", **{**query, "before": runs[-1]["seq"]})
        hooks = sorted({hook["id"] for hook in store.hooks()})
        return render_template("runs.html", runs=runs, query=query, older=older, hook_ids=hooks)

    @app.get("/runs/<path:run_id>")
    def run_page(run_id: str) -> str:
        record = store.run(run_id)
        if record is None:
            abort(404, f"no run {run_id} in the history")
        follow = None
        if followers is not None and record["outcome"] not in FINAL_OUTCOMES:
            follow = url_for("api_output", run_id=run_id, follow=1)
        return render_template(
            "run.html", run=record, output=output_text(bytes(record["output"])), follow=follow
        )

    return app
