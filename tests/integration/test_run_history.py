"""The run history against the real `hookrunner`: every kind and outcome of run in /api/v1/ (without and
with -state-dir, across a restart, with two workers), the token, the loopback guard, bounded and escaped
output, and no new port without -admin-addr."""

from __future__ import annotations

import functools
import http.client
import json
import os
import select
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from integration_harness import free_port
from test_serving import Server, _read_until_closed, python_hook, run_owner_pids, wait_until

GATE_WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.01)"


def gated_hook(hook_id: str, gate: Path, **extra: object) -> dict[str, object]:
    """A hook whose runs last until the `gate` file exists."""
    hook = python_hook(hook_id, GATE_WAIT, **extra)
    arguments = hook["pass-arguments-to-command"]
    assert isinstance(arguments, list)
    hook["pass-arguments-to-command"] = [*arguments, {"source": "string", "name": str(gate)}]
    return hook


def all_hooks(gate: Path) -> list[dict[str, object]]:
    return [
        python_hook("ok", "print('all good')"),
        python_hook("fail", "import sys; print('broken'); sys.exit(3)"),
        python_hook("killed", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        python_hook("slow", "import time; time.sleep(30)", **{"command-timeout": "500ms"}),
        python_hook("hostile", "import sys; sys.stdout.buffer.write("
                    "b'<script>alert(1)</script>\\x1b[31mred\\x1b[0m \\xff\\xfe end\\n'"
                    "b\"<script>document.title='pwned'</script><img src=x onerror=\\\"document.title='pwned'\\\">\\n\")"),
        python_hook("big", "import sys; sys.stdout.buffer.write(b'<i>' * 3500000 + b'LAST')"),
        gated_hook("queue", gate, **{"max-concurrency": 1, "max-queue": 1}),
        gated_hook("merge", gate, **{"max-concurrency": 1, "coalesce": True}),
    ]


class Admin:
    """The admin listener of one server, spoken to over HTTP."""

    def __init__(self, port: int, token: str = "") -> None:
        self.port = port
        self.token = token

    def get(self, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {}
        if (token if token is not None else self.token):
            headers["Authorization"] = f"Bearer {token if token is not None else self.token}"
        try:
            conn.request("GET", path, headers=headers)
            answer = conn.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            conn.close()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def outcomes(self) -> dict[str, tuple[str, str]]:
        """The newest record of each run id: its kind and outcome."""
        newest: dict[str, tuple[str, str]] = {}
        for r in self.json("/api/v1/runs?limit=500")["runs"]:
            newest.setdefault(r["id"], (r["kind"], r["outcome"]))
        return newest


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str) -> tuple[Server, Admin]:
    # A port found free can be taken before hookrunner binds it (CI once lost the admin port to another
    # process's ephemeral port: "Address already in use"): then two more tries, on new ports.
    for attempt in range(3):
        admin_port = free_port()
        server = Server(tmp_path, hooks, "-x-request-id", "-admin-addr", f"127.0.0.1:{admin_port}", *flags)
        servers.append(server)
        try:
            server.ready()
        except AssertionError:
            if attempt == 2 or server.process.poll() is None or "Address already in use" not in server.log:
                raise
            continue
        break
    assert server.wait_for_log(f"serving the run history on http://127.0.0.1:{admin_port}/"), server.log
    return server, Admin(admin_port)


def trigger(server: Server, hook: str, rid: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", f"/hooks/{hook}", headers={"X-Request-Id": rid})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def settle(admin: Admin, expected: dict[str, tuple[str, str]], timeout: float = 30) -> None:
    got: dict[str, tuple[str, str]] = {}

    def matches() -> bool:
        nonlocal got
        got = admin.outcomes()
        return all(got.get(rid) == want for rid, want in expected.items())

    assert wait_until(matches, timeout=timeout), {rid: got.get(rid) for rid in expected}


def run_every_kind(tmp_path: Path, server: Server, admin: Admin) -> None:
    gate = tmp_path / "gate"
    for hook, rid in (("ok", "ok-1"), ("fail", "fail-1"), ("killed", "killed-1"), ("slow", "slow-1"),
                      ("hostile", "hostile-1"), ("big", "big-1")):
        assert trigger(server, hook, rid) == 200
    assert [trigger(server, "queue", f"queue-{n}") for n in (1, 2, 3)] == [200, 200, 429]
    assert [trigger(server, "merge", f"merge-{n}") for n in (1, 2, 3)] == [200, 200, 200]
    settle(admin, {"queue-1": ("immediate", "running"), "queue-2": ("queued", "pending"),
                   "queue-3": ("refused", "refused"), "merge-3": ("coalesced", "pending")})
    gate.touch()
    settle(admin, {
        "ok-1": ("immediate", "ok"), "fail-1": ("immediate", "failed"), "killed-1": ("immediate", "failed"),
        "slow-1": ("immediate", "timed_out"), "hostile-1": ("immediate", "ok"), "big-1": ("immediate", "ok"),
        "queue-1": ("immediate", "ok"), "queue-2": ("queued", "ok"), "queue-3": ("refused", "refused"),
        "merge-1": ("immediate", "ok"), "merge-2": ("queued", "ok"), "merge-3": ("coalesced", "ok"),
    })
    fail = admin.json("/api/v1/runs/fail-1")
    assert (fail["exit_code"], fail["detail"], fail["output"]) == (3, "exit status 3", "broken\n")
    assert fail["argv"][1:] == ["-c", "import sys; print('broken'); sys.exit(3)"]
    assert admin.json("/api/v1/runs/killed-1")["signal"] == "killed"
    assert admin.json("/api/v1/runs/slow-1")["detail"].startswith("command timed out after 0.5s")
    assert "full queue" in admin.json("/api/v1/runs/queue-3")["detail"]
    hooks = {h["id"]: h for h in admin.json("/api/v1/hooks")["hooks"]}
    assert set(hooks) == {"ok", "fail", "killed", "slow", "hostile", "big", "queue", "merge"}
    assert hooks["fail"]["last_run"]["outcome"] == "failed" and hooks["fail"]["file"] == str(server.hooks_path)


def test_every_kind_and_outcome_in_memory(tmp_path: Path, servers: list[Server]) -> None:
    server, admin = start(tmp_path, servers, all_hooks(tmp_path / "gate"))
    run_every_kind(tmp_path, server, admin)
    failed = admin.json("/api/v1/runs?outcome=failed")["runs"]
    assert {r["id"] for r in failed} == {"fail-1", "killed-1"}
    assert server.stop() == 0


def test_output_is_bounded_and_escaped(tmp_path: Path, servers: list[Server]) -> None:
    server, admin = start(tmp_path, servers, all_hooks(tmp_path / "gate"), "-history-output", "16KiB")
    trigger(server, "big", "big-1")
    trigger(server, "hostile", "hostile-1")
    settle(admin, {"big-1": ("immediate", "ok"), "hostile-1": ("immediate", "ok")})
    big = admin.json("/api/v1/runs/big-1")
    assert (big["output_size"], big["output_truncated"], len(big["output"])) == (10500004, True, 16 << 10)
    assert big["output"].endswith("<i>LAST")
    status, headers, page = admin.get("/runs/big-1")
    assert status == 200 and len(page) < 200 << 10 and b"<i>" not in page and b"&lt;i&gt;LAST" in page
    assert headers["content-security-policy"].startswith("default-src 'self'")
    assert headers["server"] == "hookrunner-admin"  # no library or Python versions told
    status, _, page = admin.get("/runs/hostile-1")
    assert b"<script>alert" not in page and b"\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;red \ufffd\ufffd end".encode() in page
    assert server.stop() == 0


def test_across_a_restart_with_state_dir(tmp_path: Path, servers: list[Server]) -> None:
    gate, state = tmp_path / "gate", tmp_path / "state"
    flags = ("-state-dir", str(state), "-shutdown-timeout", "1s")
    server, admin = start(tmp_path, servers, all_hooks(gate), *flags)
    run_every_kind(tmp_path, server, admin)
    gate.unlink()
    assert trigger(server, "queue", "cut-1") == 200  # running when the stop's grace runs out
    settle(admin, {"cut-1": ("immediate", "running")})
    assert server.stop() == 0
    # The stop gave up on it: its record says so, in the journal's file, before the next start.
    db = sqlite3.connect(state / "journal.sqlite3")
    try:
        assert db.execute("SELECT outcome FROM history WHERE id = 'cut-1'").fetchall() == [("cancelled",)]
    finally:
        db.close()
    gate.touch()  # the replay of cut-1 finishes
    again, admin = start(tmp_path, servers, all_hooks(gate), *flags)
    settle(admin, {"cut-1": ("replayed", "ok"), "ok-1": ("immediate", "ok"), "queue-3": ("refused", "refused")})
    cut = [r for r in admin.json("/api/v1/runs?hook=queue")["runs"] if r["id"] == "cut-1"]
    assert [(r["kind"], r["outcome"]) for r in cut] == [("replayed", "ok"), ("immediate", "replayed")]
    assert admin.json("/api/v1/runs/fail-1")["output"] == "broken\n"
    assert again.stop() == 0


def test_retention_follows_state_keep(tmp_path: Path, servers: list[Server]) -> None:
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-state-keep", "3")
    for n in range(110):  # with -state-keep 3 the store prunes at every event
        trigger(server, "ok", f"r{n}")
    assert wait_until(lambda: "r109" in admin.outcomes() and len(admin.outcomes()) <= 30, timeout=30)
    assert server.stop() == 0


def test_two_workers_one_history(tmp_path: Path, servers: list[Server]) -> None:
    # Every run of every worker is the run owner's (issue 32 step 6): its records come from the owner's one
    # feed, each run once, and the command's parent is the recorded process, the owner.
    server, admin = start(tmp_path, servers, [python_hook("ok", "import os; print(os.getppid())")], "-workers", "2")
    (owner,) = run_owner_pids(server.process.pid)
    for n in range(20):
        assert trigger(server, "ok", f"w{n}") == 200
    settle(admin, {f"w{n}": ("immediate", "ok") for n in range(20)})
    for n in range(20):
        record = admin.json(f"/api/v1/runs/w{n}")
        assert record["pid"] == owner and record["output"] == f"{owner}\n", record
    listed = [run["id"] for run in admin.json("/api/v1/runs?hook=ok")["runs"]]
    assert sorted(listed) == sorted(f"w{n}" for n in range(20))  # each run once
    assert server.stop() == 0


def test_the_token_is_needed(tmp_path: Path, servers: list[Server]) -> None:
    token = tmp_path / "token"
    token.write_text("tok-" + "x" * 40 + "\n")
    token.chmod(0o600)
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-admin-token-file", str(token))
    for path in ("/", "/api/v1/runs", "/api/v1/hooks", "/static/admin.css"):
        assert admin.get(path)[0] == 401
        assert admin.get(path, token="tok-wrong")[0] == 401
        assert admin.get(path, token="tok-" + "x" * 40)[0] == 200
    assert server.stop() == 0


def test_loopback_guard(tmp_path: Path, servers: list[Server]) -> None:
    port = free_port()
    refused = Server(tmp_path, [python_hook("ok", "pass")], "-admin-addr", f"0.0.0.0:{port}")
    servers.append(refused)
    assert refused.process.wait(timeout=20) == 1
    assert "error setting up the admin listener: -admin-addr 0.0.0.0:" in refused.log
    assert "is not a loopback address" in refused.log
    allowed = Server(tmp_path, [python_hook("ok", "pass")], "-admin-addr", f"0.0.0.0:{port}", "-admin-insecure")
    servers.append(allowed)
    allowed.ready()
    assert wait_until(lambda: Admin(port).get("/api/v1/hooks")[0] == 200)
    assert allowed.stop() == 0


def listening_ports(pid: int) -> set[int]:
    """TCP ports that `pid` and its descendants listen on (from /proc)."""
    pids, todo = set(), [pid]
    while todo:
        current = todo.pop()
        pids.add(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    inodes = set()
    for current in pids:
        for fd in Path(f"/proc/{current}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("with_admin", [False, True])
def test_a_new_port_only_with_admin_addr(tmp_path: Path, servers: list[Server], with_admin: bool) -> None:
    admin_port = free_port()
    flags = ("-admin-addr", f"127.0.0.1:{admin_port}") if with_admin else ()
    server = Server(tmp_path, [python_hook("ok", "pass")], *flags)
    servers.append(server)
    server.ready()
    assert trigger(server, "ok", "x") == 200
    expected = {server.port, admin_port} if with_admin else {server.port}
    assert wait_until(lambda: listening_ports(server.process.pid) == expected), listening_ports(server.process.pid)
    assert ("run history" in server.log) is with_admin
    assert server.stop() == 0
    if with_admin:  # the admin listener's process went with the server
        assert wait_until(lambda: not any(
            f"127.0.0.1:{admin_port}" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
            for p in os.listdir("/proc") if p.isdigit() and Path(f"/proc/{p}/cmdline").exists()
        ))


@pytest.mark.parametrize("journal", [False, True])
def test_a_killed_workers_runs(tmp_path: Path, servers: list[Server], journal: bool) -> None:
    """kill -9 of the process that runs the run (the run owner, issue 32 step 6) mid-run: its record ends
    cancelled; with -state-dir the owner that replaces it replays the run, and the record says replayed."""
    gate, state = tmp_path / "gate", tmp_path / "state"
    flags = ("-state-dir", str(state)) if journal else ()
    server, admin = start(tmp_path, servers, [gated_hook("hold", gate)], *flags)
    assert trigger(server, "hold", "held-1") == 200
    settle(admin, {"held-1": ("immediate", "running")})
    worker = admin.json("/api/v1/runs/held-1")["pid"]
    os.kill(worker, signal.SIGKILL)
    if not journal:
        settle(admin, {"held-1": ("immediate", "cancelled")})
        assert admin.json("/api/v1/runs/held-1")["detail"] == f"the process that ran it ({worker}, the run owner) ended before it did"
    else:
        gate.touch()
        settle(admin, {"held-1": ("replayed", "ok")})
        runs = [(r["kind"], r["outcome"]) for r in admin.json("/api/v1/runs?hook=hold")["runs"]]
        assert runs == [("replayed", "ok"), ("immediate", "replayed")]
    gate.touch()
    assert server.stop() == 0


def test_a_killed_master_leaves_no_admin_listener_and_no_feed_folder(
    tmp_path: Path, servers: list[Server]
) -> None:
    """kill -9 of the master: nobody stops the admin listener, so it sees it is orphaned, closes its port
    and removes the folder of the workers' feed socket."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    admin_port = free_port()
    server = Server(tmp_path, [python_hook("ok", "pass")], "-admin-addr", f"127.0.0.1:{admin_port}",
                    popen=functools.partial(subprocess.Popen, env={**os.environ, "TMPDIR": str(private_tmp)}))
    servers.append(server)
    server.ready()
    assert server.wait_for_log("serving the run history on"), server.log
    feeds = list(private_tmp.glob("hookrunner-admin-*"))
    assert len(feeds) == 1 and (feeds[0] / "feed").is_socket(), feeds
    assert Admin(admin_port).get("/api/v1/hooks")[0] == 200
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(10)

    def admin_gone() -> bool:
        try:
            socket.create_connection(("127.0.0.1", admin_port), timeout=1).close()
        except OSError:
            return True
        return False

    assert wait_until(lambda: admin_gone() and not feeds[0].exists(), timeout=10), list(private_tmp.iterdir())


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closed `sock` (end of file, or a reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        _read_until_closed(sock)
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_an_idle_or_stalled_admin_client_is_cut_off_after_read_timeout(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-read-timeout", "1s", "-verbose")
    idle = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    stalled = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    stalled.sendall(b"GET /api/v1/hooks HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
    try:
        # Meanwhile everyone else is served.
        assert admin.get("/api/v1/hooks")[0] == 200
        for sock in (idle, stalled):
            assert _closed_within(sock, 10.0), "the admin listener kept a silent client past -read-timeout"
        assert admin.get("/api/v1/hooks")[0] == 200
    finally:
        idle.close()
        stalled.close()
    assert "timed out" not in server.log, server.log


def test_an_admin_client_that_trickles_its_request_is_cut_off_after_read_timeout(
    tmp_path: Path, servers: list[Server]
) -> None:
    """-read-timeout bounds the whole request, not each read: a byte every 0.3 s never lets a 1 s
    per-read limit expire, and would hold its connection and thread for as long as the client liked."""
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-read-timeout", "1s")
    trickle = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    head = b"GET /api/v1/hooks HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 40
    began = time.monotonic()
    cut_after = None
    try:
        for byte in head:
            closed, _, _ = select.select([trickle], [], [], 0.3)  # the server's end of file: cut off
            if not closed:
                try:
                    trickle.sendall(bytes([byte]))
                    continue
                except OSError:
                    pass
            cut_after = time.monotonic() - began
            break
        assert cut_after is not None and cut_after < 4, "a trickling client kept its admin connection"
        assert admin.get("/api/v1/hooks")[0] == 200  # and the listener serves the others as before
    finally:
        trickle.close()
    assert "timed out" not in server.log, server.log


def test_an_admin_request_that_arrives_in_pieces_within_read_timeout_is_served(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")], "-read-timeout", "2s")
    client = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    try:
        for piece in (b"GET /api/v1/hooks HT", b"TP/1.1\r\nHost: 127.0", b".0.1\r\n\r\n"):
            client.sendall(piece)
            time.sleep(0.4)  # 1.2 s in all: each pause and the whole within the limit
        answer = _read_until_closed(client)
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b'"ok"' in answer, answer[:300]
