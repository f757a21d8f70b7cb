"""The safety limits of docs/limits.md against the real `hookrunner`: command timeouts, concurrency, body
size, slow clients, graceful shutdown, -validate and -trusted-proxies."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_serving import HOOKRUNNER, Server, free_port, tls_files, wait_until

MSG_COMMAND_ERROR = (
    b"Error occurred while executing the hook's command. Please check your logs for more details."
)

# A command that starts a child (`sleep 30`) in its own process group, records both pids, then waits:
# a timeout or a shutdown must end both, or the child would be left behind as an orphan.
FAMILY = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "30"])
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {child.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(30)
"""

# A command that records when it starts and ends, with the request's `seq`, and first waits (bounded)
# until a gate file exists, so a test decides how long a run lasts.
RECORDER = """
import os, sys, time
record, gate, seq = sys.argv[1], sys.argv[2], sys.argv[3]
def write(what):
    with open(record, "a") as out:
        out.write(f"{what} {time.monotonic_ns()} {seq}\\n")
write("start")
deadline = time.monotonic() + float(os.environ.get("RECORDER_GATE_WAIT", "15"))
while gate and not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.01)
write("end")
"""


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str) -> Server:
    server = Server(tmp_path, hooks, *flags)
    servers.append(server)
    server.ready()
    return server


def python_command(code: str, *args: dict[str, str]) -> dict[str, object]:
    return {
        "execute-command": sys.executable,
        "pass-arguments-to-command": [
            {"source": "string", "name": "-c"},
            {"source": "string", "name": code},
            *args,
        ],
    }


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a zombie has ended; only its entry is left)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def read_pids(path: Path) -> list[int]:
    assert wait_until(path.exists, timeout=15), "the command never recorded its pids"
    return [int(pid) for pid in path.read_text().split()]


# --------------------------------------------------------------------------------------- command timeout


def test_command_timeout_kills_the_whole_group_and_answers_500(tmp_path: Path, servers: list[Server]) -> None:
    pids_file = tmp_path / "pids"
    hook = {
        "id": "stuck",
        **python_command(FAMILY, {"source": "string", "name": str(pids_file)}),
        "include-command-output-in-response": True,
        "command-timeout": "1s",
    }
    server = start(tmp_path, servers, [hook])
    began = time.monotonic()
    status, _, body = server.request("POST", "/hooks/stuck")
    elapsed = time.monotonic() - began
    assert (status, body) == (500, MSG_COMMAND_ERROR)
    assert elapsed < 10  # not the command's 30 s
    leader, child = read_pids(pids_file)
    # TERM went to the whole group: the `sleep 30` grandchild is gone too, no orphan is left.
    assert wait_until(lambda: not alive(leader) and not alive(child), timeout=10)
    assert "command timed out after 1s; terminating its process group" in server.log
    assert "error occurred: command timed out after 1s (signal: terminated)" in server.log


def test_global_command_timeout_flag_applies_to_background_commands(
    tmp_path: Path, servers: list[Server]
) -> None:
    pids_file = tmp_path / "pids"
    hook = {"id": "stuck", **python_command(FAMILY, {"source": "string", "name": str(pids_file)})}
    server = start(tmp_path, servers, [hook], "-command-timeout", "1500ms")
    assert server.request("POST", "/hooks/stuck")[0] == 200  # answered at once, the command runs on
    leader, child = read_pids(pids_file)
    assert wait_until(lambda: "command timed out after 1.5s" in server.log, timeout=10)
    assert wait_until(lambda: not alive(leader) and not alive(child), timeout=10)


# ------------------------------------------------------------------------------------------ concurrency


def records(path: Path) -> list[tuple[str, int, str]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        what, stamp, seq = line.split(" ", 2)
        rows.append((what, int(stamp), seq))
    return rows


def runs(path: Path) -> list[tuple[int, int, str]]:
    """(start, end, seq) of every finished run, in start order."""
    rows = records(path)
    starts = [(stamp, seq) for what, stamp, seq in rows if what == "start"]
    ends = [stamp for what, stamp, _ in rows if what == "end"]
    return [(s, e, seq) for (s, seq), e in zip(starts, ends, strict=False)]


def recorder_hook(hook_id: str, record: Path, gate: str, **limits: object) -> dict[str, object]:
    return {
        "id": hook_id,
        **python_command(
            RECORDER,
            {"source": "string", "name": str(record)},
            {"source": "string", "name": gate},
            {"source": "url", "name": "seq"},
        ),
        "response-message": "accepted",
        **limits,
    }


def test_fifty_parallel_requests_run_one_at_a_time_through_the_queue(
    tmp_path: Path, servers: list[Server]
) -> None:
    record, gate = tmp_path / "runs", tmp_path / "gate"
    hook = recorder_hook("serial", record, str(gate), **{"max-concurrency": 1, "max-queue": 60})
    server = start(tmp_path, servers, [hook])
    # The first run to start holds the only slot until the gate opens, so the other 49 must queue.
    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(lambda i: server.request("POST", f"/hooks/serial?seq={i}"), range(50)))
    assert [(status, body) for status, _, body in answers] == [(200, b"accepted")] * 50
    assert wait_until(lambda: server.log.count("serial is at its concurrency limit; run queued") == 49)
    # The first run's interpreter may still be starting on a loaded machine: wait for its record.
    assert wait_until(lambda: len(records(record)) == 1)
    assert len(records(record)) == 1
    gate.write_text("go")
    assert wait_until(lambda: len(runs(record)) == 50, timeout=60), records(record)
    done = runs(record)
    assert sorted(seq for _, _, seq in done) == sorted(str(i) for i in range(50))
    # The command's own clock shows the queue: each run starts only after the previous one ended.
    for (_, previous_end, _), (next_start, _, _) in zip(done, done[1:], strict=False):
        assert next_start >= previous_end


def test_queue_is_fifo_and_a_full_queue_answers_429_with_retry_after(
    tmp_path: Path, servers: list[Server]
) -> None:
    record, gate = tmp_path / "runs", tmp_path / "gate"
    hook = recorder_hook(
        "limited", record, str(gate), **{"max-concurrency": 1, "max-queue": 2, "retry-after": 7}
    )
    server = start(tmp_path, servers, [hook])
    assert server.request("POST", "/hooks/limited?seq=0")[0] == 200
    assert wait_until(lambda: len(records(record)) == 1)  # run 0 holds the only slot
    assert server.request("POST", "/hooks/limited?seq=1")[0] == 200  # queued
    assert server.request("POST", "/hooks/limited?seq=2")[0] == 200  # queued
    status, headers, body = server.request("POST", "/hooks/limited?seq=3")
    assert status == 429
    assert headers["retry-after"] == "7"
    assert body == b"Too many runs of this hook are already running or queued."
    gate.write_text("go")
    assert wait_until(lambda: len(runs(record)) == 3, timeout=20), records(record)
    assert [seq for _, _, seq in runs(record)] == ["0", "1", "2"]  # first in, first out; 3 never ran


def worker_threads(server: Server) -> int:
    """The number of threads of the server's worker process."""
    return len(os.listdir(f"/proc/{server.worker_pid()}/task"))


def test_max_concurrent_commands_runs_the_rest_in_line_without_a_thread_each(
    tmp_path: Path, servers: list[Server]
) -> None:
    record, gate = tmp_path / "runs", tmp_path / "gate"
    hooks = [recorder_hook("a", record, str(gate)), recorder_hook("b", record, str(gate))]
    server = start(tmp_path, servers, hooks, "-max-concurrent-commands", "1")
    for _ in range(5):
        assert server.request("GET", "/")[0] == 200
    idle = worker_threads(server)
    for i in range(40):  # one after another: the answers need no threads of their own
        assert server.request("POST", f"/hooks/{'ab'[i % 2]}?seq={i}")[::2] == (200, b"accepted")
    assert wait_until(lambda: len(records(record)) == 1)  # run 0 holds the only slot
    # 39 runs wait for it. They used to wait on a thread each (+40 threads); now they wait in a line. The
    # margin is for threads gunicorn's request pool may add meanwhile (2-4 seen).
    assert worker_threads(server) - idle < 20
    time.sleep(0.3)
    assert len(records(record)) == 1
    gate.write_text("go")
    assert wait_until(lambda: len(runs(record)) == 40, timeout=60), records(record)
    done = runs(record)
    assert [seq for _, _, seq in done] == [str(i) for i in range(40)]  # first in, first out, over hooks
    for (_, previous_end, _), (next_start, _, _) in zip(done, done[1:], strict=False):
        assert next_start >= previous_end  # one at a time


def test_coalescing_collapses_a_burst_into_one_more_run_with_the_latest_payload(
    tmp_path: Path, servers: list[Server]
) -> None:
    record, gate = tmp_path / "runs", tmp_path / "gate"
    hook = recorder_hook("docs", record, str(gate), **{"max-concurrency": 1, "coalesce": True})
    server = start(tmp_path, servers, [hook])
    assert server.request("POST", "/hooks/docs?seq=first")[0] == 200
    assert wait_until(lambda: len(records(record)) == 1)  # a rebuild is running
    # 48 pushes at once while it runs, then the newest one: 50 requests in all.
    with ThreadPoolExecutor(max_workers=48) as pool:
        burst = list(pool.map(lambda i: server.request("POST", f"/hooks/docs?seq=burst{i}"), range(48)))
    assert [status for status, _, _ in burst] == [200] * 48
    assert server.request("POST", "/hooks/docs?seq=latest")[0] == 200
    gate.write_text("go")
    assert wait_until(lambda: len(runs(record)) == 2, timeout=20), records(record)
    time.sleep(0.5)  # room for a run that should not exist
    assert [seq for _, _, seq in runs(record)] == ["first", "latest"]
    assert server.log.count("docs is at its concurrency limit; run coalesced") == 48


def test_coalesce_by_keeps_one_waiting_run_per_branch(tmp_path: Path, servers: list[Server]) -> None:
    """The docs-rebuild pairing (docs/docs-rebuild.md): a dev push waiting behind a build is not replaced by a
    main push; each branch's newest push runs once."""
    record, gate = tmp_path / "runs", tmp_path / "gate"
    limits = {"max-concurrency": 1, "max-queue": 2, "coalesce-by": {"source": "url", "name": "branch"}}
    server = start(tmp_path, servers, [recorder_hook("docs", record, str(gate), **limits)])
    assert server.request("POST", "/hooks/docs?branch=dev&seq=dev-1")[0] == 200
    assert wait_until(lambda: len(records(record)) == 1)  # a build is running
    for seq in ("dev-2", "main-1", "dev-3", "main-2", "dev-4"):
        assert server.request("POST", f"/hooks/docs?branch={seq.split('-')[0]}&seq={seq}")[0] == 200
    status, headers, _ = server.request("POST", "/hooks/docs?branch=v1&seq=v1-1")
    assert (status, headers.get("retry-after")) == (429, "5")  # a third branch: the queue (2) is full
    gate.write_text("go")
    assert wait_until(lambda: len(runs(record)) == 3, timeout=20), records(record)
    time.sleep(0.5)  # room for a run that should not exist
    assert [seq for _, _, seq in runs(record)] == ["dev-1", "dev-4", "main-2"]
    assert server.log.count("docs is at its concurrency limit; run coalesced") == 3


# ----------------------------------------------------------------------------------------- body size


def raw_exchange(port: int, head: bytes, body_size: int, chunk: bytes = b"x" * 65536) -> bytes:
    """Send `head`, then the body from another thread while reading the answer (the server may answer
    and close before the body is through); returns what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(head)

        def send_body() -> None:
            sent = 0
            try:
                while sent < body_size:
                    piece = chunk[: body_size - sent]
                    sock.sendall(piece)
                    sent += len(piece)
            except OSError:
                pass  # the server stopped reading: expected once it has refused the body

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 10:
                piece = sock.recv(65536)
                if not piece:
                    break
                data += piece
        except OSError:
            pass
        sender.join(timeout=15)
    return data


def test_a_30_mib_body_is_refused_with_413_and_nothing_runs(tmp_path: Path, servers: list[Server]) -> None:
    marker = tmp_path / "ran"
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')"
    server = start(tmp_path, servers, [{"id": "upload", **python_command(code)}])
    size = 30 << 20
    head = (
        f"POST /hooks/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    answer = raw_exchange(server.port, head, size)
    assert answer.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n"), answer[:200]
    assert answer.endswith(b"Request body too large.")
    assert wait_until(lambda: "request body larger than 26214400 bytes, answering 413" in server.log)
    # Nothing ran: the hook's command never started.
    assert "executing" not in server.log
    assert not marker.exists()
    # Just under the default limit is served as before.
    small = 1 << 20
    head = head.replace(f"Content-Length: {size}".encode(), f"Content-Length: {small}".encode())
    assert raw_exchange(server.port, head, small).startswith(b"HTTP/1.1 200 OK\r\n")
    assert wait_until(marker.exists)


def test_max_body_size_flag_takes_units_and_holds_for_chunked_bodies(
    tmp_path: Path, servers: list[Server]
) -> None:
    record = tmp_path / "sizes"
    code = f"import sys; open({str(record)!r}, 'a').write(str(len(sys.argv[1])) + '\\n')"
    hook = {"id": "t", **python_command(code, {"source": "raw-request-body", "name": ""})}
    server = start(tmp_path, servers, [hook], "-max-body-size", "64KiB")
    limit = 64 << 10
    assert server.request("POST", "/hooks/t", body=b"x" * limit)[0] == 200
    assert server.request("POST", "/hooks/t", body=b"x" * (limit + 1))[0] == 413

    def chunks(size: int) -> Iterator[bytes]:
        for start in range(0, size, 4096):
            yield b"y" * min(4096, size - start)

    # Without a Content-Length the body is counted as it arrives: one byte over is refused, not cut short.
    assert server.request("POST", "/hooks/t", body=chunks(limit + 1))[0] == 413  # type: ignore[arg-type]
    assert server.request("POST", "/hooks/t", body=chunks(3 * limit))[0] == 413  # type: ignore[arg-type]
    assert server.request("POST", "/hooks/t", body=chunks(limit))[0] == 200  # type: ignore[arg-type]
    assert wait_until(lambda: record.exists() and len(record.read_text().split()) == 2)
    time.sleep(0.3)
    assert record.read_text().split() == [str(limit), str(limit)]  # only the two that fit ran, whole


# --------------------------------------------------------------------------------------- slow clients

SLOW_CONNECTIONS = 80  # more than the worker's 64 threads: without a read timeout they would hold all


def slowloris(port: int, stop: threading.Event, closed_after: list[float]) -> None:
    """Open a connection and send a request head a few bytes at a time, until the server hangs up."""
    began = time.monotonic()
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    with sock:
        try:
            sock.sendall(b"POST /hooks/t HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.settimeout(0.25)
            deadline = began + 12
            while not stop.is_set() and time.monotonic() < deadline:
                sock.sendall(b"X-Slow: 1\r\n")
                try:
                    if sock.recv(1024) == b"":
                        break  # the server closed the connection
                except TimeoutError:
                    continue
            else:
                return
        except OSError:
            pass  # reset by the server: closed as well
        closed_after.append(time.monotonic() - began)


def normal_request_time(port: int, limit: float) -> float | None:
    """Seconds until `GET /` is answered, or None if it is not answered within `limit`."""
    began = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = sock.recv(1024)
    except OSError:
        return None
    return time.monotonic() - began if answer.startswith(b"HTTP/1.1 200 OK") else None


def attack(port: int) -> tuple[threading.Event, list[float], list[threading.Thread]]:
    stop = threading.Event()
    closed_after: list[float] = []
    threads = [
        threading.Thread(target=slowloris, args=(port, stop, closed_after), daemon=True)
        for _ in range(SLOW_CONNECTIONS)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # every slow client is connected and dribbling
    return stop, closed_after, threads


def test_slow_clients_are_cut_off_while_others_are_served(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true"}], "-read-timeout", "2s")
    stop, closed_after, threads = attack(server.port)
    try:
        waited = normal_request_time(server.port, limit=8)
        assert waited is not None, "a normal request was not served during the attack"
        assert waited < 5
        # The slow clients go on until the server hangs up on them (each gives up after 12 s).
        for thread in threads:
            thread.join(timeout=15)
    finally:
        stop.set()
    # Every slow connection was closed by the server, at about the read timeout.
    assert len(closed_after) == SLOW_CONNECTIONS
    assert max(closed_after) < 8
    assert min(closed_after) >= 1.5
    assert "request not received within 2s" in server.log
    assert server.request("GET", "/")[0] == 200


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
def test_without_a_read_timeout_slow_clients_are_not_cut_off(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    # The control for the test above: the same attack, -read-timeout 0 (what a plain server does). Nobody
    # is cut off. On the threaded worker the slow clients hold all 64 threads, and others starve; on the
    # gevent worker each is a greenlet, and others are still served (up to gunicorn's 1000 connections).
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true"}],
                   "-read-timeout", "0", "-worker-class", worker_class)
    stop, closed_after, threads = attack(server.port)
    try:
        waited = normal_request_time(server.port, limit=3)
        if worker_class == "gthread":
            assert waited is None
        else:
            assert waited is not None and waited < 2
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    assert closed_after == []  # nobody was cut off
    assert wait_until(lambda: normal_request_time(server.port, limit=2) is not None, timeout=10)


def test_a_slow_body_is_cut_off_and_runs_nothing(tmp_path: Path, servers: list[Server]) -> None:
    marker = tmp_path / "ran"
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')"
    server = start(tmp_path, servers, [{"id": "t", **python_command(code)}], "-read-timeout", "1s")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /hooks/t HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
        began = time.monotonic()
        answer = b""
        sock.settimeout(0.2)
        while time.monotonic() - began < 6:
            try:
                sock.sendall(b"a")
                piece = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert time.monotonic() - began < 4
    time.sleep(0.3)
    assert not marker.exists()
    assert "executing" not in server.log


def test_a_stalled_tls_handshake_is_cut_off(tmp_path: Path, servers: list[Server]) -> None:
    ca, flags = tls_files(tmp_path)
    server = Server(tmp_path, [{"id": "t", "execute-command": "/bin/true"}], *flags, "-read-timeout", "1s")
    servers.append(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    server.ready(lambda: http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and then nothing
        began = time.monotonic()
        try:
            closed = sock.recv(1024) == b""
        except OSError:
            closed = True
        waited = time.monotonic() - began
    assert closed
    assert 0.8 <= waited < 5
    assert wait_until(lambda: "TLS handshake not done within 1s" in server.log)
    # A client that completes its handshake is served as before.
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10)
    assert server.request("POST", "/hooks/t", conn=conn)[0] == 200


# ------------------------------------------------------------------------------------ graceful shutdown


def test_sigterm_waits_for_the_bound_then_kills_the_commands_group(
    tmp_path: Path, servers: list[Server]
) -> None:
    pids_file = tmp_path / "pids"
    hook = {"id": "long", **python_command(FAMILY, {"source": "string", "name": str(pids_file)})}
    server = start(tmp_path, servers, [hook], "-shutdown-timeout", "2s")
    assert server.request("POST", "/hooks/long")[0] == 200
    leader, child = read_pids(pids_file)
    began = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.stop(timeout=30) == 0
    waited = time.monotonic() - began
    assert 1.5 <= waited < 10  # the bound was honoured: neither at once nor the command's 30 s
    assert "caught terminated signal; exiting" in server.log
    assert f"shutdown: killing the process group of command {leader}" in server.log
    assert wait_until(lambda: not alive(leader) and not alive(child), timeout=10)


def test_sigterm_lets_a_command_finish_within_the_bound(tmp_path: Path, servers: list[Server]) -> None:
    marker = tmp_path / "finished"
    code = f"import pathlib, time; time.sleep(1); pathlib.Path({str(marker)!r}).write_text('done')"
    server = start(tmp_path, servers, [{"id": "short", **python_command(code)}], "-shutdown-timeout", "10s")
    assert server.request("POST", "/hooks/short")[0] == 200
    time.sleep(0.3)
    server.signal(signal.SIGTERM)
    assert server.stop(timeout=30) == 0
    assert marker.read_text() == "done"
    assert "shutdown: killing" not in server.log


# ------------------------------------------------------------------------------------------- -validate


def validate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOOKRUNNER, "-validate", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_validate_reports_each_kind_of_mistake_and_serves_nothing(tmp_path: Path) -> None:
    first = tmp_path / "hooks.json"
    second = tmp_path / "more.yaml"
    match = {"type": "value", "value": "x", "parameter": {"source": "header", "name": "X-Token"}}
    first.write_text(json.dumps([
        {"id": "ok", "execute-command": "/bin/true"},
        {"id": "typo", "execute-command": "/bin/true", "trigger_rule": {"match": match}},
        {"id": "kind", "execute-command": "/bin/true",
         "trigger-rule": {"match": {**match, "type": "valeu", "parameter": {"source": "headers", "name": "X"}}}},
        {"id": "regex", "execute-command": "/bin/true",
         "trigger-rule": {"and": [{"match": {"type": "regex", "regex": "(unclosed",
                                             "parameter": {"source": "payload", "name": "ref"}}},
                                  {"match": {**match, "secret-key": "s"}}]}},
        {"id": "nocommand"},
        {"id": "missing", "execute-command": str(tmp_path / "no-such-script")},
        {"id": "notexec", "execute-command": str(first)},
    ]))
    second.write_text("- id: ok\n  execute-command: /bin/true\n")
    result = validate(tmp_path, "-hooks", str(first), "-hooks", str(second), "-port", str(free_port()))
    assert result.returncode == 1, result.stderr
    f, s = str(first), str(second)
    expected = [
        f'{f}: hook typo: unknown key "trigger_rule" is ignored (did you mean "trigger-rule"?)',
        f'{f}: hook kind: trigger-rule.match: unknown type "valeu" (did you mean "value"?) is never satisfied',
        f'{f}: hook kind: trigger-rule.match: parameter: unknown source "headers" (did you mean "header"?)',
        f"{f}: hook regex: trigger-rule.and[0].match: bad regex: error parsing regexp: "
        "missing closing ): `(unclosed`",
        f'{f}: hook regex: trigger-rule.and[1].match: unknown key "secret-key" is ignored (did you mean "secret"?)',
        f"{f}: hook nocommand: no execute-command: nothing would run",
        f"{f}: hook missing: command not found or not executable: ",
        f"{f}: hook notexec: command not found or not executable: exec: \"{f}\": permission denied",
        f"{s}: hook ok: duplicate id, already loaded from {f}; the server refuses to start",
    ]
    lines = result.stdout.splitlines()
    for text in expected:
        assert any(line.startswith(text) for line in lines), (text, lines)
    assert len(lines) == len(expected)
    assert "problem(s) in 2 file(s)" in result.stderr
    assert "serving hooks" not in result.stdout + result.stderr


def test_validate_a_clean_template_exits_0(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks.json"
    hooks.write_text('[{"id": "{{ getenv "HOOK_NAME" }}", "execute-command": "/bin/true"}]')
    result = subprocess.run(
        [HOOKRUNNER, "-validate", "-template", "-hooks", str(hooks)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "HOOK_NAME": "deploy"},
    )
    assert (result.returncode, result.stdout) == (0, "")
    assert "no problems in 1 file(s) (1 hook(s))" in result.stderr
    hooks.write_text('[{"id": "{{ if }}"}]')
    result = validate(tmp_path, "-template", "-hooks", str(hooks))
    assert result.returncode == 1
    assert result.stdout.startswith(f"{hooks}: template: ")


# -------------------------------------------------------------------------------------- trusted proxies

WHITELISTED = {
    "id": "client",
    "execute-command": "/bin/echo",
    "pass-arguments-to-command": [{"source": "request", "name": "remote-addr"}],
    "include-command-output-in-response": True,
    "trigger-rule": {"match": {"type": "ip-whitelist", "ip-range": "203.0.113.0/24"}},
}


def forwarded(server: Server, chain: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"POST /hooks/client HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {chain}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while piece := sock.recv(4096):
            data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_forwarded_client_is_believed_only_from_a_trusted_peer(tmp_path: Path, servers: list[Server]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    trusting = start(tmp_path / "a", servers, [WHITELISTED], "-trusted-proxies", "127.0.0.1, 10.0.0.0/8")
    # Through the proxy (our loopback peer): the client it names, with port 0 (unknown).
    assert forwarded(trusting, "203.0.113.7") == (200, b"203.0.113.7:0\n")
    # Proxies further along the chain that are trusted too are skipped, from the right.
    assert forwarded(trusting, "203.0.113.9, 10.1.2.3") == (200, b"203.0.113.9:0\n")
    # A client forging the header: the right-most untrusted address is the one the proxy saw.
    status, body = forwarded(trusting, "203.0.113.7, 198.51.100.4")
    assert (status, body) == (200, b"Hook rules were not satisfied.")
    assert "incoming HTTP POST request from 198.51.100.4:0" in trusting.log

    # The same request to a server whose trusted proxies do not include the peer: the header is ignored.
    other = start(tmp_path / "b", servers, [WHITELISTED], "-trusted-proxies", "10.0.0.0/8")
    assert forwarded(other, "203.0.113.7") == (200, b"Hook rules were not satisfied.")
    assert "203.0.113.7" not in other.log
    assert "incoming HTTP POST request from 127.0.0.1:" in other.log
