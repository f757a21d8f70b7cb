"""Real-process plumbing for the integration suite: start servers on free ports, talk raw HTTP, read logs.

Servers are started lazily, one per (implementation, hooks format, flag set), and live for the whole
session, so each hooks file is loaded once. `hookrunner` is the command named by command_under_test; the reference
is /usr/bin/webhook and tests that need it carry the `reference` marker and skip only when it is absent.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_command.py"
HOOKS_DIR = HERE / "hooks"
# The reference binary; HOOKRUNNER_REFERENCE_WEBHOOK may point elsewhere (e.g. a locally built 2.8.0).
REFERENCE_BINARY = Path(os.environ.get("HOOKRUNNER_REFERENCE_WEBHOOK", "/usr/bin/webhook"))

# Flag sets the cases may ask for; every server also gets -hooks, -ip, -port and -verbose.
SERVER_FLAGS: dict[str, tuple[str, ...]] = {
    "default": ("-header", "X-Global=g", "-header", "X-Second=two words"),
    "methods": ("-header", "X-Global=g", "-http-methods", "post, put"),
    "noprefix": ("-urlprefix=",),
    "prefix": ("-urlprefix", "webhooks"),
}

# The -header headers each flag set adds, which answers of a matched hook carry.
SERVER_GLOBAL_HEADERS: dict[str, tuple[tuple[str, str], ...]] = {
    "default": (("X-Global", "g"), ("X-Second", "two words")),
    "methods": (("X-Global", "g"),),
    "noprefix": (),
    "prefix": (),
}

FORMATS = ("json", "yaml")


#: Flags given to every hookrunner server these tests start, after its own: scripts/test runs the
#: integration tests a second time with HOOKRUNNER_TEST_FLAGS="-worker-class gthread".
HOOKRUNNER_TEST_FLAGS = shlex.split(os.environ.get("HOOKRUNNER_TEST_FLAGS", ""))


def implementation_argv(impl: str) -> list[str]:
    if impl == "hookrunner":
        return [HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS]
    if impl == "reference":
        return [str(REFERENCE_BINARY)]
    raise ValueError(impl)


def reference_available() -> bool:
    return REFERENCE_BINARY.is_file() and os.access(REFERENCE_BINARY, os.X_OK)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------------------------- HTTP


@dataclass
class Response:
    """One parsed answer; `interim` holds the status codes of any 1xx answers that came first."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw: bytes
    local_port: int
    interim: list[int] = field(default_factory=list)
    status_line: str = ""  # of the final answer, e.g. "HTTP/1.0 200 OK"

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def header_names(self) -> set[str]:
        return {key.lower() for key, _ in self.headers}


def _parse_head(block: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    lines = block.split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ", 2)
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        key, _, value = line.decode("latin-1").partition(":")
        headers.append((key.strip(), value.strip()))
    return status, reason, headers


def parse_response(raw: bytes, method: str, local_port: int) -> Response:
    interim: list[int] = []
    rest = raw
    while True:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError(f"incomplete HTTP answer: {raw[:300]!r}")
        status, reason, headers = _parse_head(head)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if 100 <= status < 200:
            interim.append(status)
            continue
        break
    lengths = [v for k, v in headers if k.lower() == "content-length"]
    chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif chunked:
        body = _dechunk(rest)
    elif lengths:
        body = rest[: int(lengths[0])]
    else:
        body = rest
    return Response(status, reason, headers, body, raw, local_port, interim, status_line)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return out


def http_request(
    port: int,
    method: str,
    target: str,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
    body: bytes = b"",
    timeout: float = 20.0,
    raw_request: bytes | None = None,
) -> Response:
    """Send one request with `Connection: close` over a fresh socket and read the answer to EOF."""
    if raw_request is None:
        lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        names = {k.lower() for k, _ in headers}
        lines += [f"{k}: {v}" for k, v in headers]
        if "content-length" not in names and "transfer-encoding" not in names and (body or method != "GET"):
            lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: close")
        raw_request = "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        local_port = int(sock.getsockname()[1])
        sock.sendall(raw_request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return parse_response(b"".join(chunks), method, local_port)


# ---------------------------------------------------------------------------------------------- logs

COMMAND_DONE = re.compile(r"^(finished handling |error in )")
ACCESS_LINE_START = re.compile(r"^\d{3} \| ")
LOG_PREFIX = re.compile(rb"^\[webhook\] \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} ")
REQUEST_ID = re.compile(r"^\[([^\]]+)\] ")


@dataclass
class LogEntry:
    request_id: str | None
    message: str


def parse_log(data: bytes) -> list[LogEntry]:
    """Split a Go-style log into entries; lines without the `[webhook] date time` prefix continue the last."""
    entries: list[LogEntry] = []
    for line in data.split(b"\n"):
        match = LOG_PREFIX.match(line)
        if match:
            text = line[match.end() :].decode("utf-8", "replace")
            rid_match = REQUEST_ID.match(text)
            if rid_match:
                entries.append(LogEntry(rid_match.group(1), text[rid_match.end() :]))
            else:
                entries.append(LogEntry(None, text))
        elif entries:
            entries[-1].message += "\n" + line.decode("utf-8", "replace")
    for entry in entries:
        entry.message = entry.message.rstrip("\n")
    return entries


# ---------------------------------------------------------------------------------------------- servers


@dataclass
class Server:
    impl: str
    fmt: str
    flags_name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    workdir: Path
    record_path: Path
    wait_failures: dict[str, int] = field(default_factory=dict)

    def log_bytes(self) -> bytes:
        return self.log_path.read_bytes()

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def entries_since(self, offset: int) -> list[LogEntry]:
        return parse_log(self.log_bytes()[offset:])

    def request_entries(self, offset: int, local_port: int, rid_wait: float = 1.0) -> list[LogEntry]:
        """The log entries of the request sent from `local_port`, plus the request-id-less lines written
        meanwhile. When the hook was triggered, waits (bounded) for the command to finish."""
        needle = f"request from 127.0.0.1:{local_port}"
        deadline = time.monotonic() + rid_wait
        rid: str | None = None
        while rid is None and time.monotonic() < deadline:
            for entry in self.entries_since(offset):
                if entry.request_id and entry.message.endswith(needle):
                    rid = entry.request_id
                    break
            else:
                time.sleep(0.02)
        if rid is None:
            return [e for e in self.entries_since(offset) if e.request_id is None]

        def mine() -> list[LogEntry]:
            return [e for e in self.entries_since(offset) if e.request_id in (rid, None)]

        entries = mine()
        triggered = any(e.message.endswith("hook triggered successfully") for e in entries if e.request_id)
        if triggered:
            entries = self._wait_for(mine, COMMAND_DONE, "command")
        # The access line is written once the answer is out, so the client may be faster than it.
        return self._wait_for(mine, ACCESS_LINE_START, "access")

    def _wait_for(
        self, read: Callable[[], list[LogEntry]], pattern: re.Pattern[str], kind: str
    ) -> list[LogEntry]:
        """Re-read the log until an entry matches `pattern`, bounded; a server that never writes such a
        line costs the full wait only twice."""
        limit = 5.0 if self.wait_failures.get(kind, 0) < 2 else 0.2
        deadline = time.monotonic() + limit
        entries = read()
        while not any(pattern.search(e.message) for e in entries):
            if time.monotonic() > deadline:
                self.wait_failures[kind] = self.wait_failures.get(kind, 0) + 1
                break
            time.sleep(0.02)
            entries = read()
        return entries

    def stop(self) -> None:
        stop_process(self.process, grace=10)


def stop_process(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, then SIGKILL if the process is still there after `grace` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def render_hooks(fmt: str, dest_dir: Path, workdir: Path) -> Path:
    text = (HOOKS_DIR / f"hooks.{fmt}").read_text()
    text = text.replace("@ECHO@", str(ECHO)).replace("@WORKDIR@", str(workdir))
    path = dest_dir / f"hooks.{fmt}"
    path.write_text(text)
    return path


def start_server(impl: str, fmt: str, flags_name: str, base: Path) -> Server:
    base.mkdir(parents=True, exist_ok=True)
    workdir = base / "work"
    (workdir / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ECHO, workdir / "bin" / "echo_command.py")
    path_dir = base / "path-bin"
    path_dir.mkdir(exist_ok=True)
    shutil.copy2(ECHO, path_dir / "hookrunner-test-echo")
    hooks_path = render_hooks(fmt, base, workdir)
    record_path = base / "files-seen.txt"
    log_path = base / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOK_")}
    env["PATH"] = f"{path_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["ECHO_RECORD"] = str(record_path)
    env["PYTHONUNBUFFERED"] = "1"
    last_error = ""
    for _attempt in range(3):
        port = free_port()
        argv = implementation_argv(impl) + [
            "-hooks",
            str(hooks_path),
            "-ip",
            "127.0.0.1",
            "-port",
            str(port),
            "-verbose",
            *SERVER_FLAGS[flags_name],
        ]
        log_file = open(log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        process = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=base, env=env
        )
        log_file.close()
        server = Server(impl, fmt, flags_name, port, process, log_path, workdir, record_path)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if http_request(port, "GET", "/", timeout=2).status == 200:
                    return server
            except OSError:
                pass
            time.sleep(0.05)
        server.stop()
        last_error = log_path.read_bytes()[-2000:].decode("utf-8", "replace")
    raise RuntimeError(f"{impl} did not serve on 127.0.0.1 ({' '.join(argv)}):\n{last_error}")


class ServerPool:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.servers: dict[tuple[str, str, str], Server] = {}
        self.failures: dict[tuple[str, str, str], str] = {}
        # Answers already received, by (implementation, format, case name): the contract and the
        # differential test ask for the same hookrunner answers, and one request each is enough.
        self.outcomes: dict[tuple[str, str, str], Outcome] = {}

    def get(self, impl: str, fmt: str, flags_name: str = "default") -> Server:
        key = (impl, fmt, flags_name)
        if key in self.failures:
            pytest.fail(self.failures[key])
        if key not in self.servers:
            if impl == "reference" and not reference_available():
                pytest.skip(f"reference webhook binary {REFERENCE_BINARY} is not installed")
            try:
                self.servers[key] = start_server(impl, fmt, flags_name, self.base / "-".join(key))
            except RuntimeError as exc:
                self.failures[key] = str(exc)
                pytest.fail(str(exc))
        server = self.servers[key]
        if server.process.poll() is not None:
            pytest.fail(
                f"{impl} server exited with {server.process.returncode}; log:\n"
                + server.log_bytes()[-2000:].decode("utf-8", "replace")
            )
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


# ---------------------------------------------------------------------------------------------- cases

# Log messages worth comparing between implementations (timestamps and request ids are stripped).
SELECTED_LOG_MARKERS = (
    "got matched",
    "hook triggered successfully",
    "command output:",
    "parameter node not found",
    "couldn't retrieve argument",
    "invalid payload signature",
    "error parsing body payload due to unsupported content type header",
    "method not allowed for hook",
    "error parsing JSON",
    "warn: use of deprecated option",
    "use 'pass-arguments-to-command'",
    "is unknown - defaulting to 200",
    "error evaluating hook",
    "error parsing multipart form",
    "no ENVVAR name specified",
    "error occurred:",
    "error extracting command arguments",
)


@dataclass
class Outcome:
    response: Response
    logs: list[LogEntry]
    leftover_files: list[str]
    server_base: str = ""

    def selected_logs(self) -> list[str]:
        """The messages worth comparing in order: they come from the handler, one after the other."""
        picked = []
        for entry in self.logs:
            if any(marker in entry.message for marker in SELECTED_LOG_MARKERS):
                picked.append(PORT_IN_TEXT.sub("127.0.0.1:<port>", entry.message))
        return picked

    def all_logs(self, drop_additions: bool = False) -> list[str]:
        """Every message of the request with what legitimately varies masked (ports, durations, the
        server's directory, temporary file names), sorted: a background command logs at its own pace."""
        masked = []
        for entry in self.logs:
            if drop_additions and HOOKRUNNER_ADDED_LOG_LINES.search(entry.message):
                continue
            text = PORT_IN_TEXT.sub("127.0.0.1:<port>", entry.message)
            if self.server_base:
                text = text.replace(self.server_base, "<server-dir>")
            text = TEMP_FILE_NAME.sub(r"\1<random>", text)
            text = ACCESS_LINE.sub(r"\1<duration>\2", text)
            masked.append(text)
        return sorted(masked)


PORT_IN_TEXT = re.compile(r"127\.0\.0\.1:\d+")
# Log lines hookrunner adds on purpose (docs/compatibility.md, "Deliberate differences"); the reference's
# lines must all still be there.
# The run owner's lines (serve/runowner.py: its start, each worker's hello and end) may fall in any request's
# window.
HOOKRUNNER_ADDED_LOG_LINES = re.compile(r"^\S+ trigger rules not satisfied because: |\brun owner\b")
# pass-file-to-command files are named after their variable plus a random part.
TEMP_FILE_NAME = re.compile(r"/(MY_FILE|HOOK_OTHER|MY_B64|BODY_FILE|BIG_FILE)[A-Za-z0-9_]+")
# The access line: `200 | 24 B | 1.234ms | host | POST /path`; the duration varies.
ACCESS_LINE = re.compile(r"^(\d{3} \| [^|]* \| )[^|]*( \| )")


def send_case(
    server: Server,
    method: str,
    path: str,
    headers: tuple[tuple[str, str], ...],
    body: bytes,
    raw_request: bytes | None = None,
    check_files: bool = False,
    reaches_handler: bool = True,
) -> Outcome:
    """Send one case; when it reaches the hook handler, collect its log lines (and wait for its command)."""
    offset = server.log_offset()
    response = http_request(server.port, method, path, headers, body, raw_request=raw_request)
    logs = server.request_entries(offset, response.local_port, 3.0 if reaches_handler else 0.05)
    leftover: list[str] = []
    if check_files:
        recorded = server.record_path.read_bytes().split(b"\n") if server.record_path.exists() else []
        leftover = [os.fsdecode(p) for p in recorded if p and os.path.exists(p)]
    return Outcome(response, logs, leftover, str(server.workdir.parent))
