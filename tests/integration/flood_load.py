"""Issue 34's flooded neighbour, shared by tests/integration/test_flooded_neighbour.py and scripts/hostile:
one client (127.0.0.2) keeps `connections` keep-alive connections busy with pushes to a hook whose rules
fail, as `hey -c 64` does, while a second client (127.0.0.1) sends an async push every `interval` on a
fresh connection. Each runs in a process of its own, so that neither waits for the other's GIL.

Everything talks to loopback only, and every loop is bounded in time.
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

HOST = "127.0.0.1"
#: The flooding client's address: all of 127.0.0.0/8 is loopback on Linux.
FLOOD_SOURCE = "127.0.0.2"
NEIGHBOUR_SOURCE = "127.0.0.1"

#: The flood's push: a hook whose trigger rule fails (hostile_load.hooks(): `guarded`).
FLOOD_REQUEST = (
    b"POST /hooks/guarded HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)
#: The neighbour's push: an async run of /bin/true, answered before it runs (hostile_load.hooks(): `ping`).
NEIGHBOUR_REQUEST = (
    b"POST /hooks/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


def percentile(values: list[float], share: float) -> float:
    """The value below which `share` of `values` lie (nearest rank), in ms; inf when there is none."""
    if not values:
        return float("inf")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * share))]


@dataclass
class Side:
    """What one client saw: the answers' latencies (s), their status codes, and failures."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: How long the client sent.
    seconds: float = 0.0

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        """Answers a second."""
        return self.answered / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        first = f" (first: {self.failures[0]})" if self.failures else ""
        codes = ",".join(f"{k}x{v}" for k, v in sorted(self.statuses.items()))
        rate = f" ({self.rate:.0f}/s)" if self.seconds else ""
        return (
            f"{self.answered} answered{rate} [{codes}], {len(self.failures)} failed{first}, "
            f"p50 {percentile(self.latencies, 0.5):.1f} ms, p99 {percentile(self.latencies, 0.99):.1f} ms"
        )


def _answer_end(data: bytes | bytearray) -> int:
    """Where the first whole answer in `data` ends, or -1 (answers here have a Content-Length)."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return -1
    length = 0
    for line in bytes(data[:head_end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    end = head_end + 4 + length
    return end if len(data) >= end else -1


def _connect(port: int, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect((HOST, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def flood_main(port: int, connections: int, seconds: float, source: str) -> Side:
    """`connections` keep-alive connections, each sending FLOOD_REQUEST again as soon as its answer has
    come, for `seconds`; a connection the server closes is opened again."""
    side = Side()
    selector = selectors.DefaultSelector()
    state: dict[socket.socket, list[object]] = {}

    def start(sock: socket.socket | None) -> None:
        if sock is not None:
            selector.unregister(sock)
            del state[sock]
            sock.close()
        try:
            sock = _connect(port, source)
        except OSError as exc:
            side.failures.append(repr(exc))
            return
        sock.setblocking(False)
        sock.send(FLOOD_REQUEST)
        state[sock] = [bytearray(), time.monotonic()]
        selector.register(sock, selectors.EVENT_READ)

    for _ in range(connections):
        start(None)
    flooding_since = time.monotonic()
    end = flooding_since + seconds
    while state and time.monotonic() < end:
        for key, _ in selector.select(0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            buffer, began = state[sock]
            assert isinstance(buffer, bytearray) and isinstance(began, float)
            try:
                chunk = sock.recv(65536)
            except OSError as exc:
                side.failures.append(repr(exc))
                start(sock)
                continue
            if not chunk:
                side.failures.append("closed")
                start(sock)
                continue
            buffer += chunk
            stop = _answer_end(buffer)
            if stop < 0:
                continue
            status = bytes(buffer[9:12]).decode("latin-1")
            side.statuses[status] = side.statuses.get(status, 0) + 1
            side.latencies.append(time.monotonic() - began)
            if b"connection: close" in bytes(buffer[:stop]).lower():
                start(sock)
                continue
            del buffer[:stop]
            state[sock][1] = time.monotonic()
            try:
                sock.send(FLOOD_REQUEST)
            except OSError as exc:
                side.failures.append(repr(exc))
                start(sock)
    for sock in list(state):
        sock.close()
    side.seconds = time.monotonic() - flooding_since
    return side


def neighbour_main(port: int, interval: float, seconds: float, source: str) -> Side:
    """NEIGHBOUR_REQUEST every `interval` on a fresh connection for `seconds`, each answer timed."""
    side = Side()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.monotonic()
        try:
            with _connect(port, source) as sock:
                sock.sendall(NEIGHBOUR_REQUEST)
                data = bytearray()
                while _answer_end(data) < 0:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            if _answer_end(data) < 0:
                side.failures.append(repr(bytes(data[:40])))
            else:
                status = bytes(data[9:12]).decode("latin-1")
                side.statuses[status] = side.statuses.get(status, 0) + 1
                side.latencies.append(time.monotonic() - began)
        except OSError as exc:
            side.failures.append(repr(exc))
        time.sleep(max(0.0, interval - (time.monotonic() - began)))
    return side


def _spawn(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *map(str, args)], stdout=subprocess.PIPE)


def _collect(process: subprocess.Popen[bytes], timeout: float) -> Side:
    out, _ = process.communicate(timeout=timeout)
    result = json.loads(out or b"{}")
    return Side(
        result.get("latencies", []), result.get("statuses", {}), result.get("failures", []), result.get("seconds", 0.0)
    )


def flooded_neighbour(
    port: int, connections: int = 64, seconds: float = 10.0, interval: float = 0.05, warmup: float = 1.0
) -> tuple[Side, Side]:
    """The flood and the neighbour side by side; the neighbour starts `warmup` seconds into the flood and
    stops before it. Returns (flood, neighbour)."""
    flood = _spawn("flood", port, connections, seconds + 2 * warmup, FLOOD_SOURCE)
    try:
        time.sleep(warmup)
        neighbour = _collect(_spawn("neighbour", port, interval, seconds, NEIGHBOUR_SOURCE), seconds + 60)
    finally:
        flooded = _collect(flood, seconds + 2 * warmup + 60)
    return flooded, neighbour


if __name__ == "__main__":
    kind, port_arg, number, seconds_arg, source_arg = sys.argv[1:6]
    if kind == "flood":
        seen = flood_main(int(port_arg), int(number), float(seconds_arg), source_arg)
    else:
        seen = neighbour_main(int(port_arg), float(number), float(seconds_arg), source_arg)
    sys.stdout.write(
        json.dumps({
            "latencies": seen.latencies, "statuses": seen.statuses, "failures": seen.failures[:20],
            "seconds": seen.seconds,
        })
    )
