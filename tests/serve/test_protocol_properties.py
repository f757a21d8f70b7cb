"""Properties of the protocol helpers that must hold on any input: an answer or gunicorn's parse errors
for the header block, never another exception."""

from __future__ import annotations

from gunicorn.http import errors as http_errors
from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.serve.protocol import go_header_block

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
