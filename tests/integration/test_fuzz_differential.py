"""The differential fuzz: hypothesis builds requests over every body type, header shape, query and hook
field (hooks/hooks.fuzz.json) and sends each to the reference `webhook` and to hookrunner.

The status line, the body (where the echo command prints the argv, HOOK_ environment and files that
reached it) and the header lines in order (Date's value aside) must be equal, apart from the documented improvements in
docs/compatibility.md, which `comparable()` removes by rule. Two profiles: "ci" (the default: a few
hundred examples, seeded) and "long" (HOOKRUNNER_FUZZ_PROFILE=long, scripts/fuzz; tens of thousands,
HOOKRUNNER_FUZZ_EXAMPLES to change the count). The long profile records every difference and fails at
the end with all of them, and writes its counts to HOOKRUNNER_FUZZ_REPORT when that names a file.
Every difference a run has found is kept below as an explicit regression case (REGRESSIONS).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from integration_cases import normalise
from integration_harness import Response, Server, http_request, reference_available, start_server

pytestmark = [pytest.mark.reference, pytest.mark.slow]

PROFILE = os.environ.get("HOOKRUNNER_FUZZ_PROFILE", "ci")
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci", max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=_SUPPRESSED
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("HOOKRUNNER_FUZZ_EXAMPLES", "20000")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=_SUPPRESSED,
)
FUZZ_SETTINGS = settings.get_profile(PROFILE)

HOOK_IDS = (
    "args", "dump", "rawbody", "files", "value", "logic", "hmac", "hmac-soft", "methods", "ctype-json",
    "json-params", "fail", "async",
)
SECRET = b"fuzzsecret"
BOUNDARY = "fuzzBoundary42"


# ---------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class FuzzRequest:
    """One request as the fuzz sends it: a raw HTTP/1.1 message, built by `raw()`."""

    method: str = "POST"
    path: str = "/hooks/args"
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    raw_header_lines: tuple[bytes, ...] = ()  # added verbatim: odd header shapes
    chunked: bool = False

    def target(self) -> str:
        if not self.query:
            return self.path
        return self.path + "?" + "&".join(f"{k}={v}" if v != "\0" else k for k, v in self.query)

    def raw(self) -> bytes:
        lines = [f"{self.method} {self.target()} HTTP/1.1".encode("latin-1"), b"Host: 127.0.0.1"]
        lines += [f"{k}: {v}".encode("latin-1") for k, v in self.headers]
        lines += list(self.raw_header_lines)
        if self.chunked:
            lines.append(b"Transfer-Encoding: chunked")
            body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in _pieces(self.body)) + b"0\r\n\r\n"
        else:
            lines.append(b"Content-Length: %d" % len(self.body))
            body = self.body
        lines.append(b"Connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _pieces(body: bytes) -> list[bytes]:
    return [body[i : i + 7] for i in range(0, len(body), 7)] if body else []


# Field names the hooks look at, and a few they do not.
KEYS = st.sampled_from(["ref", "n", "list", "head_commit", "b64", "data", "p", "missing", "a", "a.b", "x y", "é"])
TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12
) | st.sampled_from(["refs/heads/main", "main", "MAIN", "v1.2", "no", "ok", "1", "", " ", "aGVsbG8=", "aGVs\nbG8=",
                     "aGVs bG8", '{"k":"v"}', "{bad", "a\u00e9b", "x\x00y", "%zz", "1e3", "-0", "true", "null"])
B64 = st.binary(max_size=10).map(lambda b: base64.b64encode(b).decode()) | st.sampled_from(
    ["aGVs\nbG8=", "aGVs\r\nbG8=\r\n", "aGVs bG8=", "aGVsbG8", "aGU=aGVs", "aG=x", "=", "a", "YQ==YQ==", "\naGVsbG8=\n"]
) | TEXT
JSON_SCALAR = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=8,
)
PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "ref": st.sampled_from(["refs/heads/main", "refs/heads/dev", "main"]) | JSON_VALUE,
        "head_commit": st.fixed_dictionaries({}, optional={"id": st.sampled_from(["main", "MAIN", "x"]) | TEXT}),
        "list": st.lists(st.sampled_from(["1", "2"]) | JSON_SCALAR, max_size=3),
        "n": st.integers(-(2**64), 2**64) | st.sampled_from([1.5, 1e21, 1e-7, 100.0, 123456789.0]),
        "b64": B64,
        "data": TEXT,
        "p": st.sampled_from(['{"k":"v"}', '{"k":{"z":1}}', "{bad", "[1]", '"s"']) | TEXT,
    },
) | st.dictionaries(KEYS, JSON_VALUE, max_size=4)


@st.composite
def json_body(draw: st.DrawFn) -> tuple[str, bytes]:
    value = draw(PAYLOAD | JSON_VALUE)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, None, 1])))
    data = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:  # a mutation: cut short, or a stray byte
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.sampled_from([b"", b"\xff", b",", b"}"]))
    ctype = draw(st.sampled_from(["application/json", "application/json; charset=utf-8", "Application/JSON",
                                  "application/vnd.api+json", "text/json"]))
    return ctype, data


QUERY_TEXT = st.text(st.sampled_from("ab.=&+%20zé[]\u00e9/?k"), max_size=8)


def form_encode(pairs: list[tuple[str, str]]) -> str:
    return "&".join(urllib.parse.quote_plus(k) + "=" + urllib.parse.quote_plus(v) for k, v in pairs)


@st.composite
def form_body(draw: st.DrawFn) -> tuple[str, bytes]:
    pairs = draw(st.lists(st.tuples(KEYS, B64 | TEXT), max_size=4))
    text = form_encode(pairs)
    if draw(st.booleans()):
        text += draw(st.sampled_from(["&", "&&x", "%zz=1", "a=%", ";b=1", "=v", "k"]))
    return "application/x-www-form-urlencoded", text.encode("utf-8")


XML_NAME = st.sampled_from(["ref", "n", "b64", "data", "head_commit", "id", "list", "p"])


@st.composite
def xml_body(draw: st.DrawFn) -> tuple[str, bytes]:
    def element(depth: int) -> str:
        name = draw(XML_NAME)
        attr = f' a="{draw(st.sampled_from(["1", "x", "&amp;"]))}"' if draw(st.booleans()) else ""
        if depth < 2 and draw(st.booleans()):
            inner = "".join(element(depth + 1) for _ in range(draw(st.integers(1, 3))))
        else:
            inner = draw(st.sampled_from(["main", "refs/heads/main", "aGVsbG8=", "1", "", "a &amp; b", "<![CDATA[x]]>"]))
        return f"<{name}{attr}>{inner}</{name}>"

    doc = element(0)
    if draw(st.booleans()):
        doc = '<?xml version="1.0"?>' + doc
    data = doc.encode("utf-8")
    if draw(st.integers(0, 7)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return draw(st.sampled_from(["application/xml", "text/xml", "text/xml; charset=utf-8"])), data


@st.composite
def multipart_body(draw: st.DrawFn) -> tuple[str, bytes]:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(KEYS)
        head = f'Content-Disposition: form-data; name="{name}"'
        kind = draw(st.sampled_from(["text", "file", "jsonfile"]))
        if kind == "text":
            content = draw(B64 | TEXT).encode("utf-8")
            extra = ""
        elif kind == "file":
            head += '; filename="f.bin"'
            content = draw(st.binary(max_size=12))
            extra = "\r\nContent-Type: application/octet-stream"
        else:
            head += '; filename="p.json"'
            content = json.dumps(draw(PAYLOAD)).encode("utf-8")
            extra = "\r\nContent-Type: application/json"
        parts.append(f"--{BOUNDARY}\r\n{head}{extra}\r\n\r\n".encode() + content + b"\r\n")
    data = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    if draw(st.integers(0, 7)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return f"multipart/form-data; boundary={BOUNDARY}", data


@st.composite
def raw_body(draw: st.DrawFn) -> tuple[str | None, bytes]:
    ctype = draw(st.sampled_from([None, "text/plain", "application/octet-stream", "", "weird", "application/x-foo"]))
    return ctype, draw(st.binary(max_size=40))


BODY = st.one_of(json_body(), form_body(), xml_body(), multipart_body(), raw_body())

HEADER_NAMES = st.sampled_from(["X-Env", "x-env", "X-Multi", "X-Json", "X-B64", "X-Other", "X_Under", "Accept"])
# Header values as they can be sent: latin-1, no line breaks; tabs and 0x80-0xFF included.
HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f") | st.just("\t"),
                       max_size=12) | st.sampled_from(["v1.2", "v10.0", "main", "aGVsbG8=", '{"k":"h"}', ""])
# Odd header lines, at most one a request (Go checks names and values in random order).
ODD_LINES = st.sampled_from([
    b"X-Env: a\x01b", b"X-Env: a\x7fb", b"X-Env: \x00", b"X-Env: a\rb", b"X-Bad Name: x", b"X(Env: x", b": empty name",
    b"X-Fold: a\r\n b", b"X-Fold: a\r\n\tb\x0b", b"X-Env:", b"X-Env:   spaced   ", b"NoColon", b"X-Env: caf\xe9",
    b"Expect: 100-continue", b"Expect: something", b"X-Env: a\r\n b\x01",
])


@st.composite
def requests(draw: st.DrawFn) -> FuzzRequest:
    hook = draw(st.sampled_from(HOOK_IDS))
    path = draw(st.sampled_from([f"/hooks/{hook}"] * 12 + [f"/hooks/{hook}/", "/hooks/nope", f"/hooks//{hook}",
                                                            f"/hooks/{hook}%2F", "/", "/other"]))
    method = draw(st.sampled_from(["POST"] * 6 + ["GET", "PUT", "post", "HEAD", "DELETE", "OPTIONS", "PATCH"]))
    query = tuple(draw(st.lists(
        st.tuples(st.sampled_from(["q", "a.b", "f", "x", "q[]", "é"]), QUERY_TEXT | st.sampled_from(
            ["ok", "no", "aGVsbG8%3D", "aGVs%0AbG8%3D", "%7B%22k%22%3A%22q%22%7D", "\0"])),
        max_size=3,
    )))
    ctype, body = draw(BODY)
    headers: list[tuple[str, str]] = []
    if ctype is not None:
        headers.append(("Content-Type", ctype))
    headers += draw(st.lists(st.tuples(HEADER_NAMES, HEADER_VALUE), max_size=3))
    signature = draw(st.sampled_from([None, "good", "bad", "good-sha1"]))
    if signature == "good":
        headers.append(("X-Signature", "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()))
    elif signature == "good-sha1":
        headers.append(("X-Hub-Signature", "sha1=" + hmac.new(SECRET, body, hashlib.sha1).hexdigest()))
    elif signature == "bad":
        headers.append((draw(st.sampled_from(["X-Signature", "X-Hub-Signature"])), draw(HEADER_VALUE)))
    odd = tuple(draw(st.lists(ODD_LINES, max_size=1)))
    return FuzzRequest(method, path, query, tuple(headers), body, odd, draw(st.integers(0, 9)) == 0)


# ---------------------------------------------------------------------------------------------- comparing


GLOBAL_HEADERS = {"x-global", "x-second"}  # the -header headers of the "default" flag set


def comparable(request: FuzzRequest, response: Response) -> tuple[object, ...]:
    """What must be equal between the servers, documented improvements removed by rule."""
    body = normalise(response.body)
    masked = {"date"}
    if normalise(response.body) != response.body:
        masked.add("content-length")  # masking a port changes the length
    # docs/compatibility.md, "-header headers on the root path": hookrunner adds them, 2.8.0 does not.
    dropped = GLOBAL_HEADERS if request.path == "/" else set()
    headers = [  # in the order written, names' case included
        (name, "*" if name.lower() in masked else value)
        for name, value in response.headers
        if name.lower() not in dropped
    ]
    return response.status_line, tuple(response.interim), headers, body


def describe(request: FuzzRequest, ours: tuple[object, ...], reference: tuple[object, ...]) -> str:
    return f"request {request.raw()!r}\n  reference: {reference!r}\n  hookrunner: {ours!r}"


# ---------------------------------------------------------------------------------------------- servers


@dataclass
class FuzzSession:
    reference: Server
    hookrunner: Server
    sent: int = 0
    identical: int = 0
    differences: list[str] = field(default_factory=list)

    def exchange(self, request: FuzzRequest) -> tuple[tuple[object, ...], tuple[object, ...]]:
        raw = request.raw()
        ref = http_request(self.reference.port, request.method, request.target(), raw_request=raw)
        ours = http_request(self.hookrunner.port, request.method, request.target(), raw_request=raw)
        self.sent += 1
        result = comparable(request, ours), comparable(request, ref)
        if result[0] == result[1]:
            self.identical += 1
        return result


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzSession]:
    if not reference_available():
        pytest.skip("reference webhook binary is not installed")
    base = tmp_path_factory.mktemp("fuzz")
    reference = start_server("reference", "fuzz.json", "default", base / "reference")
    try:
        ours = start_server("hookrunner", "fuzz.json", "default", base / "hookrunner")
    except BaseException:
        reference.stop()
        raise
    session = FuzzSession(reference, ours)
    try:
        yield session
    finally:
        alive = ours.process.poll() is None
        reference.stop()
        ours.stop()
        log = ours.log_bytes()
        report = os.environ.get("HOOKRUNNER_FUZZ_REPORT")
        summary = {
            "profile": PROFILE, "requests": session.sent, "identical": session.identical,
            "differences": session.differences,
        }
        if report:
            Path(report).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"\nfuzz: {session.sent} requests, {session.identical} identical")
        assert alive, "hookrunner exited during the fuzz"
        assert b"Traceback" not in log, log[-3000:].decode("utf-8", "replace")
        # The long profile records differences instead of stopping at the first; they fail the run here.
        assert session.differences == [], "\n".join(session.differences[:50])


# Every difference a fuzz run found, kept as a regression case (see the module docstring).
REGRESSIONS = [
    # Issue 17: base64decode with line breaks (Go's decoder skips \r and \n).
    FuzzRequest(path="/hooks/files", headers=(("Content-Type", "application/x-www-form-urlencoded"),),
                body=b"b64=aGVs%0AbG8%3D"),
    FuzzRequest(path="/hooks/files", headers=(("Content-Type", "application/json"),), body=b'{"b64":"aGVs\\nbG8="}'),
    # Issue 17: a control byte in a header value is net/http's "invalid header value".
    FuzzRequest(path="/hooks/args", raw_header_lines=(b"X-Env: a\x01b",)),
    # Found by this fuzz: a redirect keeps the raw query (0x80-0xFF bytes, brackets) in its Location.
    FuzzRequest(method="DELETE", path="/hooks//files", query=(("\u00e9", "+z"), ("q[]", "?[b].2["))),
    # Found by this fuzz: a HEAD answer with no body has no Content-Length (a 301 and a 405 here).
    FuzzRequest(method="HEAD", path="/hooks//async", body=b"{}", headers=(("Content-Type", "application/json"),)),
    FuzzRequest(method="HEAD", path="/hooks/methods", body=b"null", headers=(("Content-Type", "text/json"),)),
    # Found by the first long run: net/http's 417 to a HEAD request has no Content-Length.
    FuzzRequest(method="HEAD", path="/hooks/async", body=b"{}", headers=(("Content-Type", "application/json"),),
                raw_header_lines=(b"Expect: something",)),
    # Found by this fuzz: `100 Continue` only when the handler reads a body that is not empty.
    FuzzRequest(path="/hooks/value/", body=b"<ref>main</ref>", headers=(("Content-Type", "text/xml"),),
                raw_header_lines=(b"Expect: 100-continue",)),
    FuzzRequest(path="/hooks/value", raw_header_lines=(b"Expect: 100-continue",)),
    FuzzRequest(path="/hooks/value", body=b'{"ref":"refs/heads/main"}', headers=(("Content-Type", "application/json"),),
                raw_header_lines=(b"Expect: 100-continue",)),
]


def _with_regressions(test):  # type: ignore[no-untyped-def]
    for case in REGRESSIONS:
        test = example(request=case)(test)
    return test


@_with_regressions
@FUZZ_SETTINGS
@given(request=requests())
def test_hookrunner_answers_as_the_reference(fuzz: FuzzSession, request: FuzzRequest) -> None:
    ours, reference = fuzz.exchange(request)
    if ours == reference:
        return
    if PROFILE == "long":
        fuzz.differences.append(describe(request, ours, reference))
        return
    raise AssertionError(describe(request, ours, reference))

