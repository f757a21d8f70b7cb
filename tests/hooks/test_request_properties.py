"""Properties of the body parsers and the protocol helpers that must hold on any input: an answer or a
typed error (hookrunner.errors, or gunicorn's parse errors for the header block), never another exception."""

from __future__ import annotations

import io
import json

from gunicorn.http import errors as http_errors
from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.errors import MultipartError, PayloadParseError
from hookrunner.hooks.request import (
    go_parse_query,
    parse_form_payload,
    parse_json_payload,
    parse_multipart,
    parse_xml_payload,
)
from hookrunner.serve.protocol import go_header_block

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)
# Bytes that are often almost valid: a real document, cut or with one byte changed.
def near(documents: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        data = draw(documents)
        if not data or draw(st.booleans()):
            return data
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + draw(st.binary(max_size=2)) + data[at + draw(st.integers(0, 2)) :]

    return mutated() | st.binary(max_size=60)


JSON_BODIES = near(JSON_VALUES.map(lambda v: json.dumps(v).encode()))


@given(JSON_BODIES)
@example(b'{"a":1} trailing')
@example(b"\xff")
@example(b"[" * 5000)
def test_json_bodies_parse_or_fail_typed(body: bytes) -> None:
    try:
        result = parse_json_payload(body)
    except PayloadParseError:
        return
    assert result is None or isinstance(result, dict)


@given(JSON_VALUES)
def test_json_objects_round_trip_their_keys(value: object) -> None:
    body = json.dumps({"k": value}).encode()
    result = parse_json_payload(body)
    assert result is not None and list(result) == ["k"]


FORM_TEXT = st.text(st.sampled_from("ab=&;%+.2Fé\x00[]"), max_size=30)


@given(FORM_TEXT.map(lambda s: s.encode("utf-8")) | st.binary(max_size=40))
@example(b"a=%zz")
@example(b"a=1;b=2")
def test_form_bodies_and_queries_parse_or_fail_typed(raw: bytes) -> None:
    values, error = go_parse_query(raw)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
    assert error is None or isinstance(error, str)
    try:
        assert isinstance(parse_form_payload(raw), dict)
    except PayloadParseError:
        assert error is not None


XML_DOCS = st.recursive(
    st.sampled_from(["", "x", "a &amp; b", "<![CDATA[c]]>", "<!-- c -->", "&#65;"]),
    lambda inner: st.tuples(st.sampled_from(["a", "b", "ns:c", "d"]), st.lists(inner, max_size=3)).map(
        lambda t: f"<{t[0]} k=\"v\">{''.join(t[1])}</{t[0]}>"
    ),
    max_leaves=8,
).map(lambda s: s.encode())


@given(near(XML_DOCS | XML_DOCS.map(lambda d: b'<?xml version="1.0"?>' + d)))
@example(b"<a>")
@example(b"<a></b>")
@example(b"<?xml?>")
def test_xml_bodies_parse_or_fail_typed(body: bytes) -> None:
    try:
        assert isinstance(parse_xml_payload(body), dict)
    except PayloadParseError:
        pass


@st.composite
def multipart_bodies(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["a", "b", "f", 'q"x', ""]))
        disposition = f'form-data; name="{name}"'
        if draw(st.booleans()):
            disposition += '; filename="x.json"'
        head = f"Content-Disposition: {disposition}\r\n"
        if draw(st.booleans()):
            head += draw(st.sampled_from(["Content-Type: application/json\r\n", "Content-Type: text/plain\r\n",
                                          "Content-Transfer-Encoding: quoted-printable\r\n"]))
        content = draw(st.binary(max_size=20) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
        parts.append(b"--B\r\n" + head.encode() + b"\r\n" + content + b"\r\n")
    return b"".join(parts) + b"--B--\r\n"


@given(
    near(multipart_bodies()),
    st.sampled_from(["multipart/form-data; boundary=B", "multipart/form-data", "multipart/mixed; boundary=B",
                     "multipart/form-data; boundary=\"B\"; x*=utf-8''%zz", "text/plain", ""]),
    st.sampled_from([b"", b"a=1", b"a=%zz"]),
)
def test_multipart_bodies_parse_or_fail_typed(body: bytes, content_type: str, query: bytes) -> None:
    try:
        result = parse_multipart(io.BytesIO(body), content_type, len(body), 1 << 20, {"f"}, raw_query=query)
    except MultipartError:
        return
    assert result is None or isinstance(result, dict)


HEADER_LINES = st.lists(
    st.binary(max_size=20).map(lambda b: b.replace(b"\r\n", b""))
    | st.tuples(st.sampled_from([b"Host", b"X-A", b"Content-Length", b"Bad Name", b""]), st.binary(max_size=8)).map(
        lambda t: t[0] + b": " + t[1].replace(b"\r\n", b"")
    ),
    min_size=1,
    max_size=5,
)


@given(HEADER_LINES)
@example([b" folded first"])
@example([b": x", b" y"])
def test_header_blocks_are_read_or_refused_as_go_would(lines: list[bytes]) -> None:
    try:
        kept, problem = go_header_block(b"\r\n".join(lines))
    except http_errors.InvalidHeader:
        return
    assert problem in ("", "invalid header name", "invalid header value")
    assert len(kept) <= len(b"\r\n".join(lines))
