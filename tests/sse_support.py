"""Reading what a follower of a run's output received (GET /api/v1/runs/<id>/output?follow=1): the
Server-Sent Events after the answer's head, and the output they carry, checked to come without a gap."""

from __future__ import annotations

import base64
import json
from typing import Any


def sse_events(received: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, its JSON data) of each whole event after the head; comments (keep-alives) skipped."""
    found = []
    for block in received.partition(b"\r\n\r\n")[2].decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "event" in fields and "data" in fields:
            found.append((fields["event"], json.loads(fields["data"])))
    return found


def sse_output(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    """The bytes of the `output` events, each starting where the one before ended."""
    out = bytearray()
    start = None
    for name, data in events:
        if name == "output":
            start = data["offset"] if start is None else start  # the first byte kept when it came
            assert data["offset"] == start + len(out), (data["offset"], start, len(out))
            out += base64.b64decode(data["output_base64"]) if "output_base64" in data else data["output"].encode()
    return bytes(out)
