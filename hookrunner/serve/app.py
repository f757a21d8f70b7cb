"""The Flask app: webhook's routes, status codes, messages and log lines, answer for answer."""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from flask import Flask, copy_current_request_context, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wrappers import Response as WerkzeugResponse

from hookrunner.config import Config
from hookrunner.errors import (
    ArgumentError,
    HookrunnerError,
    HooksNotCurrent,
    MultipartError,
    ParameterNodeError,
    PayloadParseError,
    SignatureError,
    SourceError,
    as_value,
)
from hookrunner.golang.json import decode_json_map
from hookrunner.golang.status import is_known_status, status_line
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.url import go_parse_query
from hookrunner.hooks.bodies import parse_form_payload, parse_json_payload, parse_multipart, parse_xml_payload
from hookrunner.hooks.explain import explain, explanation_text
from hookrunner.hooks.load import HookRegistry
from hookrunner.hooks.model import Hook
from hookrunner.hooks.params import ReplacePanicError, argument_value, replace_parameter
from hookrunner.hooks.request import Request, canonical_header_key
from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.run.executor import CommandRunner
from hookrunner.run.ownerclient import OwnerClient
from hookrunner.serve.answers import (
    BODY_FAILED_KEY,
    HEADER_LIST_KEY,
    MSG_COMMAND_ERROR,
    MSG_MISMATCH,
    MSG_MULTIPART,
    MSG_NOT_FOUND,
    MSG_RULE_ERROR,
    MSG_UNAVAILABLE,
    MSG_UNJOURNALED,
    TEXT_PLAIN,
    Answer,
    CappedInput,
    answer,
    clean_path,
    go_duration,
    go_method,
    go_request_headers,
    go_request_path,
    humanize_bytes,
    metrics_answer,
    read_body,
)
from hookrunner.serve.proxies import forwarded_client, parse_networks
from hookrunner.serve.ratelimit import TokenBuckets, too_fast
from hookrunner.serve.routes import method_allowed, routed_hook
from hookrunner.serve.stream import StreamedAnswer, StreamPipe, stream_answer
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.journal import JournalUnwritable
from hookrunner.state.slots import Busy

#: Bodies at least this long are parsed by `Parsing.run` (off the gevent worker's event loop); shorter ones
#: take less time to parse than to hand to a thread.
PARSE_ELSEWHERE_BYTES = 64 * 1024

_PARSED_KEY = "hookrunner.parsed_request"


class Parsing:
    """Where a big body is parsed: here by default (a threaded worker's request thread). The gevent worker
    sets `run` to a call on a native thread of its own pool, so that its one event loop keeps serving
    every other connection while a body of megabytes is parsed (docs/limits.md, robustness)."""

    @staticmethod
    def run(work: Callable[[], Any]) -> Any:
        return work()

    @staticmethod
    def release(parsed: list[Any]) -> None:
        """Drop a big parsed request (the one item of `parsed`): here by default; the gevent worker frees
        it on a parser thread, piece by piece, since freeing millions of values at once holds the GIL."""
        parsed.clear()
        Parsing.freed()

    freed = staticmethod(lambda: None)  # told once a released parse is freed (its memory is given back)


class HookApp:
    """Holds what the routes need; the Flask app calls into it."""

    def __init__(self, config: Config, registry: HookRegistry, runner: CommandRunner | OwnerClient) -> None:
        self.config = config
        self.registry = registry
        self.runner = runner
        self.global_headers = {canonical_header_key(h.name): h.value for h in config.headers}
        self.allowed_methods = config.allowed_methods
        self.trusted_proxies = parse_networks(config.trusted_proxies)
        rps, burst = config.rate_limit_rps, config.rate_limit_burst
        self.rate_limits = TokenBuckets(rps, burst) if config.rate_limit_enabled else None
        # -metrics: the metric objects live as long as the app (created in the master, used in the worker).
        host = runner if isinstance(runner, OwnerClient) else None  # the run owner counts the host's
        self.metrics = metrics.enable(registry, runner, host) if config.metrics else None
        if self.metrics is None:
            metrics.disable()

    # --- request ids and the access log -------------------------------------------------------------

    def request_id(self) -> str:
        if self.config.x_request_id:
            given = request.headers.get("X-Request-Id", "")
            limit = self.config.x_request_id_limit
            if limit > 0 and len(given.encode()) > limit:
                given = given.encode()[:limit].decode("utf-8", "replace")
            if given:
                return given
        # Six random hex digits, as webhook's ids; getrandbits, unlike uuid4, needs no urandom syscall.
        return f"{random.getrandbits(24):06x}"

    def access_log(self, rid: str, response: Answer, started: float) -> None:
        if not log.wants("access"):
            return
        environ = request.environ
        uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path.rstrip("?")
        size = response.body_size()
        elapsed = time.perf_counter() - started
        log.request(
            rid,
            f"{response.status_code:03d} | {humanize_bytes(size)} | "
            f"{go_duration(elapsed)}"
            f" | {request.environ.get('HTTP_HOST', '')} | {go_method()} {uri}",
            event="access",
            fields={
                "status": response.status_code,
                "bytes": size,
                "duration_ms": round(elapsed * 1000, 3),
                "host": request.environ.get("HTTP_HOST", ""),
                "method": go_method(),
                "uri": uri,
            },
        )

    # --- -debug: webhook's request/response dumper ---------------------------------------------------

    def dump_request(self, rid: str) -> None:
        """Go's httputil.DumpRequest, each line prefixed `> [id] `, written straight to the log."""
        environ = request.environ
        uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path.rstrip("?")
        lines = [f"{go_method()} {uri} {environ.get('SERVER_PROTOCOL', 'HTTP/1.1')}"]
        host = request.environ.get("HTTP_HOST", "")
        if not uri.startswith(("http://", "https://")) and host:
            lines.append(f"Host: {host}")
        chunked = environ.get("HTTP_TRANSFER_ENCODING", "")
        if chunked:
            lines.append(f"Transfer-Encoding: {chunked}")
        headers = go_request_headers(environ)
        headers.pop("Trailer", None)
        lines += [f"{key}: {headers[key]}" for key in sorted(headers)]
        lines.append("")
        body = request.get_data(cache=True)
        if body:
            lines += body.decode("utf-8", "replace").splitlines()
        text = "".join(f"> [{rid}] {line}\n" for line in lines)
        log.raw(text, request_id=rid, event="request_dump", plain="\n".join(lines))

    def dump_response(self, rid: str, response: Answer) -> None:
        """The dumper's view of the answer: WriteHeader's code (`0 ` if never called), headers, body."""
        status = response.written_status
        phrase = status_line(status).partition(" ")[2] if is_known_status(status) else ""
        out = [f"< [{rid}] {status} {phrase}\n"]
        written = response.written_headers
        out += [f"< [{rid}] {key}: {written[key]}\n" for key in sorted(written)]
        body = response.get_data()
        if body:
            out.append(f"< [{rid}]\n")
            out += [f"< [{rid}] {line}\n" for line in body.decode("utf-8", "replace").splitlines()]
        log.raw("".join(out), request_id=rid, event="response_dump",
                plain="\n".join(line[len(f"< [{rid}]") :].strip() for line in out))

    # --- routes -------------------------------------------------------------------------------------

    def root(self) -> Answer:
        started = time.perf_counter()
        rid = self.request_id()
        if self.config.debug:
            self.dump_request(rid)
        response = answer(0, b"OK", self.global_headers)
        if self.config.debug:
            self.dump_response(rid, response)
        self.access_log(rid, response, started)
        return response

    # --- beyond the reference: metrics and health (docs/observability.md) ----------------------------

    def known_id(self, hook_id: str) -> str:
        """The metrics label for an id: the id when it is loaded, else "" (a scanner adds no series)."""
        return hook_id if self.registry.match(hook_id) is not None else ""

    def observe(self, kind: str) -> Answer:
        """`/metrics` (with -metrics) and `/healthz`: GET and HEAD only, each with a one-line access log."""
        started = time.perf_counter()
        rid = self.request_id()
        if go_method() not in ("GET", "HEAD"):
            response = answer(405, b"", {**self.global_headers, "Allow": "GET, HEAD"})
        elif kind == "metrics":
            assert self.metrics is not None
            response = metrics_answer(self.metrics, request.headers.get("Accept", ""), self.global_headers)
        elif "ready" in request.args and len(self.registry) == 0:
            # Readiness: a runner whose hooks files gave no hooks should get no traffic.
            response = answer(503, b"No hooks are loaded.", self.global_headers, TEXT_PLAIN)
        elif "ready" in request.args and not self.runner.accepts_runs():  # the run owner's answer
            unready = MSG_UNAVAILABLE if self.config.state_url else MSG_UNJOURNALED  # docs/operations.md
            response = answer(503, unready, self.global_headers, TEXT_PLAIN)
        else:
            response = answer(200, b"OK", self.global_headers, TEXT_PLAIN)
        self.access_log(rid, response, started)
        return response

    def hook(self, hook_id: str = "") -> Answer:
        try:
            return self._hook(hook_id)
        finally:
            # Whatever happened, a big parsed body is handed back (the gevent worker's collector waits).
            parsed = request.environ.pop(_PARSED_KEY, None)
            if parsed is not None:
                Parsing.release([parsed])

    def _hook(self, hook_id: str) -> Answer:
        started = time.perf_counter()
        rid = self.request_id()
        if self.config.debug:
            self.dump_request(rid)
        try:
            limited = too_fast(self.rate_limits, self.client, self.global_headers)
            response = self.handle(rid, hook_id) if limited is None else limited
        except RequestEntityTooLarge:
            log.request(rid, f"request body larger than {self.config.max_body_size} bytes, answering 413")
            metrics.record_request(self.known_id(hook_id), metrics.ERROR)
            response = answer(413, b"Request body too large.", dict(self.global_headers))
        except ReplacePanicError as exc:
            # webhook's handler panics here; chi's recoverer answers with http.Error's 500.
            log.request(rid, f"panic: {exc}")
            metrics.record_request(self.known_id(hook_id), metrics.ERROR)
            headers = {**self.global_headers, "X-Content-Type-Options": "nosniff"}
            response = answer(500, b"Internal Server Error\n", headers, TEXT_PLAIN)
        except HooksNotCurrent as why:  # this worker could not catch up with the run owner's hooks
            log.request(rid, f"hooks not current: {why}, answering 503", level="error", event="unavailable")
            retry = {**self.global_headers, "Retry-After": str(why.retry_after)}
            response = answer(503, MSG_UNAVAILABLE, retry)
        if request.environ.get(BODY_FAILED_KEY):
            response.headers["Connection"] = "close"  # net/http does not reuse it after a broken body
        finish = partial(self.answered, rid, response, started)
        if isinstance(response, StreamedAnswer):  # logged once its last byte has gone out
            response.call_on_close(copy_current_request_context(finish))
        else:
            finish()
        return response

    def answered(self, rid: str, response: Answer, started: float) -> None:
        if self.config.debug:
            self.dump_response(rid, response)
        self.access_log(rid, response, started)

    def handle(self, rid: str, hook_id: str) -> Answer:
        method = go_method()
        remote_addr = self.remote_addr()
        log.request(rid, f"incoming HTTP {method} request from {remote_addr}\n", event="incoming")
        hook = self.registry.match_latest(hook_id)  # the hooks the run owner last published
        if hook is None:
            metrics.record_request("", metrics.NOT_FOUND)  # unknown ids share one label
            return answer(404, MSG_NOT_FOUND, {})
        if not self.method_allowed(hook, method):
            log.request(rid, f"HTTP {method} method not allowed for hook {go_quote(hook_id)}",
                        level="warn", hook=hook.id, event="method_not_allowed")
            metrics.record_request(hook.id, metrics.METHOD_NOT_ALLOWED)
            return answer(405, b"", {})
        log.request(rid, f"{hook_id} got matched\n", hook=hook.id, event="matched")
        headers = dict(self.global_headers)

        req = self.parse_request(rid, hook, remote_addr)
        if isinstance(req, Answer):
            metrics.record_request(hook.id, metrics.ERROR)
            return req
        for error in self.parse_json_parameters(hook, req):
            log.request(rid, f"error parsing JSON parameters: {error}\n")

        ok = True
        if hook.trigger_rule is not None:
            req.allow_signature_errors = hook.signature_soft_failures
            # Go's (result, error) pair: `not` over a missing parameter is true *and* carries the error.
            ok, error = hook.trigger_rule.check(req)
            if error is not None:
                if not isinstance(error, ParameterNodeError):
                    log.request(rid, f"error evaluating hook: {error}", level="error", hook=hook.id,
                                event="rule_error")
                    bad_signature = isinstance(error, SignatureError)
                    outcome = metrics.SIGNATURE_ERROR if bad_signature else metrics.RULE_ERROR
                    metrics.record_request(hook.id, outcome)
                    return answer(500, MSG_RULE_ERROR, headers)
                log.request(rid, str(error), hook=hook.id, event="parameter_not_found")

        if not ok:
            status = self.configured_status(rid, hook, hook.mismatch_status)
            log.request(
                rid,
                f"{hook.id} got matched, but didn't get triggered "
                "because the trigger rules were not satisfied\n",
                hook=hook.id,
                event="rules_not_satisfied",
            )
            if log.wants() and hook.trigger_rule is not None:
                self.log_explanation(rid, hook, req)
            metrics.record_request(hook.id, metrics.RULES_NOT_SATISFIED)
            return answer(status, MSG_MISMATCH, headers)

        log.request(rid, f"{hook.id} hook triggered successfully\n", hook=hook.id, event="triggered")
        for header in hook.response_headers:
            headers[canonical_header_key(header.name)] = header.value
        try:
            return self.run_hook(rid, hook, req, headers)
        except StateUnavailable as why:  # the run owner could not take the run, or went away with it
            log.request(rid, f"{hook.id}: runs cannot be accepted now ({why}), answering 503", level="error",
                        hook=hook.id, event="unavailable")
            return answer(503, MSG_UNAVAILABLE, {**headers, "Retry-After": str(why.retry_after)})

    def run_hook(self, rid: str, hook: Hook, req: Request, headers: dict[str, str]) -> Answer:
        """Hand the run over and answer as the hook says: at once, with its output, or streaming it."""
        pipe = StreamPipe(self.runner.waits, self.config.stream_buffer) if hook.stream_output else None
        try:
            future = self.runner.submit(
                hook, req, pipe is None and not hook.capture_output, pipe
            )
        except Busy as busy:
            log.request(rid, f"{hook.id} is busy: concurrency limit and queue full, answering 429",
                        level="warn", hook=hook.id, event="busy")
            metrics.record_request(hook.id, metrics.BUSY)
            headers["Retry-After"] = str(busy.retry_after)
            return answer(429, b"Too many runs of this hook are already running or queued.", headers)
        except JournalUnwritable as unwritable:
            log.request(rid, f"{hook.id}: the run journal cannot be written, answering 503", level="error",
                        hook=hook.id, event="unjournaled")
            metrics.record_request(hook.id, metrics.UNJOURNALED)
            return answer(503, MSG_UNJOURNALED, {**headers, "Retry-After": str(unwritable.retry_after)})
        metrics.record_request(hook.id, metrics.SERVED)
        if pipe is not None:  # soulteary's precedence: streaming before include-command-output-in-response
            status = self.configured_status(rid, hook, hook.success_status)
            sock, limit = request.environ.get("gunicorn.socket"), self.config.stream_write_timeout
            return stream_answer(pipe, future, self.runner, rid, hook.id, status, headers, limit, sock)
        if hook.capture_output:
            result = self.runner.wait_for(future)
            if not result.ok:
                if hook.capture_output_on_error:
                    return answer(500, result.output, headers)
                return answer(500, MSG_COMMAND_ERROR, headers, TEXT_PLAIN, type_after_status=True)
            status = self.configured_status(rid, hook, hook.success_status)
            return answer(status, result.output, headers)
        status = self.configured_status(rid, hook, hook.success_status)
        return answer(status, hook.response_message.encode("utf-8", "surrogateescape"), headers)

    # --- pieces of the handler ----------------------------------------------------------------------

    def method_allowed(self, hook: Hook, method: str) -> bool:
        return method_allowed(hook, method, self.allowed_methods)

    def log_explanation(self, rid: str, hook: Hook, req: Request) -> None:
        """One extra line after webhook's mismatch line: the clauses that decided it, secrets redacted."""
        clauses = explain(hook.trigger_rule, req)
        if not clauses:
            return
        log.request(
            rid,
            explanation_text(hook.id, clauses),
            hook=hook.id,
            event="rule_explanation",
            fields={
                "clauses": [
                    {
                        "path": c.path,
                        "type": c.type,
                        "parameter": c.parameter,
                        "value": c.value,
                        "reason": c.reason,
                    }
                    for c in clauses
                ]
            },
        )

    def configured_status(self, rid: str, hook: Hook, code: int) -> int:
        """The hook's configured code, or 0 (Go's implicit 200) when none or an unknown one is set."""
        if code == 0:
            return 0
        if not is_known_status(code):
            log.request(
                rid,
                f"{hook.id} got matched, but the configured return code {code} is unknown "
                "- defaulting to 200\n",
            )
            return 0
        return code

    def remote_addr(self) -> str:
        host, port = self.client()
        if not host:
            return "@"  # a unix socket peer, as Go reports it
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{port}"

    def client(self) -> tuple[str, str]:
        """The client's (address, port): the peer's, or the one a trusted proxy forwarded; ("", "") for a
        unix socket's peer."""
        environ = request.environ
        host = environ.get("REMOTE_ADDR") or ""
        port = environ.get("REMOTE_PORT") or ""
        if not host:
            return "", ""
        if host.startswith("::ffff:") and "." in host:
            # An IPv4 peer of a dual-stack listener (the default -ip): Go prints the IPv4 address.
            host = host[len("::ffff:") :]
        if self.trusted_proxies:
            # -trusted-proxies (docs/limits.md): the client a trusted proxy forwarded, port unknown (0).
            header_list = environ.get(HEADER_LIST_KEY)
            if header_list is not None:
                values = [value for name, value in header_list if name.upper() == "X-FORWARDED-FOR"]
            else:
                values = [environ.get("HTTP_X_FORWARDED_FOR", "")]
            client = forwarded_client(self.trusted_proxies, host, values)
            if client is not None:
                host, port = client
        return host, port

    def parse_request(self, rid: str, hook: Hook, remote_addr: str) -> Request | Answer:
        environ = request.environ
        # The first Content-Type of repeated ones, as Go's Header.Get reads it (the worker sets it).
        request_type = environ.get("CONTENT_TYPE", "")
        content_type = hook.incoming_payload_content_type or request_type
        headers: dict[str, Any] = go_request_headers(environ)
        req = Request(
            id=rid,
            method=go_method(),
            remote_addr=remote_addr,
            content_type=content_type,
            headers=headers,
            query=dict(go_parse_query(environ.get("QUERY_STRING", "").encode("latin-1"))[0]),
        )
        multipart = content_type.startswith("multipart/form-data;")
        if not multipart:
            # Under -debug the dumper has already read (and cached) the body; a server that does not end
            # the input stream itself (not gunicorn: a test client) gets werkzeug's guarded reading.
            direct = not self.config.debug and "wsgi.input_terminated" in environ
            req.body = read_body(rid) if direct else request.get_data(cache=False)

        try:
            parse: Callable[[bytes], dict[str, Any] | None] | None = None
            if "json" in content_type:
                parse = parse_json_payload
            elif "x-www-form-urlencoded" in content_type:
                parse = parse_form_payload
            elif "xml" in content_type:
                parse = parse_xml_payload
            if parse is not None:
                if len(req.body) >= PARSE_ELSEWHERE_BYTES:
                    req.payload = Parsing.run(partial(parse, req.body))
                    environ[_PARSED_KEY] = req  # handed to Parsing.release once answered
                else:
                    req.payload = parse(req.body)
            elif multipart:
                names = {a.name for a in hook.json_parameters if a.source == "payload"}
                # Under -debug the dumper has already read the body into memory.
                stream = io.BytesIO(request.get_data(cache=True)) if self.config.debug else request.stream
                req.payload = parse_multipart(
                    stream,
                    request_type,
                    request.content_length,
                    self.config.max_multipart_mem,
                    names,
                    raw_query=environ.get("QUERY_STRING", "").encode("latin-1"),
                    on_log=lambda message: log.request(rid, message),
                )
            else:
                log.request(
                    rid,
                    f"error parsing body payload due to unsupported content type header: {content_type}\n",
                )
        except MultipartError as exc:
            log.request(rid, f"error parsing multipart form: {exc}\n")
            return answer(500, MSG_MULTIPART, dict(self.global_headers))
        except PayloadParseError as exc:
            log.request(rid, str(exc))
        return req

    def parse_json_parameters(self, hook: Hook, req: Request) -> list[HookrunnerError]:
        """parse-parameters-as-json: replace string values by the JSON they hold, before the rules run."""
        errors: list[HookrunnerError] = []
        for arg in hook.json_parameters:
            try:
                text = argument_value(arg, req)
            except HookrunnerError:
                errors.append(ArgumentError(arg))
                continue
            try:
                value = decode_json_map(text)
            except HookrunnerError as exc:
                errors.append(as_value(exc))
                continue
            key = arg.name
            if arg.source == "header":
                target: dict[str, Any] | None = req.headers
                key = canonical_header_key(arg.name)
            elif arg.source == "payload":
                target = req.payload
            elif arg.source in ("url", "query"):
                target = req.query
            else:
                errors.append(SourceError(arg))
                continue
            if target is not None:
                replace_parameter(key, target, value)
        return errors


class HookFlask(Flask):
    """Flask without werkzeug's URL matching of requests: `dispatch` below routes every request before any
    view would, so matching against the URL map only built a NotFound per request (without it, `GET /`
    and a rejected push are served 12-14% faster; docs/performance.md)."""

    def create_url_adapter(self, request: Any) -> Any:
        if request is not None:
            return None
        return super().create_url_adapter(request)


def create_app(config: Config, registry: HookRegistry, runner: CommandRunner | OwnerClient) -> Flask:
    """The WSGI app serving `/` and `/<urlprefix>/<id>` exactly as webhook routes them."""
    hooks = HookApp(config, registry, runner)
    app = HookFlask("hookrunner", static_folder=None)
    max_body, base = config.body_limit, config.hooks_base

    # Routing is done here, not by werkzeug's URL map: gorilla/mux's `/{prefix}/{id:.*}` keeps trailing
    # slashes and empty ids, and cleans paths with a 301, none of which werkzeug's rules reproduce.
    def dispatch() -> Answer:
        environ = request.environ
        # An answer Go's server gives before any handler runs (the protocol layer gives the others).
        if (environ.get("RAW_URI") or environ.get("REQUEST_URI")) == "*" and go_method() == "OPTIONS":
            return answer(0, b"", {"Content-Length": "0"})  # net/http's globalOptionsHandler sets it
        try:
            path = go_request_path(environ)
        except ValueError:
            return answer(400, b"400 Bad Request", {"Connection": "close"}, TEXT_PLAIN)
        cleaned = clean_path(path)
        if cleaned != path:
            query = request.environ.get("QUERY_STRING", "")
            return answer(301, b"", {"Location": cleaned + ("?" + query if query else "")})
        if path == "/":
            return hooks.root()
        # With an empty -urlprefix a loaded hook named `healthz` keeps its path.
        hook_id = routed_hook(path, base, hooks.metrics is not None, registry)
        if hook_id is not None:
            return hooks.hook(hook_id)
        if path == "/metrics" and hooks.metrics is not None:
            return hooks.observe("metrics")
        if path == "/healthz":
            return hooks.observe("health")
        return answer(404, b"404 page not found\n", {"X-Content-Type-Options": "nosniff"}, TEXT_PLAIN)

    def internal_error(exc: Exception) -> WerkzeugResponse:
        if isinstance(exc, HTTPException):
            return exc.get_response()
        # Never a traceback to the client; the log keeps the detail.
        log.output(f"panic: {type(exc).__name__}: {exc}")
        return answer(500, b"", {})

    app.before_request(dispatch)
    app.register_error_handler(Exception, internal_error)
    if max_body is not None:
        app.config["MAX_CONTENT_LENGTH"] = max_body
        flask_wsgi = app.wsgi_app

        def capped_body(environ: dict[str, Any], start_response: Any) -> Any:
            # A body of unknown length (chunked) is capped here; werkzeug would cut it short instead.
            if environ.get("CONTENT_LENGTH") is None and "wsgi.input" in environ:
                environ["wsgi.input"] = CappedInput(environ["wsgi.input"], max_body)
            return flask_wsgi(environ, start_response)

        app.wsgi_app = capped_body  # type: ignore[method-assign]
    return app
