"""Hostile clients for issue 21, shared by tests/integration/test_hostile.py (a small CI profile) and
scripts/hostile (the long profile, side by side with webhook): connection floods, oversized heads, big
bodies, pipelining, and a probe that measures what a normal client sees meanwhile.

Every loop here is bounded in count and in time, and everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
MiB = 1 << 20


def raise_fd_limit() -> int:
    """This process's soft limit on open files raised to its hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def hooks(marker_dir: Path) -> list[dict[str, object]]:
    """The hooks both servers get: a probe target, a background run that leaves a file when it ends, a
    queued command that takes one field, a hook whose rule fails (issue 34's flood), and hooks that parse JSON, XML and form bodies."""
    return [
        {"id": "ping", "execute-command": "/bin/true"},
        {
            "id": "bg",
            "execute-command": "/usr/bin/touch",
            "pass-arguments-to-command": [{"source": "string", "name": str(marker_dir / "bg-done")}],
        },
        {
            "id": "slow-bg",
            "execute-command": "/bin/sleep",
            "pass-arguments-to-command": [{"source": "url", "name": "s"}],
        },
        {
            "id": "guarded",
            "execute-command": "/bin/true",
            "trigger-rule": {
                "match": {"type": "value", "value": "let-me-in", "parameter": {"source": "header", "name": "X-Token"}}
            },
        },
        {"id": "json", "execute-command": "/bin/true", "incoming-payload-content-type": "application/json"},
        {"id": "xml", "execute-command": "/bin/true", "incoming-payload-content-type": "application/xml"},
        {"id": "form", "execute-command": "/bin/true"},
        {
            "id": "queued",
            "execute-command": "/bin/sleep",
            "pass-arguments-to-command": [{"source": "payload", "name": "s"}],
        },
    ]


@dataclass
class Target:
    """One server under test: hookrunner or webhook, on a loopback port."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def pids(self) -> list[int]:
        """The server's process and its children (hookrunner's workers and run owner)."""
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return [pid, *(int(c) for c in children)]

    def rss_mb(self, pids: list[int] | None = None) -> float:
        """The RSS of `pids` (by default the server's process and its children) in MB, summed."""
        total = 0
        for pid in self.pids() if pids is None else pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start(
    name: str, argv: list[str], workdir: Path, hook_list: list[dict[str, object]], secure: bool = False
) -> Target:
    """Start `argv` (hookrunner or webhook) with the hooks on a free port; wait until `/` answers. With
    `secure`, it serves TLS (-secure) with a certificate made for it in `workdir`."""
    hooks_path = workdir / f"{name}-hooks.json"
    hooks_path.write_text(json.dumps(hook_list))
    port = free_port()
    log_path = workdir / f"{name}.log"
    tls: list[str] = []
    if secure:
        import trustme

        cert = trustme.CA().issue_cert(HOST, "localhost")
        cert.private_key_and_cert_chain_pem.write_to_path(str(workdir / "cert.pem"))
        cert.private_key_pem.write_to_path(str(workdir / "key.pem"))
        tls = ["-secure", "-cert", str(workdir / "cert.pem"), "-key", str(workdir / "key.pem")]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*argv, "-hooks", str(hooks_path), "-ip", HOST, "-port", str(port), "-verbose", *tls],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    target = Target(name, process, port, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited: {target.log}")
        try:
            if request(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2, secure).startswith(
                b"HTTP/1.1 200"
            ):
                return target
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not answer: {target.log}")


def stop(target: Target) -> None:
    """Stop the server; a worker left behind by a master killed after 15 s is killed too (it would go on
    ending its runs, and take the CPU from the attacks that follow)."""
    workers = target.pids()[1:]
    target.process.terminate()
    try:
        target.process.wait(15)
    except subprocess.TimeoutExpired:
        target.process.kill()
        target.process.wait(5)
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def request(port: int, data: bytes, timeout: float = 10.0, secure: bool = False) -> bytes:
    """Send raw bytes (over TLS, not verified, with `secure`), read until the server closes (or `timeout`
    passes: then what came)."""
    with socket.create_connection((HOST, port), timeout=timeout) as raw:
        sock = _unverified().wrap_socket(raw, server_hostname="localhost") if secure else raw
        sock.sendall(data)
        return receive(sock, time.monotonic() + timeout)


def _unverified() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def receive(sock: socket.socket, deadline: float, done: Callable[[bytes], bool] | None = None) -> bytes:
    """What the server sends until it closes, `deadline` passes (or the socket times out), or `done(got)`."""
    out = bytearray()
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
            if done is not None and done(bytes(out)):
                break
    except (TimeoutError, ConnectionResetError):
        pass
    return bytes(out)


def push(path: str, body: bytes = b"", content_type: str = "application/json", close: bool = True) -> bytes:
    connection = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{connection}Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# ------------------------------------------------------------------------------------------ the probe


class Probe:
    """A normal client: a push every `interval` on a fresh connection, each answer timed. It runs in a
    process of its own, so that the attacking threads of this process do not delay it (the GIL)."""

    def __init__(self, port: int, interval: float = 0.1, limit: float = 600, get: str = "") -> None:
        self.port, self.interval, self.limit, self.get = port, interval, limit, get
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Probe:
        argv = [sys.executable, __file__, "probe", str(self.port), str(self.interval), str(self.limit), self.get]
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self

    def stop(self) -> Probe:
        if self._process is not None:
            out, _ = self._process.communicate(b"stop\n", timeout=self.limit + 30)
            result = json.loads(out or b"{}")
            self.latencies = result.get("latencies", [])
            self.failures = result.get("failures", [])
            self._process = None
        return self

    @property
    def answered(self) -> int:
        return len(self.latencies)

    def p99_ms(self) -> float:
        if not self.latencies:
            return float("inf")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    def summary(self) -> str:
        first = f" (first: {self.failures[0]})" if self.failures else ""
        return f"{self.answered} answered, {len(self.failures)} failed{first}, p99 {self.p99_ms():.1f} ms"


def _probe_main(port: int, interval: float, limit: float, get: str = "") -> None:
    """The probe's process: pushes (or GETs of `get`) until a line (or the end) comes on stdin, then prints
    the results."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    latencies: list[float] = []
    failures: list[str] = []
    data = push("/hooks/ping", b"{}")
    if get:
        data = f"GET {get} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    end = time.monotonic() + limit
    while not stop.is_set() and time.monotonic() < end:
        began = time.monotonic()
        try:
            answer = request(port, data, 10)
            if answer.startswith(b"HTTP/1.1 200 "):
                latencies.append(time.monotonic() - began)
            else:
                failures.append(repr(answer[:40]))
        except OSError as exc:
            failures.append(repr(exc))
        stop.wait(max(0.0, interval - (time.monotonic() - began)))
    sys.stdout.write(json.dumps({"latencies": latencies, "failures": failures}))


@contextmanager
def probing(port: int, interval: float = 0.1, get: str = "") -> Iterator[Probe]:
    probe = Probe(port, interval, get=get).start()
    try:
        yield probe
    finally:
        probe.stop()


# ------------------------------------------------------------------------------------ connection floods

FLOOD_KINDS = ("idle", "keepalive", "slowloris", "slowbody")


class Flood:
    """`count` connections of one kind held open; the slow kinds get a byte each every `pace` seconds."""

    def __init__(self, port: int, kind: str, count: int, pace: float = 1.0, limit: float = 300) -> None:
        self.port, self.kind, self.count, self.pace, self.limit = port, kind, count, pace, limit
        self.socks: list[socket.socket] = []
        self.opened = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> Flood:
        deadline = time.monotonic() + 60
        for _ in range(self.count):
            if time.monotonic() > deadline:
                break
            try:
                sock = socket.create_connection((HOST, self.port), timeout=10)
            except OSError:
                continue
            self.socks.append(sock)
            try:
                if self.kind == "keepalive":
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                elif self.kind == "slowloris":
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-a: ")
                elif self.kind == "slowbody":
                    sock.sendall(
                        push("/hooks/json", b"", close=False).replace(b"Length: 0", b"Length: 1000000")
                    )
            except OSError:
                pass
        if self.kind == "keepalive":
            for sock in self.socks:
                try:
                    sock.recv(4096)  # the answer; the connection then stays idle, kept alive
                except OSError:
                    pass
        self.opened = len(self.socks)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()
        return self

    def _trickle(self) -> None:
        end = time.monotonic() + self.limit
        while not self._stop.wait(self.pace) and time.monotonic() < end:
            if self.kind not in ("slowloris", "slowbody"):
                continue
            for sock in self.socks:
                try:
                    sock.send(b"a")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for sock in self.socks:
            sock.close()
        self.socks.clear()


# --------------------------------------------------------------------------------------- single attacks


def oversized_head(port: int, kind: str, size: int) -> tuple[bytes, float]:
    """Send a head of `size` bytes (a long header, or a long request line) as fast as the server takes it;
    returns the answer and the seconds from crossing net/http's limit (1 MB + 4 KiB) to the answer."""
    if kind == "line":
        data = b"GET /" + b"a" * size + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    else:
        data = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
    limit = (1 << 20) + 4096
    crossed: list[float] = []
    with socket.create_connection((HOST, port), timeout=30) as sock:

        def send() -> None:
            sent = 0
            try:
                while sent < len(data):
                    sent += sock.send(data[sent : sent + 65536])
                    if sent > limit and not crossed:
                        crossed.append(time.monotonic())
            except OSError:
                pass
            if not crossed:
                crossed.append(time.monotonic())

        sender = threading.Thread(target=send, daemon=True)
        sender.start()

        def answered_in_full(answer: bytes) -> bool:
            return answer.endswith(b"431 Request Header Fields Too Large") or (
                b"\r\n\r\n" in answer
                and (b"Content-Length: 0" in answer or answer.startswith(b"HTTP/1.1 200"))
            )

        answer = receive(sock, time.monotonic() + 30, answered_in_full)
        answered = time.monotonic()
        sock.close()
        sender.join(5)
    return answer, answered - (crossed[0] if crossed else answered)


def json_body(size: int, kind: str) -> bytes:
    """`invalid`: a valid object followed by garbage; `valid`: the same without; `nested`: `[[[...0...]]]`."""
    if kind == "nested":
        half = (size - 1) // 2
        return b"[" * half + b"0" + b"]" * half
    items = max(1, (size - 10) // 2)
    body = b'{"a":[' + b"0," * (items - 1) + b"0]}"
    return body + b"x" if kind == "invalid" else body


def xml_body(size: int, kind: str = "siblings") -> bytes:
    """`siblings`: `<r><a/><a/>...</r>`; `nested`: `<a><a>...</a></a>` (one element per 7 bytes, issue 34's
    3.7 million in 25 MiB); `attributes`: `<r a0="1" a1="1" .../>`, one element with all the attributes."""
    if kind == "nested":
        depth = max(1, size // 7)
        return b"<a>" * depth + b"</a>" * depth
    if kind == "attributes":
        names = []
        total, n = 4, 0
        while total < size:
            names.append(b' a%d="1"' % n)
            total += len(names[-1])
            n += 1
        return b"<r" + b"".join(names) + b"/>"
    return b"<r>" + b"<a/>" * max(1, (size - 7) // 4) + b"</r>"


def form_body(fields: int) -> bytes:
    return b"&".join(b"f%d=1" % i for i in range(fields))


def one_byte_chunks(size: int) -> bytes:
    head = b"POST /hooks/json HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\n \r\n" * (size // 6) + b"0\r\n\r\n"


def timed(send: Callable[[], bytes]) -> tuple[bytes, float]:
    began = time.monotonic()
    answer = send()
    return answer, time.monotonic() - began


def pipelined(port: int, count: int, timeout: float = 120) -> tuple[int, float]:
    """`count` GETs of `/` in one write on one connection; returns how many answers came and the seconds."""
    one = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    answers = 0
    began = time.monotonic()
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sender = threading.Thread(target=lambda: _send_quietly(sock, one * count), daemon=True)
        sender.start()
        tail = b""
        deadline = began + timeout
        try:
            while answers < count and time.monotonic() < deadline:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data = tail + chunk
                answers += data.count(b"HTTP/1.1 200 OK")
                tail = data[-20:]
                if b"HTTP/1.1 200 OK" in tail:
                    answers -= tail.count(b"HTTP/1.1 200 OK")
                else:
                    continue
        except (TimeoutError, ConnectionResetError):
            pass
        sender.join(5)
    return answers, time.monotonic() - began


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


def background_run_survives(target: Target, marker: Path, attack: Callable[[], object]) -> bool:
    """A background run is accepted (answered) before `attack`; returns whether it finished (its file
    appeared) by the end, with the run started as the attack starts."""
    marker.unlink(missing_ok=True)
    answer = request(target.port, push("/hooks/slow-bg?s=2", b"{}"))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    answer = request(target.port, push("/hooks/bg", b"{}"))
    attack()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.1)
    return marker.exists() and answer.startswith(b"HTTP/1.1 200 ")


def queue_memory(target: Target, count: int) -> tuple[int, float]:
    """`count` pushes of 100 KB queued behind one running command (a server started with
    -max-concurrent-commands 1); returns how many were answered 200 and how many MB the server grew."""
    field = b"x" * (100 * 1024)
    body = b'{"s":"0.01","pad":"' + field + b'"}'
    request(target.port, push("/hooks/queued", b'{"s":"60"}'))  # holds the one slot
    time.sleep(0.5)
    before = target.rss_mb()
    data = push("/hooks/queued", body)
    answered = 0
    for _ in range(count):
        if request(target.port, data, 30).startswith(b"HTTP/1.1 200"):
            answered += 1
    time.sleep(1)
    return answered, target.rss_mb() - before


# ------------------------------------------------------------------------------------ the admin listener


def listener_pid(pids: list[int], port: int) -> int | None:
    """Which of `pids` listens on 127.0.0.1:`port` (hookrunner's admin listener is a process of its own)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
            inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
        except OSError:
            continue
    return None


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def rss_of(pid: int) -> float:
    """One process's RSS in MB (0 once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def long_request_lines(port: int, count: int, size: int = 70_000) -> int:
    """`count` requests whose request line is `size` bytes, longer than the server takes; returns how many
    were refused (414; net/http answers 431: its limit, 1 MiB + 4 KiB, is on the whole head)."""
    data = b"GET /" + b"a" * size + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    refused = 0
    for _ in range(count):
        try:
            answer = request(port, data, 10)
        except OSError:
            continue
        refused += answer.startswith((b"HTTP/1.1 414", b"HTTP/1.0 414", b"HTTP/1.1 431"))
    return refused


# ----------------------------------------------------------------------------------------------- TLS


def tls_flood(port: int, count: int, kind: str, concurrency: int = 32) -> int:
    """`count` TLS connections: `full` completes a handshake and closes, `concurrency` at a time; `held`
    opens all `count` at once, sends a ClientHello on each, and closes them all only once every one is
    sent (handshakes the server has begun and must hold, then aborted). Returns how many handshakes
    completed (full) or ClientHellos were sent (held)."""
    context = _unverified()
    if kind == "held":
        socks, sent = [], 0
        try:
            for _ in range(count):
                try:
                    sock = socket.create_connection((HOST, port), timeout=10)
                except OSError:
                    continue
                socks.append(sock)
                outgoing = ssl.MemoryBIO()
                client = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="localhost")
                try:
                    client.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                try:
                    sock.sendall(outgoing.read())
                    sent += 1
                except OSError:
                    pass
            time.sleep(1)  # the server answers each ClientHello meanwhile
        finally:
            for sock in socks:
                sock.close()
        return sent
    done = [0]
    lock = threading.Lock()
    left = iter(range(count))

    def run() -> None:
        while True:
            with lock:
                if next(left, None) is None:
                    return
            try:
                with socket.create_connection((HOST, port), timeout=10) as sock, context.wrap_socket(
                    sock, server_hostname="localhost"
                ):
                    pass
            except OSError:
                continue
            with lock:
                done[0] += 1

    workers = [threading.Thread(target=run, daemon=True) for _ in range(concurrency)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
    return done[0]


def free_fds() -> int:
    return raise_fd_limit() - len(os.listdir("/proc/self/fd"))


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    raise_fd_limit()
    _probe_main(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), *sys.argv[5:6])
