"""Tests for hookrunner.hooks.bodies.multipart: Go's ParseMultipartForm and the payload webhook builds.

Every table marked "verified" was sent to the reference (/usr/bin/webhook 2.8.0, Go 1.19.8, mxj v2.7.0) by a
differential script: the reference's entire-payload output and its `error parsing ...` log line were
compared with these parsers' results, and every case agreed. test_bodies_reference.py re-runs a sample
of them against the binary when it is installed.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from hookrunner.errors import MultipartError
from hookrunner.golang.json import NilMap, go_json_dumps
from hookrunner.hooks.bodies.multipart import parse_multipart

# --- multipart bodies (verified) ---

CT = "multipart/form-data; boundary=XX"
END = b"--XX--\r\n"


def part(
    name: bytes, body: bytes, filename: bytes | None = None, ctype: bytes | None = None, extra: bytes = b""
) -> bytes:
    head = b'--XX\r\nContent-Disposition: form-data; name="' + name + b'"'
    if filename is not None:
        head += b'; filename="' + filename + b'"'
    head += b"\r\n"
    if ctype:
        head += b"Content-Type: " + ctype + b"\r\n"
    return head + extra + b"\r\n" + body + b"\r\n"


MULTIPART_CASES: list[tuple[str, str, bytes, str]] = [
    (
        "basic",
        CT,
        part(b"v", b"1")
        + part(b"v", b"2")
        + part(b"w", b"two words")
        + part(b"j", b'{"x":1,"y":"<"}', b"a.json", b"application/json")
        + part(b"bad", b'{"x":', b"b.json", b"application/json")
        + part(b"forced", b'{"x":1}', b"f.txt", b"text/plain")
        + part(b"other", b'{"x":1}', b"o.txt", b"text/plain")
        + part(b"arr", b"[1,2]", b"a.json", b"application/json")
        + part(b"nf", b'{"a":1}', None, b"application/json")
        + part(b"ct", b'{"a":1}', b"c.json", b"application/json; charset=utf-8")
        + END,
        "",
    ),
    ("empty", CT, b"", ""),
    ("garbage", CT, b"garbage", ""),
    ("noboundary", "multipart/form-data; charset=utf-8", b"garbage", ""),
    ("truncated", CT, b'--XX\r\nContent-Disposition: form-data; name="a"\r\n\r\nval', ""),
    ("closeonly", CT, b"--XX--\r\n", ""),
    ("preamble", CT, b"junk\r\n" + part(b"a", b"val") + END, ""),
    ("nodisp", CT, b"--XX\r\nX-Foo: 1\r\n\r\nval\r\n" + part(b"b", b"B") + END, ""),
    ("hdr-trunc", CT, b'--XX\r\nContent-Disposition: form-data; name="a"\r\n', ""),
    ("hdr-trunc2", CT, b'--XX\r\nContent-Disposition: form-data; name="a"', ""),
    ("lfonly", CT, b'--XX\nContent-Disposition: form-data; name="a"\n\nval\n--XX--\n', ""),
    ("emptyfilename", CT, part(b"a", b'{"q":1}', b"", b"application/json") + END, ""),
    (
        "attachment",
        CT,
        b'--XX\r\nContent-Disposition: attachment; name="a"\r\n\r\nval\r\n--XX\r\nContent-Disposition: FORM-DATA; name="b"\r\n\r\nB\r\n'
        + END,
        "",
    ),
    ("rfc2231", CT, b"--XX\r\nContent-Disposition: form-data; name*=UTF-8''h%C3%A9\r\n\r\nval\r\n" + END, ""),
    (
        "dupfile",
        CT,
        part(b"j", b'{"n":1}', b"a", b"text/plain") + part(b"j", b'{"n":2}', b"b", b"application/json") + END,
        "",
    ),
    ("valandfile", CT, part(b"j", b"V") + part(b"j", b'{"n":2}', b"b", b"application/json") + END, ""),
    ("badhdr", CT, b"--XX\r\nContent-Disposition form-data\r\n\r\nval\r\n" + END, ""),
    ("noend", CT, part(b"a", b"val") + b"--XX\r\n", ""),
    ("noend2", CT, part(b"a", b"val") + b"--XX", ""),
    ("finalnocrlf", CT, part(b"a", b"val") + b"--XX--", ""),
    ("trailingjunk", CT, part(b"a", b"val") + b"--XX--\r\njunk here", ""),
    (
        "twoct",
        CT,
        b'--XX\r\nContent-Disposition: form-data; name="j"; filename="b"\r\nContent-Type: text/plain\r\nContent-Type: application/json\r\n\r\n{"n":2}\r\n'
        + END,
        "",
    ),
    ("boundaryspace", CT, b'--XX  \r\nContent-Disposition: form-data; name="a"\r\n\r\nval\r\n' + END, ""),
    ("bodylike", CT, part(b"a", b"v\r\n--XXY") + END, ""),
    ("afterpart", CT, part(b"a", b"val") + b"--XX\r\n\r\nzz\r\n" + END, ""),
    ("jsonnull", CT, part(b"j", b"null", b"b", b"application/json") + END, ""),
    ("semicolon-query", CT, part(b"a", b"1") + END, "?a=1;b=2"),
    ("badescape-query", CT, part(b"a", b"1") + END, "?a=%zz"),
    ("okquery", CT, part(b"a", b"1") + END, "?a=%41"),
    ("dupboundary", "multipart/form-data; boundary=XX; boundary=YY", b"x", ""),
    ("emptyboundary", 'multipart/form-data; boundary=""', b"x", ""),
    ("semicolon-only", "multipart/form-data;", b"x", ""),
    ("quotedboundary", 'multipart/form-data; boundary="XX"', part(b"a", b"q") + END, ""),
    ("boundary-dashdash-body", CT, part(b"a", b"x\r\n--XX-y") + END, ""),
    ("empty-body-direct", CT, b'--XX\r\nContent-Disposition: form-data; name="a"\r\n\r\n--XX--\r\n', ""),
    ("empty-value", CT, part(b"a", b"") + END, ""),
    ("crlf-in-value", CT, part(b"a", b"l1\r\nl2\n") + END, ""),
    ("continuation", CT, b'--XX\r\nContent-Disposition: form-data;\r\n name="cont"\r\n\r\nv\r\n' + END, ""),
    ("initial-space", CT, b'--XX\r\n Content-Disposition: form-data; name="a"\r\n\r\nv\r\n' + END, ""),
    ("expect-new", CT, part(b"a", b"v") + b"--XX-x\r\n", ""),
    ("unexpected-line", CT, part(b"a", b"v") + b"\r\nzz\r\n", ""),
    ("long-preamble", CT, b"x" * 5000 + b"\r\n" + part(b"a", b"v") + END, ""),
    ("utf8name", CT, part("ü".encode(), b"\xff\xfe") + END, ""),
    ("forced-json-file-bad", CT, part(b"forced", b"[1]", b"f", b"text/plain") + END, ""),
    (
        "qp",
        CT,
        part(b"a", b"a=3Db=\r\nc", extra=b"Content-Transfer-Encoding: quoted-printable\r\n") + END,
        "",
    ),
    (
        "nameless-filepart",
        CT,
        b'--XX\r\nContent-Disposition: form-data; filename="x"\r\nContent-Type: application/json\r\n\r\n{}\r\n'
        + END,
        "",
    ),
    ("bad-disp-param", CT, b'--XX\r\nContent-Disposition: form-data; name="a"; junk\r\n\r\nv\r\n' + END, ""),
    (
        "trailing-semicolon-disp",
        CT,
        b'--XX\r\nContent-Disposition: form-data; name="a";\r\n\r\nv\r\n' + END,
        "",
    ),
    (
        "big",
        CT,
        part(b"a", b"y" * 70000 + b"\r\n--X")
        + part(b"j", b'{"k":"' + b"z" * 30000 + b'"}', b"j", b"application/json")
        + END,
        "",
    ),
]

# label -> (entire payload, MultipartError text, webhook's log lines for the part, sorted)
MULTIPART_EXPECTED: dict[str, tuple[str | None, str | None, list[str]]] = {
    "basic": (
        '{"arr":null,"bad":null,"forced":{"x":1},"j":{"x":1,"y":"\\u003c"},"nf":"{\\"a\\":1}","v":"1","w":"two words"}',
        None,
        [
            "error parsing JSON payload file: json: cannot unmarshal array into Go value of type map[string]interface {}",
            "error parsing JSON payload file: unexpected EOF",
            'found multipart form value "nf"',
            'found multipart form value "v"',
            'found multipart form value "w"',
            'parsing multipart form file "arr" as JSON',
            'parsing multipart form file "bad" as JSON',
            'parsing multipart form file "forced" as JSON',
            'parsing multipart form file "j" as JSON',
        ],
    ),
    "empty": (None, "multipart: NextPart: EOF", []),
    "garbage": (None, "multipart: NextPart: EOF", []),
    "noboundary": (None, "no multipart boundary param in Content-Type", []),
    "truncated": (None, "unexpected EOF", []),
    "closeonly": ("null", None, []),
    "preamble": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "nodisp": ('{"b":"B"}', None, ['found multipart form value "b"']),
    "hdr-trunc": ("null", None, []),
    "hdr-trunc2": ("null", None, []),
    "lfonly": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "emptyfilename": ('{"a":"{\\"q\\":1}"}', None, ['found multipart form value "a"']),
    "attachment": ('{"b":"B"}', None, ['found multipart form value "b"']),
    "rfc2231": ('{"hé":"val"}', None, ['found multipart form value "hé"']),
    "dupfile": ("null", None, []),
    "valandfile": (
        '{"j":{"n":2}}',
        None,
        ['found multipart form value "j"', 'parsing multipart form file "j" as JSON'],
    ),
    "badhdr": (None, 'malformed MIME header: missing colon: "Content-Disposition form-data"', []),
    "noend": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "noend2": (None, "multipart: NextPart: EOF", []),
    "finalnocrlf": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "trailingjunk": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "twoct": ('{"j":{"n":2}}', None, ['parsing multipart form file "j" as JSON']),
    "boundaryspace": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "bodylike": ('{"a":"v\\r\\n--XXY"}', None, ['found multipart form value "a"']),
    "afterpart": ('{"a":"val"}', None, ['found multipart form value "a"']),
    "jsonnull": ('{"j":null}', None, ['parsing multipart form file "j" as JSON']),
    "semicolon-query": (None, "invalid semicolon separator in query", []),
    "badescape-query": (None, 'invalid URL escape "%zz"', []),
    "okquery": ('{"a":"1"}', None, ['found multipart form value "a"']),
    "dupboundary": (None, "request Content-Type isn't multipart/form-data", []),
    "emptyboundary": (None, "multipart: boundary is empty", []),
    "semicolon-only": (None, "no multipart boundary param in Content-Type", []),
    "quotedboundary": ('{"a":"q"}', None, ['found multipart form value "a"']),
    "boundary-dashdash-body": ('{"a":"x\\r\\n--XX-y"}', None, ['found multipart form value "a"']),
    "empty-body-direct": ('{"a":""}', None, ['found multipart form value "a"']),
    "empty-value": ('{"a":""}', None, ['found multipart form value "a"']),
    "crlf-in-value": ('{"a":"l1\\r\\nl2\\n"}', None, ['found multipart form value "a"']),
    "continuation": ('{"cont":"v"}', None, ['found multipart form value "cont"']),
    "initial-space": (
        None,
        'malformed MIME header initial line:  Content-Disposition: form-data; name="a"',
        [],
    ),
    "expect-new": (None, "unexpected EOF", []),
    "unexpected-line": (None, "unexpected EOF", []),
    "long-preamble": (None, "multipart: NextPart: bufio: buffer full", []),
    "utf8name": ('{"ü":"\\ufffd\\ufffd"}', None, ['found multipart form value "ü"']),
    "forced-json-file-bad": (
        '{"forced":null}',
        None,
        [
            "error parsing JSON payload file: json: cannot unmarshal array into Go value of type map[string]interface {}",
            'parsing multipart form file "forced" as JSON',
        ],
    ),
    "qp": ('{"a":"a=bc"}', None, ['found multipart form value "a"']),
    "nameless-filepart": ("null", None, []),
    "bad-disp-param": ("null", None, []),
    "trailing-semicolon-disp": ('{"a":"v"}', None, ['found multipart form value "a"']),
    "big": ("BIG", None, ['found multipart form value "a"', 'parsing multipart form file "j" as JSON']),
}


class TrickleStream(io.RawIOBase):
    """A body that arrives a few bytes at a time, as a slow client sends it."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        n = self.step if size < 0 else min(size, self.step)
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk


def run_multipart(ct: str, body: bytes, query: str, stream: Any = None) -> tuple[Any, str | None, list[str]]:
    logs: list[str] = []
    try:
        payload = parse_multipart(
            stream or io.BytesIO(body),
            ct,
            len(body),
            1 << 20,
            {"forced"},
            raw_query=query.lstrip("?").encode(),
            on_log=logs.append,
        )
    except MultipartError as exc:
        return None, str(exc), sorted(logs)
    return payload, None, sorted(logs)


@pytest.mark.parametrize(
    ("label", "ct", "body", "query"), MULTIPART_CASES, ids=[c[0] for c in MULTIPART_CASES]
)
@pytest.mark.parametrize("step", [0, 1, 7])
def test_parse_multipart(label: str, ct: str, body: bytes, query: str, step: int) -> None:
    stream = TrickleStream(body, step) if step else None
    payload, error, logs = run_multipart(ct, body, query, stream)
    expected_payload, expected_error, expected_logs = MULTIPART_EXPECTED[label]
    assert error == expected_error
    assert logs == expected_logs
    if expected_payload == "BIG":
        assert payload is not None and payload["a"] == "y" * 70000 + "\r\n--X"
        assert payload["j"] == {"k": "z" * 30000}
    elif error is None:
        assert go_json_dumps(payload) == expected_payload


def test_multipart_failed_json_file_is_a_nil_map() -> None:
    body = part(b"bad", b'{"x":', b"b.json", b"application/json") + END
    payload, _, logs = run_multipart(CT, body, "")
    assert payload is not None and isinstance(payload["bad"], NilMap)
    assert logs == [
        "error parsing JSON payload file: unexpected EOF",
        'parsing multipart form file "bad" as JSON',
    ]


def test_multipart_reads_no_more_than_content_length() -> None:
    body = part(b"a", b"v") + END
    stream = io.BytesIO(body + b"--XX\r\nthis belongs to nobody")
    assert parse_multipart(stream, CT, len(body), 1 << 20, set()) == {"a": "v"}
    assert stream.tell() == len(body)


def test_multipart_value_memory_limit() -> None:
    # Go allows max_memory + 10 MiB of values (less 200 bytes of bookkeeping per part name).
    body = part(b"a", b"x" * ((10 << 20) + 1000)) + END
    with pytest.raises(MultipartError, match="^multipart: message too large$"):
        parse_multipart(io.BytesIO(body), CT, len(body), 0, set())
    assert parse_multipart(io.BytesIO(body), CT, len(body), 2000, set()) is not None


def test_multipart_part_count_limit() -> None:
    body = b"".join(part(b"p%d" % i, b"v") for i in range(1001)) + END
    with pytest.raises(MultipartError, match="^multipart: message too large$"):
        parse_multipart(io.BytesIO(body), CT, len(body), 1 << 20, set())


@pytest.mark.parametrize(
    ("ct", "message"),
    [
        ("text/plain; boundary=XX", "request Content-Type isn't multipart/form-data"),
        ("multipart/form-data", "no multipart boundary param in Content-Type"),
        ("multipart/form-data; boundary=", "request Content-Type isn't multipart/form-data"),
    ],
)
def test_multipart_content_type_errors(ct: str, message: str) -> None:
    with pytest.raises(MultipartError) as info:
        parse_multipart(io.BytesIO(b""), ct, 0, 1 << 20, set())
    assert str(info.value) == message
