"""Properties of the executor's Go helpers that must hold on any input."""

from __future__ import annotations

import base64

from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.run.executor import go_base64_decode


@given(st.binary(max_size=40) | st.binary(max_size=30).map(base64.b64encode))
@example(b"aGVs\nbG8=")
def test_base64_decodes_like_python_where_go_finds_no_error(data: bytes) -> None:
    decoded, error = go_base64_decode(data)
    if error is None:
        assert decoded == base64.b64decode(data.replace(b"\r", b"").replace(b"\n", b""), validate=True)
    else:
        assert 0 <= error <= len(data) and len(decoded) <= len(data)
