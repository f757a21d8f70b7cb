"""Go strings as Python `str`: a Go string holds bytes; those not UTF-8 survive as surrogate escapes."""

from __future__ import annotations

__all__ = ["go_bytes_to_str"]


def go_bytes_to_str(raw: bytes) -> str:
    # Bytes that are not UTF-8 become U+DC80-U+DCFF (Python's `surrogateescape`), so they reach argv intact.
    return raw.decode("utf-8", "surrogateescape")
