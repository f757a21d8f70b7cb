"""The admin listener of the real `hookrunner` under hostile clients (issue 34, item 5): a thousand slowloris
connections cost its process no threads and no memory that stays, and GETs are answered meanwhile;
requests it refuses are counted in the log, not written one line each. scripts/hostile runs the long
profile (2,000 connections) beside webhook's hooks port."""

from __future__ import annotations

import time
from pathlib import Path

from hostile_load import Flood, listener_pid, long_request_lines, raise_fd_limit, rss_of, threads
from test_run_history import start
from test_serving import Server, python_hook, wait_until

#: The admin process's threads: the main one, the feed's, the parent watch and the pool's; generous.
MOST_THREADS = 64


def admin_pid(server: Server, port: int) -> int:
    master = server.process.pid
    found: list[int] = []

    def listening() -> bool:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        pid = listener_pid([int(c) for c in children], port)
        found[:] = [pid] if pid is not None else []
        return bool(found)

    assert wait_until(listening, timeout=10), "no child of the master listens on the admin port"
    return found[0]


def test_slowloris_clients_take_no_admin_thread_and_leave_no_memory(
    tmp_path: Path, servers: list[Server]
) -> None:
    raise_fd_limit()
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")])
    pid = admin_pid(server, admin.port)
    assert admin.get("/api/v1/hooks")[0] == 200
    rss_before = rss_of(pid)
    flood = Flood(admin.port, "slowloris", 1000, pace=0.5).open()
    try:
        assert flood.opened == 1000
        most = threads(pid)
        for _ in range(10):
            assert admin.get("/api/v1/hooks")[0] == 200  # within the client's 10 s, every time
            assert admin.get("/")[0] == 200
            most = max(most, threads(pid))
            time.sleep(0.1)
        assert most <= MOST_THREADS, f"{most} threads in the admin listener's process"
    finally:
        flood.close()
    assert wait_until(lambda: rss_of(pid) <= rss_before + 10, timeout=15), (rss_before, rss_of(pid))
    assert admin.get("/api/v1/hooks")[0] == 200


def test_refused_admin_requests_are_counted_not_logged_one_line_each(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start(tmp_path, servers, [python_hook("ok", "pass")])
    assert long_request_lines(admin.port, 100) == 100
    assert admin.get("/api/v1/hooks")[0] == 200
    lines = [line for line in server.log.splitlines() if "admin listener" in line]
    assert len(lines) == 1, lines  # the first; the others are counted in a line a minute at most
    assert lines[0].endswith("admin listener: refused a request (code 414, a head over 65536 bytes)")
