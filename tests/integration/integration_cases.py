"""The integration case table: one request each, with the reference's answer as the expectation.

Every expectation here was observed on the reference `webhook` 2.8.0 (see docs/compatibility.md); the
contract test holds hookrunner to it and the differential test compares the two servers byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from integration_harness import SERVER_GLOBAL_HEADERS, Outcome, ServerPool, send_case

AUTO = "<auto>"  # Content-Type: text/plain when the body is not empty, else absent
TEXT = "text/plain; charset=utf-8"

RULES_NOT_SATISFIED = b"Hook rules were not satisfied."
RULES_ERROR = b"Error occurred while evaluating hook rules."
COMMAND_ERROR = b"Error occurred while executing the hook's command. Please check your logs for more details."
MULTIPART_ERROR = b"Error occurred while parsing multipart form."
GO_404 = b"404 page not found\n"

JSON = (("Content-Type", "application/json"),)
FORM = (("Content-Type", "application/x-www-form-urlencoded"),)

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    method: str = "POST"
    headers: Headers = ()
    body: bytes = b""
    flags: str = "default"
    status: int = 200
    expect_body: bytes | None = None  # compared after normalise(); None: not asserted
    content_type: str | None = AUTO
    expect_headers: tuple[tuple[str, str | None], ...] = ()  # exact value, or None for "absent"
    global_headers: bool = True  # the -header headers are present
    logs: tuple[str, ...] = ()  # each must occur in one of the request's log messages
    interim: tuple[int, ...] = ()
    raw_request: bytes | None = None
    dynamic: Callable[[], tuple[Headers, bytes]] | None = None  # builds headers/body at send time
    files_removed: bool = False
    # A deliberate difference, documented in docs/compatibility.md under the heading named here; the
    # overrides say what hookrunner answers instead (field name -> value, applied with for_target).
    deliberate: str | None = None
    hookrunner: tuple[tuple[str, object], ...] = ()

    def for_target(self, target: str) -> Case:
        """The expectations for `target`: the reference's, or hookrunner's documented improvement."""
        if target == "hookrunner" and self.hookrunner:
            return dataclasses.replace(self, **dict(self.hookrunner))  # type: ignore[arg-type]
        return self

    def request(self) -> tuple[Headers, bytes]:
        return self.dynamic() if self.dynamic else (self.headers, self.body)

    @property
    def reaches_handler(self) -> bool:
        """Whether the request gets to the hook handler (and so logs an `incoming HTTP` line)."""
        routed_elsewhere = self.path in ("/", "*") or self.status in (301, 400)
        return not (routed_elsewhere or self.expect_body in (GO_404, b"OK"))


PORT_RE = re.compile(rb"127\.0\.0\.1:\d+")


def normalise(data: bytes) -> bytes:
    """Remote ports differ per connection: keep the shape, drop the number."""
    return PORT_RE.sub(b"127.0.0.1:<port>", data)


def run_case(pool: ServerPool, impl: str, fmt: str, case: Case) -> Outcome:
    """Send `case` to the `impl` server for the `fmt` hooks copy, once per session."""
    key = (impl, fmt, case.name)
    if key not in pool.outcomes:
        server = pool.get(impl, fmt, case.flags)
        headers, body = case.request()
        pool.outcomes[key] = send_case(
            server,
            case.method,
            case.path,
            headers,
            body,
            case.raw_request,
            case.files_removed,
            case.reaches_handler,
        )
    return pool.outcomes[key]


def mismatches(case: Case, outcome: Outcome) -> list[str]:
    """Every way `outcome` departs from the case's expectations (empty when it matches)."""
    response = outcome.response
    problems = []
    if response.status != case.status:
        problems.append(f"status {response.status}, expected {case.status}")
    if case.expect_body is not None and normalise(response.body) != case.expect_body:
        problems.append(f"body {normalise(response.body)[:300]!r}, expected {case.expect_body[:300]!r}")
    expected_type: str | None = case.content_type
    if expected_type == AUTO:
        expected_type = TEXT if response.body or case.method == "HEAD" else None
    wanted = [("Content-Type", expected_type), *case.expect_headers]
    wanted += [
        (name, value if case.global_headers else None) for name, value in SERVER_GLOBAL_HEADERS[case.flags]
    ]
    for name, value in wanted:
        if response.header(name) != value:
            problems.append(f"header {name}: {response.header(name)!r}, expected {value!r}")
    if tuple(response.interim) != case.interim:
        problems.append(f"interim answers {response.interim}, expected {list(case.interim)}")
    messages = [entry.message for entry in outcome.logs]
    for text in case.logs:
        if not any(text in message for message in messages):
            problems.append(f"log {text!r} missing")
    if case.files_removed and outcome.leftover_files:
        problems.append(f"temporary files left behind: {outcome.leftover_files}")
    return problems


def sig(algo: str, body: bytes, secret: bytes = b"mysecret") -> str:
    return hmac.new(secret, body, getattr(hashlib, algo)).hexdigest()


GH_BODY = b'{"ref":"refs/heads/master","fallback":"yes"}'
GH_NO_FALLBACK = b'{"ref":"refs/heads/master","fallback":"no"}'
BAD_SIG = "0" * 40


def scalr(
    secret: bytes, body: bytes, offset_seconds: int = 0, good: bool = True
) -> Callable[[], tuple[Headers, bytes]]:
    def build() -> tuple[Headers, bytes]:
        date = time.strftime("%a %d %b %Y %H:%M:%S UTC", time.gmtime(time.time() + offset_seconds))
        mac = hmac.new(secret, body + date.encode(), hashlib.sha1).hexdigest()
        if not good:
            mac = "f" * 40
        return (("Date", date), ("X-Signature", mac), ("Content-Type", "application/json")), body

    return build


def multipart(
    parts: list[tuple[str, str | None, str | None, bytes]], boundary: str = "XyZzY"
) -> tuple[Headers, bytes]:
    """parts: (name, filename, content-type, data)."""
    out = b""
    for name, filename, ctype, data in parts:
        out += f"--{boundary}\r\n".encode()
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"Content-Disposition: {disp}\r\n".encode()
        if ctype:
            out += f"Content-Type: {ctype}\r\n".encode()
        out += b"\r\n" + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return (("Content-Type", f"multipart/form-data; boundary={boundary}"),), out


MP_HEADERS, MP_BODY = multipart(
    [
        ("field", None, None, b"plain value"),
        ("jsonfile", "a.json", "application/json", b'{"k":"from-json-file"}'),
        ("forced", "b.txt", "text/plain", b'{"k":"forced"}'),
        ("textfile", "c.txt", "text/plain", b'{"k":"ignored"}'),
    ]
)

MP_VALUE_HEADERS, MP_VALUE_BODY = multipart(
    [("field", None, None, b"plain value"), ("forced", None, None, b'{"k":"from-value-part"}')],
    boundary="vAlUe",
)

MP_BAD_HEADERS, MP_BAD_BODY = multipart(
    [("field", None, None, b"v"), ("jsonfile", "a.json", "application/json", b'{"k":')], boundary="b0undary"
)

XML_BODY = (
    b'<app version="2"><users><user name="Jeff"/><user name="Ann">text</user></users>'
    b'<messages><message lang="en">Hello!!</message></messages><empty></empty></app>'
)

RENDER_BODY = (
    b'{"decimal":1.50,"big":12345678901234567890123,"exp":1e3,"neg":-0.0,"t":true,"f":false,"nul":null,'
    b'"obj":{"z":1,"a":[true,null,"<&>"]},"list":[{"b":1,"a":2}],"html":"<a&b>",'
    b'"unicode":"h\xc3\xa9llo \\u2713","empty":""}'
)

DOTTED_BODY = (
    b'{"commits":[{"id":"c0"},{"author":{"name":"N"}}],"a.b":"literal","a":{"b":"walked"},'
    b'"x":{"y.z":"nested-literal"}}'
)

XML_EXPECTED = (
    b'arg: 2 Jeff Ann Hello!! en  {"app":{"-version":"2","empty":"","messages":{"message":{"#text":"Hello!!",'
    b'"-lang":"en"}},"users":{"user":[{"-name":"Jeff"},{"#text":"text","-name":"Ann"}]}}}\n'
)

LARGE_BODY = b'{"small":"s","big":"' + b"x" * (2 * 1024 * 1024) + b'"}'
BIG_HEADER = "h" * 8192


ROOT_HEADERS: dict[str, object] = {
    "deliberate": "-header headers on the root path",
    "hookrunner": (("global_headers", True),),
}


B64_FILE_ONLY = b"arg: showfile=MY_B64\nfile MY_B64: "


def _c(name: str, path: str, **kw: object) -> Case:
    return Case(name=name, path=path, **kw)  # type: ignore[arg-type]


CASES: list[Case] = [
    # ------------------------------------------------------------------ the root and routing
    # Deliberate: hookrunner adds the -header headers to `/` as upstream 2.8.2 does; Debian's 2.8.0 does not.
    _c("root-get", "/", method="GET", expect_body=b"OK", global_headers=False, **ROOT_HEADERS),
    _c("root-post", "/", body=b"x", expect_body=b"OK", global_headers=False, **ROOT_HEADERS),
    _c("root-custom-method", "/", method="FOO", expect_body=b"OK", global_headers=False, **ROOT_HEADERS),
    _c(
        "root-head",
        "/",
        method="HEAD",
        expect_body=b"",
        content_type=TEXT,
        global_headers=False,
        expect_headers=(("Content-Length", "2"),),
        **ROOT_HEADERS,
    ),
    _c(
        "root-ignores-global-methods",
        "/",
        method="GET",
        flags="methods",
        expect_body=b"OK",
        global_headers=False,
        **ROOT_HEADERS,
    ),
    # Deliberate: hookrunner serves a health endpoint; the reference has no such route.
    _c(
        "healthz",
        "/healthz",
        method="GET",
        status=404,
        expect_body=GO_404,
        global_headers=False,
        deliberate="/healthz",
        hookrunner=(("status", 200), ("expect_body", b"OK"), ("global_headers", True)),
    ),
    _c(
        "healthz-post",
        "/healthz",
        status=404,
        expect_body=GO_404,
        global_headers=False,
        deliberate="/healthz",
        hookrunner=(
            ("status", 405),
            ("expect_body", b""),
            ("global_headers", True),
            ("expect_headers", (("Allow", "GET, HEAD"),)),
        ),
    ),
    _c(
        "healthz-without-prefix",
        "/healthz",
        method="GET",
        flags="noprefix",
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
        deliberate="/healthz",
        hookrunner=(("status", 200), ("expect_body", b"OK")),
    ),
    _c(
        "metrics-without-flag", "/metrics", method="GET", status=404, expect_body=GO_404, global_headers=False
    ),
    _c("unknown-hook", "/hooks/nope", expect_body=b"Hook not found.", status=404, global_headers=False),
    _c(
        "outside-prefix",
        "/foo",
        method="GET",
        status=404,
        expect_body=GO_404,
        global_headers=False,
        expect_headers=(("X-Content-Type-Options", "nosniff"),),
    ),
    _c("prefix-without-slash", "/hooks", method="GET", status=404, expect_body=GO_404, global_headers=False),
    _c(
        "prefix-is-case-sensitive",
        "/HOOKS/async-message",
        status=404,
        expect_body=GO_404,
        global_headers=False,
    ),
    _c(
        "trailing-slash-is-part-of-id",
        "/hooks/async-message/",
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
    ),
    _c(
        "double-slash-redirects",
        "/hooks//async-message?x=1&y=2",
        method="GET",
        status=301,
        expect_body=b"",
        global_headers=False,
        expect_headers=(("Location", "/hooks/async-message?x=1&y=2"),),
    ),
    _c(
        "dot-dot-redirects",
        "/hooks/../hooks/async-message",
        status=301,
        expect_body=b"",
        global_headers=False,
        expect_headers=(("Location", "/hooks/async-message"),),
    ),
    _c(
        "dot-redirects",
        "/hooks/./async-message",
        method="GET",
        status=301,
        expect_body=b"",
        global_headers=False,
        expect_headers=(("Location", "/hooks/async-message"),),
    ),
    _c("id-with-slashes", "/hooks/a/b/c", expect_body=b"nested id"),
    _c("id-with-encoded-slashes", "/hooks/a%2Fb%2Fc", expect_body=b"nested id"),
    _c("id-percent-decoded", "/hooks/async-m%65ssage", expect_body=b"queued"),
    _c("empty-id", "/hooks/", expect_body=b"empty id"),
    _c(
        "options-star",
        "*",
        raw_request=b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        method="OPTIONS",
        expect_body=b"",
        global_headers=False,
    ),
    # ------------------------------------------------------------------ methods
    _c(
        "method-not-allowed",
        "/hooks/post-only",
        method="GET",
        status=405,
        expect_body=b"",
        global_headers=False,
        logs=('HTTP GET method not allowed for hook "post-only"',),
    ),
    _c("method-allowed-trimmed", "/hooks/post-only", expect_body=b"posted"),
    _c("method-allowed-upper-cased", "/hooks/post-only", method="PUT", expect_body=b"posted"),
    _c(
        "method-lowercase-is-distinct",
        "/hooks/post-only",
        method="post",
        status=405,
        expect_body=b"",
        global_headers=False,
    ),
    _c("method-options-is-ordinary", "/hooks/async-message", method="OPTIONS", expect_body=b"queued"),
    _c(
        "method-head-runs-hook",
        "/hooks/capture-ok",
        method="HEAD",
        expect_body=b"",
        content_type=TEXT,
        expect_headers=(("Content-Length", "24"),),
        logs=("capture-ok hook triggered successfully",),
    ),
    _c(
        "global-methods-deny-get",
        "/hooks/async-message",
        method="GET",
        flags="methods",
        status=405,
        expect_body=b"",
        global_headers=False,
    ),
    _c("global-methods-allow-post", "/hooks/async-message", flags="methods", expect_body=b"queued"),
    _c(
        "global-methods-allow-put",
        "/hooks/async-message",
        method="PUT",
        flags="methods",
        expect_body=b"queued",
    ),
    _c(
        "global-methods-deny-delete",
        "/hooks/async-message",
        method="DELETE",
        flags="methods",
        status=405,
        expect_body=b"",
        global_headers=False,
    ),
    _c("hook-methods-override-global", "/hooks/get-only", method="GET", flags="methods", expect_body=b"got"),
    _c(
        "hook-methods-override-global-deny",
        "/hooks/get-only",
        flags="methods",
        status=405,
        expect_body=b"",
        global_headers=False,
    ),
    # ------------------------------------------------------------------ url prefix
    _c("noprefix-root", "/", method="GET", flags="noprefix", expect_body=b"OK", global_headers=False),
    _c("noprefix-hook", "/async-message", flags="noprefix", expect_body=b"queued", global_headers=False),
    _c("noprefix-nested-id", "/a/b/c", flags="noprefix", expect_body=b"nested id", global_headers=False),
    _c(
        "noprefix-old-path",
        "/hooks/async-message",
        flags="noprefix",
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
    ),
    _c(
        "prefix-custom",
        "/webhooks/async-message",
        flags="prefix",
        expect_body=b"queued",
        global_headers=False,
    ),
    _c(
        "prefix-custom-old-path",
        "/hooks/async-message",
        flags="prefix",
        status=404,
        expect_body=GO_404,
        global_headers=False,
    ),
    # ------------------------------------------------------------------ rule mismatch
    _c(
        "mismatch-default",
        "/hooks/mismatch-default",
        expect_body=RULES_NOT_SATISFIED,
        expect_headers=(("X-Hook", None),),
        logs=(
            "parameter node not found: token",
            "mismatch-default got matched, but didn't get triggered because the trigger rules were not satisfied",
        ),
    ),
    _c(
        "mismatch-satisfied",
        "/hooks/mismatch-default?token=secret",
        expect_body=b"never",
        expect_headers=(("X-Hook", "only-on-success"),),
    ),
    _c("mismatch-400", "/hooks/mismatch-400?token=wrong", status=400, expect_body=RULES_NOT_SATISFIED),
    _c(
        "mismatch-unknown-code",
        "/hooks/mismatch-999",
        expect_body=RULES_NOT_SATISFIED,
        logs=("mismatch-999 got matched, but the configured return code 999 is unknown - defaulting to 200",),
    ),
    _c(
        "rule-on-payload-without-payload",
        "/hooks/json-array",
        headers=(("Content-Type", "text/plain"),),
        body=b"not json",
        expect_body=RULES_NOT_SATISFIED,
        logs=("parameter node not found: root.0.event",),
    ),
    # ------------------------------------------------------------------ async success
    _c(
        "async-empty-message",
        "/hooks/async-empty",
        expect_body=b"",
        logs=("async-empty hook triggered successfully",),
    ),
    _c("async-message", "/hooks/async-message", expect_body=b"queued"),
    _c("async-success-code", "/hooks/async-201", status=201, expect_body=b"created"),
    _c(
        "async-success-204",
        "/hooks/async-204",
        status=204,
        expect_body=b"",
        expect_headers=(("Content-Length", None),),
    ),
    _c(
        "async-success-unknown-code",
        "/hooks/async-999",
        expect_body=b"unknown code",
        logs=("async-999 got matched, but the configured return code 999 is unknown - defaulting to 200",),
    ),
    # ------------------------------------------------------------------ captured output
    _c(
        "capture-success",
        "/hooks/capture-ok",
        expect_body=b"arg: exit=0 hello world\n",
        logs=("command output: arg: exit=0 hello world",),
    ),
    _c("capture-success-code", "/hooks/capture-ok-201", status=201, expect_body=b"arg: made\n"),
    _c(
        "capture-combines-stderr",
        "/hooks/capture-stderr",
        expect_body=b"arg: out stderr=err-text\nerr-text\n",
    ),
    _c(
        "capture-failure",
        "/hooks/capture-fail",
        status=500,
        expect_body=COMMAND_ERROR,
        logs=("error occurred: exit status 3",),
    ),
    _c(
        "capture-failure-with-output",
        "/hooks/capture-fail-output",
        status=500,
        expect_body=b"arg: exit=3 failing\n",
        expect_headers=(("X-Hook", "on-error-too"),),
    ),
    _c("capture-not-found", "/hooks/capture-not-found", status=500, expect_body=COMMAND_ERROR),
    _c("capture-not-found-with-output", "/hooks/capture-not-found-output", status=500, expect_body=b""),
    _c(
        "command-with-space-hint",
        "/hooks/space-in-command",
        status=500,
        expect_body=COMMAND_ERROR,
        logs=("use 'pass-arguments-to-command' to specify args for 'hookrunner-no-such-echo'",),
    ),
    _c(
        "response-headers",
        "/hooks/response-headers",
        expect_body=b'{"ok":true}',
        content_type="application/json",
        expect_headers=(("X-Hook-One", "1"),),
    ),
    # A hook may set headers gunicorn keeps to itself (Date, Server, hop-by-hop ones): net/http writes them
    # as set, sorted with the others, and its own Date gives way; a close the client asks for replaces the
    # hook's `Connection: keep-alive`.
    _c(
        "hop-by-hop-response-headers",
        "/hooks/hop-by-hop-headers",
        expect_body=b"hello",
        expect_headers=(("Server", "mine"), ("Date", "yesterday"), ("Keep-Alive", "timeout=5"), ("Upgrade", "h2c")),
    ),
    _c(
        "hop-by-hop-response-headers-http-1.0",
        "/hooks/hop-by-hop-headers",
        raw_request=b"POST /hooks/hop-by-hop-headers HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        expect_body=b"hello",
        expect_headers=(("Connection", None), ("Date", "yesterday")),  # closing: the hook's keep-alive goes
    ),
    _c(
        "sniff-html",
        "/hooks/sniff-html",
        expect_body=b"<html><body>hi</body></html>",
        content_type="text/html; charset=utf-8",
    ),
    _c("sniff-pdf", "/hooks/sniff-pdf", expect_body=b"%PDF-1.4 data", content_type="application/pdf"),
    _c("sniff-json-is-text", "/hooks/sniff-json", expect_body=b'{"a": 1}', content_type=TEXT),
    _c("sniff-empty-output", "/hooks/sniff-empty", expect_body=b""),
    # Go switches to chunked framing once a handler has written more than 2048 bytes without a length.
    _c(
        "output-2048-bytes-has-length",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=" + b"y" * 2048,
        expect_body=b"y" * 2048,
        expect_headers=(("Content-Length", "2048"), ("Transfer-Encoding", None)),
    ),
    _c(
        "output-2049-bytes-is-chunked",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=" + b"y" * 2049,
        expect_body=b"y" * 2049,
        expect_headers=(("Content-Length", None), ("Transfer-Encoding", "chunked")),
    ),
    _c(
        "sniff-html-after-whitespace",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=%20%0A%3C!DOCTYPE+html%3E",
        expect_body=b" \n<!DOCTYPE html>",
        content_type="text/html; charset=utf-8",
    ),
    _c(
        "sniff-xml",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=%3C%3Fxml+version%3D%221.0%22%3F%3E%3Ca%2F%3E",
        expect_body=b'<?xml version="1.0"?><a/>',
        content_type="text/xml; charset=utf-8",
    ),
    _c(
        "sniff-png",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=%89PNG%0D%0A%1A%0Arest",
        expect_body=b"\x89PNG\r\n\x1a\nrest",
        content_type="image/png",
    ),
    _c(
        "sniff-utf16-bom",
        "/hooks/raw-output",
        headers=FORM,
        body=b"text=%FE%FFhi",
        expect_body=b"\xfe\xffhi",
        content_type="text/plain; charset=utf-16be",
    ),
    # ------------------------------------------------------------------ body types
    _c(
        "json-object",
        "/hooks/payload-dump",
        headers=JSON,
        body=b'{"b":2,"a":{"y":[1,2.0],"x":"<&>"}}',
        expect_body=b'arg: {"a":{"x":"\\u003c\\u0026\\u003e","y":[1,2.0]},"b":2}\n',
    ),
    _c(
        "json-content-type-variant",
        "/hooks/payload-dump",
        headers=(("Content-Type", "application/vnd.api+json; charset=utf-8"),),
        body=b'{"a":1}',
        expect_body=b'arg: {"a":1}\n',
    ),
    _c(
        "json-top-level-array",
        "/hooks/json-array",
        headers=JSON,
        body=b' \n [{"event":"processed"},{"n":1.50}]',
        expect_body=b'arg: 1.50 [{"event":"processed"},{"n":1.50}]\n',
    ),
    _c(
        "json-top-level-array-mismatch",
        "/hooks/json-array",
        headers=JSON,
        body=b'[{"event":"dropped"}]',
        expect_body=RULES_NOT_SATISFIED,
    ),
    _c(
        "json-top-level-scalar",
        "/hooks/payload-dump",
        headers=JSON,
        body=b'"just a string"',
        expect_body=b"arg: null\n",
        logs=("error parsing JSON payload",),
    ),
    _c(
        "json-invalid",
        "/hooks/payload-dump",
        headers=JSON,
        body=b'{"a":',
        expect_body=b"arg: null\n",
        logs=("error parsing JSON payload unexpected EOF",),
    ),
    _c(
        "json-empty-body",
        "/hooks/payload-dump",
        headers=JSON,
        body=b"",
        expect_body=b"arg: null\n",
        logs=("error parsing JSON payload",),
    ),
    _c(
        "form",
        "/hooks/payload-dump",
        headers=FORM,
        body=b"a=1&a=2&c&d=%3Cx%3E&e=&sp=a+b",
        expect_body=b'arg: {"a":"1","c":"","d":"\\u003cx\\u003e","e":"","sp":"a b"}\n',
    ),
    _c(
        "xml",
        "/hooks/xml",
        headers=(("Content-Type", "application/xml"),),
        body=XML_BODY,
        expect_body=XML_EXPECTED,
    ),
    _c(
        "xml-text-xml",
        "/hooks/xml",
        headers=(("Content-Type", "text/xml; charset=utf-8"),),
        body=XML_BODY,
        expect_body=XML_EXPECTED,
    ),
    _c(
        "multipart",
        "/hooks/multipart",
        headers=MP_HEADERS,
        body=MP_BODY,
        expect_body=(
            b"arg: plain value from-json-file forced  "
            b'{"field":"plain value","forced":{"k":"forced"},"jsonfile":{"k":"from-json-file"}}\n'
        ),
        logs=("couldn't retrieve argument for {Source:payload Name:textfile EnvName: Base64Decode:false}",),
    ),
    _c(
        "multipart-json-file-invalid",
        "/hooks/multipart",
        headers=MP_BAD_HEADERS,
        body=MP_BAD_BODY,
        logs=("error parsing JSON payload file",),
        expect_body=b'arg: v    {"field":"v","jsonfile":null}\n',
    ),
    _c(
        "multipart-json-value-part",
        "/hooks/multipart",
        headers=MP_VALUE_HEADERS,
        body=MP_VALUE_BODY,
        expect_body=b'arg: plain value  from-value-part  {"field":"plain value","forced":{"k":"from-value-part"}}\n',
    ),
    _c(
        "multipart-broken",
        "/hooks/payload-dump",
        headers=(("Content-Type", "multipart/form-data; boundary=xx"),),
        body=b"garbage",
        status=500,
        expect_body=MULTIPART_ERROR,
        logs=("error parsing multipart form",),
    ),
    _c(
        "multipart-without-boundary",
        "/hooks/payload-dump",
        headers=(("Content-Type", "multipart/form-data"),),
        body=b"garbage",
        expect_body=b"arg: null\n",
        logs=("error parsing body payload due to unsupported content type header: multipart/form-data",),
    ),
    _c(
        "unsupported-content-type",
        "/hooks/payload-dump",
        headers=(("Content-Type", "text/plain"),),
        body=b"hello",
        expect_body=b"arg: null\n",
        logs=("error parsing body payload due to unsupported content type header: text/plain",),
    ),
    _c(
        "no-content-type",
        "/hooks/payload-dump",
        body=b'{"a":1}',
        expect_body=b"arg: null\n",
        logs=("error parsing body payload due to unsupported content type header:",),
    ),
    _c(
        "incoming-content-type-override",
        "/hooks/payload-dump-forced-json",
        headers=(("Content-Type", "text/plain"),),
        body=b'{"forced":true}',
        expect_body=b'arg: {"forced":true}\n',
    ),
    _c(
        "chunked-request-body",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b'4\r\n{"a"\r\n5\r\n:"b"}\r\n0\r\n\r\n'
        ),
        expect_body=b'arg: {"a":"b"}\n',
    ),
    # net/http's parseHexUint takes at most 16 hex digits: a 17th is "http chunk length too large" at once
    # (a broken body: the hook runs with what came before it). hookrunner waited out -read-timeout: 408.
    _c(
        "chunk-size-over-16-hex-digits",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"10000000000000000\r\nabc"
        ),
        expect_body=b"arg: null\n",
        logs=("error reading the request body: http chunk length too large",),
    ),
    _c(
        "chunk-size-17-digits-leading-zeros",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            b"00000000000000001\r\na\r\n0\r\n\r\n"
        ),
        expect_body=b"arg: null\n",
        logs=("error reading the request body: http chunk length too large",),
    ),
    # A body the handler leaves unread: net/http reads up to 256 KiB of it before it writes the head, and
    # closes after the answer (`Connection: close`) when it breaks there or goes on past it. hookrunner
    # kept the connection (and answered the broken rest with a second, plain 400).
    _c(
        "unread-chunked-body-broken",
        "/hooks/nope",
        raw_request=(
            b"POST /hooks/nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
        ),
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
    ),
    _c(
        "unread-chunk-size-over-16-hex-digits",
        "/hooks/nope",
        raw_request=(
            b"POST /hooks/nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"10000000000000000\r\n"
        ),
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
    ),
    _c(
        "unread-body-over-256-kib",
        "/hooks/nope",
        raw_request=b"POST /hooks/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n",
        status=404,
        expect_body=b"Hook not found.",
        global_headers=False,
    ),
    # strconv.ParseUint(value, 10, 63): a Content-Length past 2^63-1 is a plain 400 before any handler;
    # hookrunner answered it as a body over -max-body-size, 413.
    _c(
        "content-length-over-63-bits",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 99999999999999999999999\r\n\r\n"
        ),
        status=400,
        expect_body=b"400 Bad Request",
        global_headers=False,
    ),
    _c(
        "content-length-2-to-the-63",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 9223372036854775808\r\nConnection: close\r\n\r\n"
        ),
        status=400,
        expect_body=b"400 Bad Request",
        global_headers=False,
    ),
    # Repeated headers: Go's Header.Get takes the first value; upstream's own handler tests send two
    # Content-Type headers (webhook_test.go adds one of its own to the row's headers).
    _c(
        "content-type-twice-json-first",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Type: text/plain\r\nContent-Length: 7\r\nConnection: close\r\n\r\n"
            b'{"a":1}'
        ),
        expect_body=b'arg: {"a":1}\n',
    ),
    _c(
        "content-type-twice-text-first",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Content-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n"
            b'{"a":1}'
        ),
        expect_body=b"arg: null\n",
        logs=("error parsing body payload due to unsupported content type header: text/plain",),
    ),
    # Headers repeated, folded or contradicting, each as net/http reads it (Go 1.19, webhook 2.8.0).
    _c(
        "signature-twice-good-first",
        "/hooks/hmac-sha1",
        dynamic=lambda: ((*JSON, ("X-Hub-Signature", "sha1=" + sig("sha1", b'{"a":1}')),
                          ("X-Hub-Signature", "sha1=" + BAD_SIG)), b'{"a":1}'),
        expect_body=b"",
        content_type=None,
    ),
    _c(
        "signature-twice-bad-first",
        "/hooks/hmac-sha1",
        dynamic=lambda: ((*JSON, ("x-hub-signature", "sha1=" + BAD_SIG),
                          ("X-HUB-SIGNATURE", "sha1=" + sig("sha1", b'{"a":1}'))), b'{"a":1}'),
        status=500,
        expect_body=RULES_ERROR,
        logs=("invalid payload signature",),
    ),
    _c(
        "header-thrice-first-wins",
        "/hooks/headers-dump",
        headers=(("X-A", "1"), ("X-A", "2"), ("x-a", "3")),
        expect_body=b'arg: {"Connection":"close","Content-Length":"0","X-A":"1"}\n',
    ),
    _c(
        "header-obs-fold",
        "/hooks/headers-dump",
        raw_request=(
            b"POST /hooks/headers-dump HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n"
        ),
        expect_body=b'arg: {"Connection":"close","Content-Length":"0","X-A":"1 folded"}\n',
    ),
    _c(
        "header-value-utf8-tab-trailing-space",
        "/hooks/headers-dump",
        raw_request=(
            b"POST /hooks/headers-dump HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\tb \r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n"
        ),
        expect_body=b'arg: {"Connection":"close","Content-Length":"0","X-A":"caf\xc3\xa9\\tb"}\n',
    ),
    _c(
        "header-name-underscore",
        "/hooks/headers-dump",
        headers=(("x_a", "1"),),
        expect_body=b'arg: {"Connection":"close","Content-Length":"0","X_a":"1"}\n',
    ),
    _c(
        "header-name-with-space",
        "/hooks/headers-dump",
        raw_request=b"POST /hooks/headers-dump HTTP/1.1\r\nHost: x\r\nX-A B: 1\r\nConnection: close\r\n\r\n",
        status=400,
        expect_body=b"400 Bad Request: invalid header name",
        global_headers=False,
    ),
    _c(
        "header-name-utf8",
        "/hooks/headers-dump",
        raw_request=b"POST /hooks/headers-dump HTTP/1.1\r\nHost: x\r\nX-\xc3\xa9: 1\r\nConnection: close\r\n\r\n",
        status=400,
        expect_body=b"400 Bad Request: invalid header name",
        global_headers=False,
    ),
    _c(
        "content-length-twice-unequal",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 7\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
            b'{"a":1}'
        ),
        status=400,
        expect_body=b"400 Bad Request",
        global_headers=False,
    ),
    _c(
        "content-length-twice-equal",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 7\r\nContent-Length: 7\r\nConnection: close\r\n\r\n"
            b'{"a":1}'
        ),
        expect_body=b'arg: {"a":1}\n',
    ),
    _c(
        "transfer-encoding-with-content-length",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 7\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b'7\r\n{"a":1}\r\n0\r\n\r\n'
        ),
        expect_body=b'arg: {"a":1}\n',
        deliberate="Repeated or contradicting framing headers",
        hookrunner=(("status", 400), ("expect_body", b"400 Bad Request"), ("global_headers", False)),
    ),
    _c(
        "transfer-encoding-chunked-on-http-1.0",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Transfer-Encoding: chunked\r\n\r\n7\r\n{"a":1}\r\n0\r\n\r\n'
        ),
        expect_body=b"arg: null\n",
        deliberate="Repeated or contradicting framing headers",
        hookrunner=(
            ("status", 501), ("expect_body", b"Unsupported transfer encoding"), ("global_headers", False),
        ),
    ),
    _c(
        "transfer-encoding-gzip-chunked",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n7\r\n{"a":1}\r\n0\r\n\r\n'
        ),
        status=501,
        expect_body=b"Unsupported transfer encoding",
        global_headers=False,
    ),
    _c(
        "transfer-encoding-twice",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b'7\r\n{"a":1}\r\n0\r\n\r\n'
        ),
        status=501,
        expect_body=b"Unsupported transfer encoding",
        global_headers=False,
    ),
    _c(
        "host-twice",
        "/hooks/payload-dump",
        raw_request=(
            b"POST /hooks/payload-dump HTTP/1.1\r\nHost: x\r\nHost: x\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n"
        ),
        status=400,
        expect_body=b"400 Bad Request",
        global_headers=False,
    ),
    _c(
        "large-body",
        "/hooks/large-body",
        headers=JSON,
        body=LARGE_BODY,
        files_removed=True,
        expect_body=(
            b"arg: showfile=BODY_FILE s\n"
            b"file BODY_FILE: size="
            + str(len(LARGE_BODY)).encode()
            + b" sha256="
            + hashlib.sha256(LARGE_BODY).hexdigest()[:16].encode()
            + b" mode=600 dir=tmp prefix=yes content=<"
            + str(len(LARGE_BODY)).encode()
            + b" bytes>\n"
        ),
    ),
    # ------------------------------------------------------------------ headers and query
    _c(
        "headers-first-value-canonical",
        "/hooks/headers",
        headers=(("X-Multi", "one"), ("X-Multi", "two"), ("x-lower-name", "low"), ("X-Empty", "")),
        expect_body=b"arg: one low  \n",
        logs=("couldn't retrieve argument for {Source:header Name:Host",),
    ),
    _c(
        "entire-headers",
        "/hooks/headers-dump",
        headers=(("x-custom-thing", "a"), ("X-CUSTOM-THING", "b"), ("X-Html", "<b>&")),
        expect_body=(
            b'arg: {"Connection":"close","Content-Length":"0","X-Custom-Thing":"a",'
            b'"X-Html":"\\u003cb\\u003e\\u0026"}\n'
        ),
    ),
    _c(
        "header-8k",
        "/hooks/header-file",
        headers=(("X-Big", BIG_HEADER),),
        files_removed=True,
        expect_body=(
            b"arg: showfile=BIG_FILE\nfile BIG_FILE: size=8192 sha256="
            + hashlib.sha256(BIG_HEADER.encode()).hexdigest()[:16].encode()
            + b" mode=600 dir=tmp prefix=yes content=<8192 bytes>\n"
        ),
    ),
    _c(
        "query-first-value",
        "/hooks/query?a=1&a=2&c&A=upper",
        expect_body=b"arg: 1   upper\n",
        logs=("couldn't retrieve argument for {Source:url Name:missing",),
    ),
    _c(
        "entire-query",
        "/hooks/query-dump?b=2&a=1&a=3&e&h=%3C&sp=x+y",
        expect_body=(b'arg: {"a":"1","b":"2","e":"","h":"\\u003c","sp":"x y"}\n'),
    ),
    # ------------------------------------------------------------------ dotted names and missing values
    _c(
        "dotted-names",
        "/hooks/dotted",
        headers=JSON,
        body=DOTTED_BODY,
        expect_body=b"arg: c0 N literal nested-literal   \n",
        logs=(
            "couldn't retrieve argument for {Source:payload Name:commits.5.id EnvName: Base64Decode:false}",
            "couldn't retrieve argument for {Source:payload Name:commits.first.id EnvName: Base64Decode:false}",
            "couldn't retrieve argument for {Source:payload Name:commits.-1.id EnvName: Base64Decode:false}",
        ),
    ),
    _c(
        "missing-in-and",
        "/hooks/missing-and",
        headers=JSON,
        body=b'{"present":"1"}',
        expect_body=RULES_NOT_SATISFIED,
        logs=("parameter node not found: absent",),
    ),
    _c(
        "missing-in-or",
        "/hooks/missing-or",
        headers=JSON,
        body=b'{"present":"1"}',
        expect_body=b"arg: 1 \n",
        logs=("couldn't retrieve argument for {Source:payload Name:absent EnvName: Base64Decode:false}",),
    ),
    # ------------------------------------------------------------------ value rendering and sources
    _c(
        "render-values",
        "/hooks/render",
        headers=JSON,
        body=RENDER_BODY,
        expect_body=(
            b"arg: 1.50 12345678901234567890123 1e3 -0.0 true false <nil> "
            b'{"a":[true,null,"\\u003c\\u0026\\u003e"],"z":1} [{"a":2,"b":1}] <a&b> h\xc3\xa9llo \xe2\x9c\x93 \n'
        ),
    ),
    _c(
        "request-sources",
        "/hooks/sources",
        headers=(("Content-Type", "text/plain"),),
        body=b"raw body",
        expect_body=b"arg: POST 127.0.0.1:<port> POST literal value raw body \n",
        logs=("couldn't retrieve argument for {Source:request Name:path",),
    ),
    _c(
        "invalid-utf8-raw-body",
        "/hooks/sources",
        headers=(("Content-Type", "application/octet-stream"),),
        body=b"\xff\xfe bad \xc3",
        expect_body=b"arg: POST 127.0.0.1:<port> POST literal value \xff\xfe bad \xc3 \n",
    ),
    # The JSON decoder turns an invalid byte into U+FFFD (written as raw UTF-8 when re-encoded); query and
    # form values keep the byte, and Go's JSON encoder writes it as the escape \ufffd.
    _c(
        "invalid-utf8-json",
        "/hooks/payload-dump",
        headers=JSON,
        body=b'{"a":"\xff-x"}',
        expect_body=b'arg: {"a":"\xef\xbf\xbd-x"}\n',
    ),
    _c("invalid-utf8-query", "/hooks/query-dump?a=%FF-x", expect_body=b'arg: {"a":"\\ufffd-x"}\n'),
    _c(
        "invalid-utf8-form",
        "/hooks/payload-dump",
        headers=FORM,
        body=b"a=%FF-x",
        expect_body=b'arg: {"a":"\\ufffd-x"}\n',
    ),
    # ------------------------------------------------------------------ match rules
    _c(
        "regex-match",
        "/hooks/regex",
        headers=JSON,
        body='{"version":"release v1.23-beta","name":"Ünïcode"}'.encode(),
        expect_body=b"",
    ),
    _c(
        "regex-no-match",
        "/hooks/regex",
        headers=JSON,
        body=b'{"version":"v1","name":"abc"}',
        expect_body=RULES_NOT_SATISFIED,
    ),
    _c(
        "hmac-sha1",
        "/hooks/hmac-sha1",
        headers=JSON + (("X-Hub-Signature", sig("sha1", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hmac-sha1-prefixed",
        "/hooks/hmac-sha1",
        headers=JSON + (("X-Hub-Signature", "sha1=" + sig("sha1", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hmac-sha1-multiple",
        "/hooks/hmac-sha1",
        headers=JSON + (("X-Hub-Signature", f"sha1={BAD_SIG},sha1={sig('sha1', GH_BODY)}"),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hmac-sha1-bad",
        "/hooks/hmac-sha1",
        headers=JSON + (("X-Hub-Signature", "sha1=" + BAD_SIG),),
        body=GH_BODY,
        status=500,
        expect_body=RULES_ERROR,
        logs=("invalid payload signature",),
    ),
    _c(
        "hmac-sha1-missing-header",
        "/hooks/hmac-sha1",
        headers=JSON,
        body=GH_BODY,
        expect_body=RULES_NOT_SATISFIED,
        logs=("parameter node not found: X-Hub-Signature",),
    ),
    _c(
        "hmac-sha1-empty-body",
        "/hooks/hmac-sha1",
        headers=(("X-Hub-Signature", sig("sha1", b"")),),
        expect_body=b"",
    ),
    _c(
        "hmac-sha1-empty-body-bad",
        "/hooks/hmac-sha1",
        headers=(("X-Hub-Signature", BAD_SIG),),
        status=500,
        expect_body=RULES_ERROR,
        logs=("on empty payload",),
    ),
    _c(
        "hmac-sha256-prefixed",
        "/hooks/hmac-sha256",
        headers=JSON + (("X-Hub-Signature-256", "sha256=" + sig("sha256", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hmac-sha256-bad",
        "/hooks/hmac-sha256",
        headers=JSON + (("X-Hub-Signature-256", "sha256=abc"),),
        body=GH_BODY,
        status=500,
        expect_body=RULES_ERROR,
    ),
    # ------------------------------------------------------------------ repeated and contradicting headers
    # net/http keeps every line of a repeated header; webhook reads the first (Header.Get), for the body's
    # type, the arguments and the environment alike (more such cases, and the framing headers, above).
    _c(
        "content-type-twice",
        "/hooks/header-echo",
        headers=(("Content-Type", "application/json"), ("Content-Type", "text/plain")),
        body=b'{"a":1}',
        expect_body=b"arg: 1 application/json 7 \n",
    ),
    _c(
        "content-type-twice-form-first",
        "/hooks/header-echo",
        headers=(("Content-Type", "application/x-www-form-urlencoded"), ("Content-Type", "application/json")),
        body=b"a=5",
        expect_body=b"arg: 5 application/x-www-form-urlencoded 3 \n",
    ),
    _c(
        "content-type-twice-other-case",
        "/hooks/header-echo",
        headers=(("content-type", "application/json"), ("CONTENT-TYPE", "application/xml")),
        body=b'{"a":1}',
        expect_body=b"arg: 1 application/json 7 \n",
    ),
    _c(
        "header-argument-twice",
        "/hooks/header-echo",
        headers=JSON + (("X-Sig", "one"), ("x-sig", "two")),
        body=b'{"a":1}',
        expect_body=b"arg: 1 application/json 7 one\nenv: HOOK_SIG=one\n",
    ),
    _c(
        "header-value-folded-and-padded",
        "/hooks/header-echo",
        raw_request=(
            b"POST /hooks/header-echo HTTP/1.1\r\nHost: x\r\nX-Sig: \t a  b\r\n \t c \t\r\n"
            b"Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        expect_body=b"arg:   0 a  b c\nenv: HOOK_SIG=a  b c\n",
    ),
    _c(
        "header-value-8-bit",
        "/hooks/header-echo",
        headers=(("X-Sig", "caf\xc3\xa9 \xff"),),
        expect_body=b"arg:   0 caf\xc3\xa9 \xff\nenv: HOOK_SIG=caf\xc3\xa9 \xff\n",
    ),
    _c(
        "hmac-sha512",
        "/hooks/hmac-sha512",
        headers=JSON + (("X-Signature", "sha512=" + sig("sha512", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hmac-sha512-bad",
        "/hooks/hmac-sha512",
        headers=JSON + (("X-Signature", sig("sha512", GH_BODY, b"other")),),
        body=GH_BODY,
        status=500,
        expect_body=RULES_ERROR,
    ),
    _c(
        "hmac-from-query",
        "/hooks/hmac-query?sig=sha256%3D" + sig("sha256", GH_BODY),
        headers=JSON,
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "hash-sha1-deprecated",
        "/hooks/hash-sha1",
        headers=JSON + (("X-Hub-Signature", sig("sha1", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
        logs=("warn: use of deprecated option payload-hash-sha1; use payload-hmac-sha1 instead",),
    ),
    _c(
        "hash-sha256-deprecated",
        "/hooks/hash-sha256",
        headers=JSON + (("X-Hub-Signature-256", sig("sha256", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
        logs=("warn: use of deprecated option payload-hash-sha256: use payload-hmac-sha256 instead",),
    ),
    _c(
        "hash-sha512-deprecated",
        "/hooks/hash-sha512",
        headers=JSON + (("X-Signature", sig("sha512", GH_BODY)),),
        body=GH_BODY,
        expect_body=b"",
        logs=("warn: use of deprecated option payload-hash-sha512: use payload-hmac-sha512 instead",),
    ),
    _c("ip-whitelist-bare-ip", "/hooks/ip-allow", expect_body=b""),
    _c("ip-whitelist-cidr", "/hooks/ip-cidr", expect_body=b""),
    _c("ip-whitelist-denied", "/hooks/ip-deny", expect_body=RULES_NOT_SATISFIED),
    _c("scalr-signature", "/hooks/scalr", dynamic=scalr(b"scalrkey", b'{"a":1}'), expect_body=b""),
    _c(
        "scalr-signature-bad",
        "/hooks/scalr",
        dynamic=scalr(b"scalrkey", b'{"a":1}', good=False),
        status=500,
        expect_body=RULES_ERROR,
    ),
    _c(
        "scalr-signature-outdated",
        "/hooks/scalr",
        dynamic=scalr(b"scalrkey", b'{"a":1}', offset_seconds=-600),
        status=500,
        expect_body=RULES_ERROR,
    ),
    _c(
        "scalr-signature-missing",
        "/hooks/scalr",
        headers=JSON,
        body=b'{"a":1}',
        expect_body=RULES_NOT_SATISFIED,
    ),
    _c(
        "soft-failure-or-falls-through",
        "/hooks/soft-or",
        headers=JSON + (("X-Hub-Signature", BAD_SIG),),
        body=GH_BODY,
        expect_body=b"",
    ),
    _c(
        "soft-failure-or-all-false",
        "/hooks/soft-or",
        headers=JSON + (("X-Hub-Signature", BAD_SIG),),
        body=GH_NO_FALLBACK,
        expect_body=RULES_NOT_SATISFIED,
    ),
    _c(
        "hard-failure-or",
        "/hooks/hard-or",
        headers=JSON + (("X-Hub-Signature", BAD_SIG),),
        body=GH_BODY,
        status=500,
        expect_body=RULES_ERROR,
        logs=("invalid payload signature",),
    ),
    _c(
        "soft-failure-and-still-errors",
        "/hooks/soft-and",
        headers=JSON + (("X-Hub-Signature", BAD_SIG),),
        body=GH_BODY,
        status=500,
        expect_body=RULES_ERROR,
        logs=("error evaluating hook: invalid payload signatures [" + BAD_SIG + "]",),
    ),
    _c("not-rule-true", "/hooks/not-rule", headers=JSON, body=b'{"branch":"dev"}', expect_body=b""),
    _c(
        "not-rule-false",
        "/hooks/not-rule",
        headers=JSON,
        body=b'{"branch":"main"}',
        expect_body=RULES_NOT_SATISFIED,
    ),
    # `not` of a missing value: the error is a "parameter node not found", so the negation stands: triggered.
    _c(
        "not-rule-missing",
        "/hooks/not-rule",
        headers=JSON,
        body=b'{"other":1}',
        expect_body=b"",
        logs=("parameter node not found: branch", "not-rule hook triggered successfully"),
    ),
    # ------------------------------------------------------------------ running the command
    # A hook's variable named like one of the server's own (ECHO_RECORD, which the harness gives both servers)
    # replaces it, and of a variable the hook names twice the last value stands: Go's os/exec keeps the last
    # of a duplicated key, and webhook appends the hook's variables to os.Environ().
    _c(
        "environment-over-the-servers",
        "/hooks/env-overlap",
        headers=JSON,
        body=b'{"record":"from the hook","first":"one","second":"two"}',
        expect_body=(
            b"arg: showenv=ECHO_RECORD showenv=MY_TWICE\nshowenv: ECHO_RECORD=from the hook\nshowenv: MY_TWICE=two\n"
        ),
    ),
    _c(
        "environment",
        "/hooks/env?q=1",
        headers=JSON,
        body=b'{"a":"x y","head_commit":{"timestamp":"2020-01-01"}}',
        expect_body=(
            b"arg: showenv=MY_A showenv=MY_ABSENT\nenv: HOOK_head_commit.timestamp=2020-01-01 HOOK_q=1\n"
            b"showenv: MY_A=x y\nshowenv: MY_ABSENT unset\n"
        ),
        logs=(
            "error extracting command arguments for environment: couldn't retrieve argument for "
            "{Source:payload Name:absent EnvName:MY_ABSENT Base64Decode:false}",
        ),
    ),
    _c(
        "pass-file",
        "/hooks/file",
        headers=JSON,
        body=b'{"data":"abc","other":"o","b64":"aGVsbG8="}',
        files_removed=True,
        expect_body=(
            b"arg: showfile=MY_FILE showfile=HOOK_OTHER showfile=MY_B64\nenv: HOOK_OTHER=<file>\n"
            b"file MY_FILE: size=3 sha256=ba7816bf8f01cfea mode=600 dir=cwd prefix=yes content=abc\n"
            b"file HOOK_OTHER: size=1 sha256=65c74c15a686187b mode=600 dir=cwd prefix=yes content=o\n"
            b"file MY_B64: size=5 sha256=2cf24dba5fb0a30e mode=600 dir=cwd prefix=yes content=hello\n"
        ),
        logs=("no ENVVAR name specified, falling back to [HOOK_OTHER]",),
    ),
    # Go's exec.Cmd.Start refuses before any process exists: a NUL in the environment first, then a working
    # directory stat cannot find (os.StartProcess's `chdir`), then a NUL in an argument (the fork's EINVAL);
    # the files written for the command are removed all the same.
    _c(
        "start-refused-nul-in-argument",
        "/hooks/start-refused?arg=a%00b&env=ok&file=secret",
        status=500,
        expect_body=COMMAND_ERROR,
        files_removed=True,
        logs=("error occurred: fork/exec ", ": invalid argument", "removing file "),
    ),
    _c(
        "start-refused-nul-in-environment",
        "/hooks/start-refused?arg=ok&env=a%00b&file=secret",
        status=500,
        expect_body=COMMAND_ERROR,
        files_removed=True,
        logs=("error occurred: exec: environment variable contains NUL", "removing file "),
    ),
    _c(
        "start-refused-missing-working-directory",
        "/hooks/missing-cwd",
        status=500,
        expect_body=COMMAND_ERROR,
        logs=("error occurred: chdir /nonexistent-hookrunner-dir/sub: no such file or directory",),
    ),
    # Go's base64 decoder skips line breaks anywhere; on corrupt input the file holds the whole quanta
    # decoded before the error.
    _c(
        "pass-file-base64-line-break-form",
        "/hooks/file-b64",
        headers=FORM,
        body=b"b64=aGVs%0AbG8%3D",
        files_removed=True,
        expect_body=B64_FILE_ONLY + b"size=5 sha256=2cf24dba5fb0a30e mode=600 dir=cwd prefix=yes content=hello\n",
    ),
    _c(
        "pass-file-base64-line-breaks-json",
        "/hooks/file-b64",
        headers=JSON,
        body=b'{"b64":"\\r\\naGVs\\r\\nbG8\\n=\\n"}',
        files_removed=True,
        expect_body=B64_FILE_ONLY + b"size=5 sha256=2cf24dba5fb0a30e mode=600 dir=cwd prefix=yes content=hello\n",
    ),
    _c(
        "pass-file-base64-corrupt",
        "/hooks/file-b64",
        headers=JSON,
        body=b'{"b64":"aGVs\\nbG8"}',
        files_removed=True,
        expect_body=B64_FILE_ONLY + b"size=3 sha256=d6a81f224bbf2f7c mode=600 dir=cwd prefix=yes content=hel\n",
        logs=("error decoding string [illegal base64 data at input byte 5]",),
    ),
    _c(
        "pass-file-temp-dir-binary",
        "/hooks/file-tmp",
        headers=(("Content-Type", "application/octet-stream"),),
        body=b"\x00\x01\xff",
        files_removed=True,
        expect_body=(
            b"arg: showfile=BODY_FILE\n"
            b"file BODY_FILE: size=3 sha256="
            + hashlib.sha256(b"\x00\x01\xff").hexdigest()[:16].encode()
            + b" mode=600 dir=tmp prefix=yes content=\x00\x01\xff\n"
        ),
        content_type="application/octet-stream",
    ),
    _c(
        "parse-parameters-as-json",
        "/hooks/json-params?q=%7B%22z%22%3A%22qry%22%7D",
        headers=JSON + (("X-Json", '{"a":"hdr"}'),),
        body=b'{"p":"{\\"inner\\":{\\"k\\":\\"v\\"}}"}',
        expect_body=b'arg: v hdr qry {"inner":{"k":"v"}}\n',
    ),
    _c(
        "parse-parameters-as-json-form",
        "/hooks/json-params",
        headers=FORM,
        body=b"p=%7B%22inner%22%3A%7B%22k%22%3A%22v%22%7D%7D",
        expect_body=b'arg: v   {"inner":{"k":"v"}}\n',
    ),
    _c(
        "parse-parameters-as-json-invalid",
        "/hooks/json-params",
        headers=JSON,
        body=b'{"p":"{not json"}',
        expect_body=RULES_NOT_SATISFIED,
        logs=(
            "error parsing JSON parameters: invalid character 'n' looking for beginning of object key string",
            "error parsing JSON parameters: couldn't retrieve argument for "
            "{Source:header Name:x-json EnvName: Base64Decode:false}",
            "parameter node not found: inner.k",
        ),
    ),
    _c(
        "relative-command-in-working-directory",
        "/hooks/relative-cwd",
        expect_body=b"arg: showcwd\ncwd: work\n",
    ),
    _c("command-on-path", "/hooks/on-path", expect_body=b"arg: from PATH\n"),
    # ------------------------------------------------------------------ HTTP transport
    _c(
        "expect-100-continue",
        "/hooks/async-message",
        headers=(("Expect", "100-continue"),),
        body=b"abc",
        expect_body=b"queued",
        interim=(100,),
    ),
    _c(
        "http-1.0",
        "/hooks/async-message",
        raw_request=b"GET /hooks/async-message HTTP/1.0\r\n\r\n",
        method="GET",
        expect_body=b"queued",
    ),
    _c(
        "missing-host-header",
        "/hooks/async-message",
        raw_request=b"GET /hooks/async-message HTTP/1.1\r\nConnection: close\r\n\r\n",
        method="GET",
        status=400,
        expect_body=b"400 Bad Request: missing required Host header",
        global_headers=False,
    ),
]

CASES_BY_NAME = {case.name: case for case in CASES}
assert len(CASES_BY_NAME) == len(CASES), "duplicate case names"
