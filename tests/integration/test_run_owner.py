"""The run owner's process (issue 32, docs/run-state.md step 5) in the installed `hookrunner`: one per tree,
greeted by every worker, forked again by the master when it dies, gone with the tree. scripts/test runs
these on both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from test_limits import alive, python_command, start
from test_serving import Server, run_owner_pids, wait_until, worker_pids

HOOK = {
    "id": "echo",
    "execute-command": "/bin/echo",
    "include-command-output-in-response": True,
    "pass-arguments-to-command": [{"source": "url", "name": "word"}],
}

OWNER_STARTED = re.compile(r"run owner started \(pid (\d+), epoch (\d+)\)")


def owners_logged(server: Server) -> list[tuple[int, int]]:
    """(pid, epoch) of every `run owner started` line so far."""
    return [(int(pid), int(epoch)) for pid, epoch in OWNER_STARTED.findall(server.log)]


def hello_logged(server: Server, worker: int, epoch: int) -> bool:
    return f"worker {worker} connected to the run owner (epoch {epoch}," in server.log


def settled_workers(server: Server, count: int) -> list[int]:
    assert wait_until(lambda: len(worker_pids(server.process.pid)) == count, timeout=20), server.log
    return sorted(worker_pids(server.process.pid))


def greeted(tmp_path: Path, servers: list[Server], count: int) -> tuple[Server, list[int]]:
    """A server with `count` workers, each of which has greeted the first owner."""
    server = start(tmp_path, servers, [HOOK], "-workers", str(count))
    workers = settled_workers(server, count)
    assert wait_until(lambda: all(hello_logged(server, w, 1) for w in workers), timeout=15), server.log
    return server, workers


def pushes(server: Server, tag: str) -> list[tuple[int, bytes]]:
    return [server.request("POST", f"/hooks/echo?word={tag}{n}")[::2] for n in range(5)]


def expected(tag: str) -> list[tuple[int, bytes]]:
    return [(200, f"{tag}{n}\n".encode()) for n in range(5)]


def test_the_tree_has_one_owner_and_every_worker_says_hello(tmp_path: Path, servers: list[Server]) -> None:
    server, workers = greeted(tmp_path, servers, 3)
    assert owners_logged(server) == [(run_owner_pids(server.process.pid)[0], 1)]
    assert run_owner_pids(server.process.pid) == [owners_logged(server)[0][0]]
    assert pushes(server, "a") == expected("a")
    assert server.stop() == 0


def test_the_owner_killed_is_back_within_a_second_with_every_worker(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, workers = greeted(tmp_path, servers, 3)
    assert pushes(server, "before") == expected("before")
    ((first, _),) = owners_logged(server)
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: run_owner_pids(server.process.pid) not in ([], [first]), timeout=10), server.log
    back = time.monotonic() - killed
    assert back < 1.0, f"the owner was back after {back:.2f}s"
    (second,) = run_owner_pids(server.process.pid)
    assert wait_until(lambda: (second, 2) in owners_logged(server), timeout=10), server.log
    assert f"run owner (pid {first}, epoch 1) ended; starting another" in server.log
    # Every live worker is attached to the new owner and greets it again.
    assert wait_until(lambda: all(hello_logged(server, w, 2) for w in workers), timeout=15), server.log
    assert sorted(worker_pids(server.process.pid)) == workers  # no worker was replaced
    assert pushes(server, "after") == expected("after")
    assert server.stop() == 0
    assert not alive(second)


def test_a_worker_killed_is_let_go_and_its_replacement_attaches(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, workers = greeted(tmp_path, servers, 2)
    (owner,) = run_owner_pids(server.process.pid)
    os.kill(workers[0], signal.SIGKILL)
    assert server.wait_for_log(f"worker {workers[0]} is gone; the run owner let its connection go"), (
        server.log
    )
    assert wait_until(
        lambda: (
            workers[0] not in worker_pids(server.process.pid) and len(worker_pids(server.process.pid)) == 2
        ),
        timeout=20,
    ), server.log
    (replacement,) = set(worker_pids(server.process.pid)) - {workers[1]}
    assert wait_until(lambda: hello_logged(server, replacement, 1), timeout=15), server.log
    assert run_owner_pids(server.process.pid) == [owner]  # the owner kept running, epoch 1
    assert len(owners_logged(server)) == 1
    assert pushes(server, "w") == expected("w")
    assert server.stop() == 0


def test_reload_signals_do_not_reach_the_owner(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [HOOK])
    (owner,) = run_owner_pids(server.process.pid)
    for signum in (signal.SIGHUP, signal.SIGUSR1):
        server.signal(signum)
    assert wait_until(lambda: server.log.count("attempting to reload hooks from") >= 2, timeout=15), (
        server.log
    )
    time.sleep(0.3)
    assert run_owner_pids(server.process.pid) == [owner] and len(owners_logged(server)) == 1
    assert server.stop() == 0


def test_sigterm_leaves_no_process_of_the_tree(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [HOOK], "-workers", "2")
    workers = settled_workers(server, 2)
    tree = [server.process.pid, *run_owner_pids(server.process.pid), *workers]
    assert len(tree) == 4
    assert server.stop() == 0
    assert wait_until(lambda: not any(alive(pid) for pid in tree), timeout=10), [p for p in tree if alive(p)]


def test_the_owner_leaves_when_the_master_is_killed(tmp_path: Path, servers: list[Server]) -> None:
    # kill -9 of the master: nobody would stop the owner, which sees its control channel's end.
    server = start(tmp_path, servers, [HOOK])
    (owner,) = run_owner_pids(server.process.pid)
    server.process.kill()
    server.process.wait(timeout=10)
    assert wait_until(lambda: not alive(owner), timeout=10)


def listening_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            return fields[9]
    raise AssertionError(f"nothing listens on port {port}")


def descriptors(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def test_the_owner_holds_neither_the_hooks_socket_nor_the_state_dir_lock(
    tmp_path: Path, servers: list[Server]
) -> None:
    state = tmp_path / "state"
    server = start(tmp_path, servers, [HOOK], "-state-dir", str(state))
    (owner,) = run_owner_pids(server.process.pid)
    hooks_socket = f"socket:[{listening_inode(server.port)}]"
    master = descriptors(server.process.pid)
    assert hooks_socket in master and any(
        str(state) in held for held in master
    )  # what the owner must not hold
    mine = descriptors(owner)
    assert hooks_socket not in mine
    assert not any(str(state) in held for held in mine), mine
    assert server.stop() == 0


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def test_the_master_adopts_and_reaps_what_a_dead_worker_left(tmp_path: Path, servers: list[Server]) -> None:
    # The master is a child subreaper: a process a dead worker's command left behind comes to it, not to
    # init, and is reaped by it when it ends, while gunicorn still counts its workers right.
    pidfile = tmp_path / "left.pid"
    leaver = {
        "id": "leave",
        **python_command(
            "import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(4); os._exit(0)\n",
            {"source": "string", "name": str(pidfile)},
        ),
    }
    server = start(tmp_path, servers, [leaver])
    worker = server.worker_pid()
    assert server.request("POST", "/hooks/leave")[0] == 200
    assert wait_until(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=10)
    left = int(pidfile.read_text())
    assert wait_until(lambda: parent_of(left) == worker, timeout=5)  # adopted by the worker, its subreaper
    os.kill(worker, signal.SIGKILL)
    assert wait_until(lambda: parent_of(left) == server.process.pid, timeout=3), parent_of(left)
    assert wait_until(lambda: not Path(f"/proc/{left}").exists(), timeout=10)  # ended and reaped, no zombie
    assert wait_until(lambda: len(worker_pids(server.process.pid)) == 1, timeout=15)
    assert worker_pids(server.process.pid) != [worker]
    assert len(run_owner_pids(server.process.pid)) == 1
    server.ready()
    assert server.stop() == 0
