"""Following a run's output on the installed `hookrunner`'s admin listener (GET
/api/v1/runs/<id>/output?follow=1): lines a running command prints reach 50 followers before it ends, then
the outcome; a follower that stops reading is dropped while the others get every byte; a run already
ended; an unknown run; the token. Run on both worker classes (scripts/test runs this file twice)."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sse_support import sse_events, sse_output
from test_run_history import Admin, start, trigger
from test_serving import Server, python_hook, wait_until

#: Prints a numbered line every 50 ms until the gate file (argv[1]) exists, then one last line.
LINES = (
    "import os, sys, time\n"
    "n = 0\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    print(f'line {n} <b>x</b>', flush=True); n += 1; time.sleep(0.05)\n"
    "print('done')"
)
#: Prints 8 KiB every 40 ms for 5 s (1 MB in all; a batch of 100 ms stays well within -history-output's
#: 64 KiB, so a follower that keeps up misses nothing).
FLOOD = (
    "import sys, time\n"
    "for n in range(125):\n"
    "    sys.stdout.buffer.write(bytes([65 + n % 26]) * 8192); sys.stdout.flush(); time.sleep(0.04)"
)
WHOLE = b"".join(bytes([65 + n % 26]) * 8192 for n in range(125))


def gated(hook_id: str, code: str, gate: Path) -> dict[str, object]:
    hook = python_hook(hook_id, code)
    arguments = hook["pass-arguments-to-command"]
    assert isinstance(arguments, list)
    hook["pass-arguments-to-command"] = [*arguments, {"source": "string", "name": str(gate)}]
    return hook


OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_followers() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


@dataclass
class Follower:
    """One follower's connection to the admin listener, read on a thread until the listener closes it."""

    port: int
    path: str
    token: str = ""
    read: bool = True
    received: bytearray = field(default_factory=bytearray)
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        OPENED.append(self.sock)
        if not self.read:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(60)
        self.sock.connect(("127.0.0.1", self.port))
        auth = f"Authorization: Bearer {self.token}\r\n" if self.token else ""
        self.sock.sendall(f"GET {self.path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
        if self.read:
            threading.Thread(target=self.read_all, daemon=True).start()

    def read_all(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.received += chunk
        except OSError:
            pass
        self.closed.set()

    def status(self) -> int:
        return int(bytes(self.received).split(b" ", 2)[1])

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return sse_events(bytes(self.received))

    def output(self) -> bytes:
        return sse_output(self.events())


def outcome(admin: Admin, rid: str) -> str:
    """The run's outcome, or "" while the admin listener has not heard of it yet."""
    status, _, body = admin.get(f"/api/v1/runs/{rid}")
    return str(json.loads(body)["outcome"]) if status == 200 else ""


def follow(port: int, rid: str, **extra: Any) -> Follower:
    return Follower(port, f"/api/v1/runs/{rid}/output?follow=1", **extra)


def test_fifty_followers_see_lines_before_the_run_ends_then_its_outcome(
    tmp_path: Path, servers: list[Server]
) -> None:
    gate = tmp_path / "gate"
    server, admin = start(tmp_path, servers, [gated("lines", LINES, gate)])
    assert trigger(server, "lines", "live-1") == 200
    assert wait_until(lambda: outcome(admin, "live-1") == "running", timeout=10)
    followers = [follow(admin.port, "live-1") for _ in range(50)]
    # Every follower sees lines printed after it came, while the command still runs.
    assert wait_until(lambda: all(b"line 20 <b>x</b>" in f.received for f in followers), timeout=30)
    assert not gate.exists() and admin.json("/api/v1/runs/live-1")["outcome"] == "running"
    # The runs list shows the output size growing while it runs.
    size = admin.json("/api/v1/runs?hook=lines")["runs"][0]["output_size"]
    assert size > 0 and wait_until(
        lambda: admin.json("/api/v1/runs?hook=lines")["runs"][0]["output_size"] > size, timeout=10)
    gate.touch()
    assert all(f.closed.wait(30) for f in followers)
    record = admin.json("/api/v1/runs/live-1")
    for follower in followers:
        assert follower.status() == 200
        output = follower.output()
        assert output.startswith(b"line 0 <b>x</b>\n") and output.endswith(b"\ndone\n")
        assert len(output) == record["output_size"]  # every byte, once
        name, end = follower.events()[-1]
        assert name == "end" and end["outcome"] == "ok" and end["exit_code"] == 0 and end["id"] == "live-1"
    # Once it has ended: what is kept and the outcome at once.
    late = follow(admin.port, "live-1")
    assert late.closed.wait(10)
    assert [name for name, _ in late.events()] == ["output", "end"]
    assert late.output() == base64.b64decode(record["output_base64"])
    assert server.stop() == 0


def test_a_follower_that_stops_reading_is_dropped_and_the_others_get_every_byte(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start(tmp_path, servers, [python_hook("flood", FLOOD)], "-read-timeout", "2s")
    assert trigger(server, "flood", "flood-1") == 200
    assert wait_until(lambda: outcome(admin, "flood-1") == "running", timeout=10)
    slow = follow(admin.port, "flood-1", read=False)
    fast = [follow(admin.port, "flood-1") for _ in range(5)]
    assert all(f.closed.wait(60) for f in fast)
    record = admin.json("/api/v1/runs/flood-1")
    assert record["outcome"] == "ok" and record["output_size"] == len(WHOLE)
    for follower in fast:
        output = follower.output()
        assert follower.events()[-1][0] == "end"
        # Every byte from the first one kept when it came: nothing missing, nothing twice.
        assert output == WHOLE[-len(output) :] and len(output) > len(WHOLE) // 2
    slow.read_all()  # what its buffers held, then the close: it was dropped before the end
    assert b"event: end" not in slow.received and len(slow.received) < len(WHOLE)
    assert server.stop() == 0


def test_unknown_runs_the_api_without_follow_and_the_token(tmp_path: Path, servers: list[Server]) -> None:
    token = tmp_path / "token"
    token.write_text("k" * 32)
    server, admin = start(tmp_path, servers, [python_hook("ok", "print('<b>x</b>')")], "-admin-token-file", str(token))
    admin.token = "k" * 32
    assert trigger(server, "ok", "t-1") == 200
    assert wait_until(lambda: outcome(admin, "t-1") == "ok", timeout=10)
    refused = follow(admin.port, "t-1")
    assert refused.closed.wait(10) and refused.status() == 401 and b"event:" not in refused.received
    wrong = follow(admin.port, "t-1", token="nope")
    assert wrong.closed.wait(10) and wrong.status() == 401
    unknown = follow(admin.port, "nope", token="k" * 32)
    assert unknown.closed.wait(10) and unknown.status() == 404
    assert json.loads(bytes(unknown.received).partition(b"\r\n\r\n")[2]) == {"error": "no run nope in the history"}
    status, _, body = admin.get("/api/v1/runs/t-1/output")  # without follow: the API as before
    assert status == 404 and json.loads(body) == {"error": "no run t-1/output in the history"}
    ok = follow(admin.port, "t-1", token="k" * 32)
    assert ok.closed.wait(10) and ok.output() == b"<b>x</b>\n" and ok.events()[-1][1]["outcome"] == "ok"
    assert server.stop() == 0


