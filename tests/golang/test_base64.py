"""Go's base64.StdEncoding.DecodeString: decoded bytes and the offset of corrupt input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.golang.base64 import go_base64_decode


@pytest.mark.parametrize(
    ("data", "offset"),
    [
        (b"aGVsbG8=", None),
        (b"aGVs bG8=", 4),
        (b"aGVs\nbG8", 5),  # offsets count the skipped line breaks
        (b"aGVsbG8", 4),  # the start of the unfinished quantum
        (b"aGU=aGVs", 4),
        (b"aG=x", 2),  # the first "=" of a padding that is not "=="
        (b"aG=", 3),
        (b"=", 0),
    ],
)
def test_base64_errors_are_reported_at_gos_offset(data: bytes, offset: int | None) -> None:
    assert go_base64_decode(data)[1] == offset


@given(st.binary(max_size=40) | st.binary(max_size=30).map(base64.b64encode))
@example(b"aGVs\nbG8=")
def test_base64_decodes_like_python_where_go_finds_no_error(data: bytes) -> None:
    decoded, error = go_base64_decode(data)
    if error is None:
        assert decoded == base64.b64decode(data.replace(b"\r", b"").replace(b"\n", b""), validate=True)
    else:
        assert 0 <= error <= len(data) and len(decoded) <= len(data)
