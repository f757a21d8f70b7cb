"""Every process a run starts, against the real `hookrunner`: a grandchild that leaves the run's process group
and session (setsid, a double fork) and holds its output open is ended at -command-timeout and at shutdown,
and the run owner leaves no process and no zombie of it; after a kill -9 of the run owner or of the whole tree,
a replay never runs beside what is left of the previous attempt (sampled in /proc every 10 ms); and
pass-file-to-command files are named as webhook names them, and with a full TMPDIR left unset as webhook
leaves them."""

from __future__ import annotations

import errno
import http.client
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from integration_harness import HOOKRUNNER_TEST_FLAGS, REFERENCE_BINARY, free_port
from test_limits import MSG_COMMAND_ERROR, alive, python_command
from test_serving import HOOKRUNNER, Server, run_owner_pids, wait_until
from test_worker_classes import WORKER_CLASSES

# The leader prints a line, then starts a child that leaves its session (setsid) and forks the grandchild,
# and exits at once: the grandchild, an orphan in a session of its own, holds stdout and stderr open. The
# leader then starts an ordinary child and sleeps. Every process carries the marker (argv[1]) and its role,
# and waits for the gate file (argv[2], bounded) or is killed.
ESCAPE = """
import os, sys, time
marker, gate = sys.argv[1], sys.argv[2]
def become(role):
    os.execv(sys.executable, [sys.executable, "-c",
        "import os, sys, time\\nd = time.monotonic() + 60\\n"
        "while not os.path.exists(sys.argv[2]) and time.monotonic() < d: time.sleep(0.02)",
        marker, gate, role])
print("started", flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        become("escaped")
    os._exit(0)
os.wait()
if os.fork() == 0:
    become("child")
become("leader")
"""


def escape_hook(hook_id: str, marker: str, gate: Path, **extra: object) -> dict[str, object]:
    args = [{"source": "string", "name": marker}, {"source": "string", "name": str(gate)}]
    return {"id": hook_id, **python_command(ESCAPE, *args), **extra}


def marked(marker: str) -> dict[int, str]:
    """The live (not zombie) processes whose argv carries `marker`, with their role."""
    found: dict[int, str] = {}
    needle = marker.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:  # os.read, not pathlib: a sample of all of /proc must fit in the sampler's 10 ms
            fd = os.open(f"/proc/{name}/cmdline", os.O_RDONLY)
            try:
                data = os.read(fd, 1 << 16)
            finally:
                os.close(fd)
        except OSError:
            continue
        if needle not in data:
            continue
        argv = data.split(b"\0")
        if needle in argv and alive(int(name)):
            # A process has its role once it has exec'd into it; before that (the leader before its
            # exec, and its forks before theirs) its argv ends with the gate's path: it is "starting".
            role = argv[-2].decode()  # cmdline ends with a NUL
            found[int(name)] = role if role in ("leader", "escaped", "child") else "starting"
    return found


def zombie_children(pid: int) -> list[int]:
    zombies = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        zombies += [int(c) for c in children if not alive(int(c)) and Path(f"/proc/{c}").exists()]
    return zombies


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str) -> Server:
    server = Server(tmp_path, hooks, *flags)
    servers.append(server)
    server.ready()
    return server


def timed_post(server: Server, path: str) -> tuple[int, bytes, float]:
    began = time.monotonic()
    status, _, body = server.request("POST", path)
    return status, body, time.monotonic() - began


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_an_escaped_grandchild_holding_the_output_is_ended_at_the_timeout_and_at_shutdown(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    marker, gate = f"escape-{worker_class}-{os.getpid()}", tmp_path / "gate"
    hooks = [
        escape_hook(
            "timed", marker, gate, **{"include-command-output-in-response": True, "command-timeout": "2s",
                                      "max-concurrency": 1, "max-queue": 0}
        ),
        escape_hook("background", marker, gate),
        escape_hook("captured", marker, gate, **{"include-command-output-in-response": True}),
    ]
    flags = ("-worker-class", worker_class, "-shutdown-timeout", "1s")
    server = start(tmp_path, servers, hooks, *flags)
    worker = server.worker_pid()
    overshoots = []
    for _ in range(2):  # the second run gets the hook's one slot: the first gave it back
        status, body, elapsed = timed_post(server, "/hooks/timed")
        assert (status, body) == (500, MSG_COMMAND_ERROR)
        overshoots.append(elapsed - 2.0)
        # Nothing of the run is left at the moment it is answered, the escaped grandchild included.
        assert marked(marker) == {}
    print(f"{worker_class}: answered {', '.join(f'{o:+.3f}' for o in overshoots)} s after the 2 s timeout")
    assert all(0 <= overshoot <= 1.0 for overshoot in overshoots), overshoots
    assert server.log.count("command timed out after 2s; terminating its process group") == 2
    # The orphans the run owner adopted (it starts every command) are reaped: no zombie is left under it,
    # nor under the worker.
    (owner,) = run_owner_pids(server.process.pid)
    assert wait_until(lambda: zombie_children(owner) == [], timeout=3), zombie_children(owner)
    assert zombie_children(worker) == []

    # A SIGTERM with one run in the background and one whose output a request waits for, both with an
    # escaped grandchild: the server is gone within -shutdown-timeout + 2 s, and so is every process.
    assert server.request("POST", "/hooks/background")[0] == 200
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(timed_post, server, "/hooks/captured")
        assert wait_until(lambda: sorted(marked(marker).values()).count("escaped") == 2, timeout=15)
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.stop(timeout=30) == 0
        took = time.monotonic() - began
        print(f"{worker_class}: stopped {took:.3f} s after SIGTERM (-shutdown-timeout 1s)")
        assert took <= 1 + 2, took
        assert waiting.result(timeout=10)[0] == 500
    assert marked(marker) == {}


def test_an_escaped_grandchild_that_closed_its_output_is_ended_at_the_timeout(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The escaped grandchild closes stdout and stderr: it holds nothing up, and is found through the
    # worker (its subreaper), not through the pipe.
    marker, gate = f"closed-{os.getpid()}", tmp_path / "gate"
    code = ESCAPE.replace('if os.fork() == 0:\n        become("escaped")',
                          'if os.fork() == 0:\n        os.close(1); os.close(2)\n        become("escaped")')
    assert code != ESCAPE
    hook = {
        "id": "timed",
        **python_command(code, {"source": "string", "name": marker}, {"source": "string", "name": str(gate)}),
        "command-timeout": "1s",
        "include-command-output-in-response": True,
    }
    server = start(tmp_path, servers, [hook])
    status, body, elapsed = timed_post(server, "/hooks/timed")
    assert (status, body) == (500, MSG_COMMAND_ERROR)
    assert elapsed <= 2.0, elapsed
    assert marked(marker) == {}


# ------------------------------------------------------------------------------- at most one copy of a run


# The sampler's loop, run in a process of its own (so that the test's threads do not hold it back), with
# marked() and alive() as defined here: every 10 ms it counts the marked processes of each role, prints
# each new leader's pid as it appears and, once the stop file exists, what it saw.
SAMPLER_LOOP = """
marker, stop = sys.argv[1].removeprefix("sampling:"), sys.argv[2]  # not the marker itself: not counted
most, leaders, samples, gap, last = {}, [], 0, 0.0, None
while not os.path.exists(stop):
    began = time.monotonic()
    gap = max(gap, began - last) if last is not None else gap
    last = began
    roles = {}
    for pid, role in marked(marker).items():
        roles[role] = roles.get(role, 0) + 1
        if role == "leader" and pid not in leaders:
            leaders.append(pid)
            print(pid, flush=True)
    roles.pop("starting", None)
    for role, count in roles.items():
        most[role] = max(most.get(role, 0), count)
    samples += 1
    time.sleep(max(0.0, began + 0.01 - time.monotonic()))
print(json.dumps({"most": most, "samples": samples, "gap": gap}), flush=True)
"""


class Sampler:
    """Samples /proc every 10 ms in a process of its own: the most processes of each role seen at one
    moment, every leader pid seen, and the longest gap between two samples."""

    def __init__(self, marker: str, folder: Path) -> None:
        self.stop_file = folder / "stop-sampling"
        code = "\n".join(["import json, os, sys, time", "from pathlib import Path",
                          inspect.getsource(alive), inspect.getsource(marked), SAMPLER_LOOP])
        self.process = subprocess.Popen([sys.executable, "-c", code, f"sampling:{marker}", str(self.stop_file)],
                                        stdout=subprocess.PIPE, text=True)
        self.leaders: list[int] = []
        self.result: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.result = json.loads(line)
            else:
                self.leaders.append(int(line))

    def stop(self) -> None:
        self.stop_file.touch()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def replay_hooks(marker: str, gate: Path) -> list[dict[str, object]]:
    return [escape_hook("long", marker, gate, **{"max-concurrency": 1, "max-queue": 1})]


def push_until_accepted(server: Server, path: str) -> None:
    def accepted() -> bool:
        try:
            return server.request("POST", path)[0] == 200
        except OSError:
            return False

    assert wait_until(accepted, timeout=20)


def check_one_copy_through(
    tmp_path: Path, servers: list[Server], crash: str
) -> None:
    marker, gate, state = f"copy-{crash}-{os.getpid()}", tmp_path / "gate", tmp_path / "state"
    flags = ("-state-dir", str(state))
    server = start(tmp_path, servers, replay_hooks(marker, gate), *flags)
    assert server.request("POST", "/hooks/long")[0] == 200
    assert wait_until(lambda: sorted(marked(marker).values()) == ["child", "escaped", "leader"], timeout=15)
    time.sleep(0.2)  # the poll has found the escaped one, and the journal has it
    first = [pid for pid, role in marked(marker).items() if role == "leader"]
    sampler = Sampler(marker, tmp_path)
    began = time.monotonic()
    try:
        assert wait_until(lambda: sampler.leaders == first, timeout=10)  # sampling before the crash
        worker = server.worker_pid()
        (owner,) = run_owner_pids(server.process.pid)  # it holds the runs (issue 32 step 6)
        if crash == "owner":
            os.kill(owner, signal.SIGKILL)  # the master forks the next owner, which replays
            again = server
        else:  # the whole tree: master, owner and worker; the run's processes, in their own session, live on
            os.kill(server.process.pid, signal.SIGKILL)
            os.kill(owner, signal.SIGKILL)
            os.kill(worker, signal.SIGKILL)
            server.process.wait(timeout=10)
            assert marked(marker), "the run's processes should outlive the tree"
            again = start(tmp_path, servers, replay_hooks(marker, gate), *flags)
        # A request that comes while the replay ends the previous attempt waits its turn (max-concurrency 1).
        push_until_accepted(again, "/hooks/long")
        assert again.wait_for_log("replaying run 1 of hook long", timeout=30), again.log
        assert wait_until(lambda: len(sampler.leaders) >= 2, timeout=30), again.log
        assert wait_until(lambda: sorted(marked(marker).values()) == ["child", "escaped", "leader"], timeout=30)
        time.sleep(0.5)
        gate.touch()  # the replay ends, then the queued request runs (too briefly to be sure to be sampled)
        finished = "finished handling long"
        assert wait_until(lambda: again.log.count(finished) == 2 and not marked(marker), timeout=30), again.log
        took = time.monotonic() - began
    finally:
        sampler.stop()
    samples, gap, most = sampler.result["samples"], sampler.result["gap"], sampler.result["most"]
    print(f"{crash}: {samples} samples in {took:.2f} s, the longest gap {gap * 1000:.1f} ms, "
          f"the most at once {most}, leaders {sampler.leaders}")
    assert most == {"leader": 1, "child": 1, "escaped": 1}, most
    assert sampler.leaders[0] == first[0] and len(sampler.leaders) in (2, 3), sampler.leaders
    assert f"run 1: ended what still ran of its previous attempt (pids {first[0]}" in again.log, again.log
    assert again.stop() == 0


def test_a_replay_after_kill_9_of_the_run_owner_never_runs_beside_the_previous_attempt(
    tmp_path: Path, servers: list[Server]
) -> None:
    check_one_copy_through(tmp_path, servers, "owner")


def test_a_replay_after_kill_9_of_the_whole_tree_never_runs_beside_the_previous_attempt(
    tmp_path: Path, servers: list[Server]
) -> None:
    check_one_copy_through(tmp_path, servers, "tree")


# ------------------------------------------------------------------------------ pass-file-to-command names

FILE_HOOK = [{
    "id": "file",
    "execute-command": "/bin/sh",
    "include-command-output-in-response": True,
    "pass-arguments-to-command": [{"source": "string", "name": "-c"},
                                  {"source": "string", "name": 'printf "%s" "$MYF"; ls -l "$MYF"'}],
    "pass-file-to-command": [{"source": "url", "name": "a", "envname": "MYF"}],
}]


def file_names(argv: list[str], tmp_path: Path, count: int) -> list[str]:
    """The file names a server gives its command (the command prints its file's path and `ls -l`)."""
    port = free_port()
    hooks = tmp_path / f"hooks-{port}.json"
    hooks.write_text(json.dumps(FILE_HOOK))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with open(tmp_path / f"log-{port}", "wb") as err:
        process = subprocess.Popen([*argv, "-hooks", str(hooks), "-ip", "127.0.0.1", "-port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        assert wait_until(lambda: _post(port, "/") is not None, timeout=15)
        names = []
        for _ in range(count):
            answer = _post(port, "/hooks/file?a=x")
            assert answer is not None and answer[0] == 200, answer
            name, _, listing = answer[1].decode().partition("-rw")
            assert listing.startswith("-------"), answer  # 0600
            names.append(name)
        return names
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _post(port: int, path: str) -> tuple[int, bytes] | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    except OSError:
        return None
    finally:
        conn.close()


@pytest.mark.reference
def test_pass_file_names_are_named_as_webhook_names_them(tmp_path: Path) -> None:
    theirs = file_names([str(REFERENCE_BINARY)], tmp_path, 20)
    ours = file_names([HOOKRUNNER, *HOOKRUNNER_TEST_FLAGS], tmp_path, 20)
    shape = re.compile(re.escape(str(tmp_path)) + r"/MYF(\d+)")
    for name in theirs + ours:
        match = shape.fullmatch(name)
        assert match, name
        assert int(match[1]) < 2**32 and str(int(match[1])) == match[1]
    assert len(set(ours)) == len(ours)
    assert not list(tmp_path.glob("MYF*"))  # each removed after its run


def _fill(folder: Path) -> None:
    """Writes to `folder` until its filesystem has no room left."""
    with open(folder / "filler", "wb", buffering=0) as handle:
        while True:
            try:
                handle.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return


@pytest.fixture
def full_tmpdir(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 64 KiB with no room left (the tests run as root, as in CI)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "full"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        _fill(folder)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def full_tmpdir_run(argv: list[str], tmpdir: Path, tmp_path: Path) -> tuple[bytes, list[str]]:
    """What the command gets for `MYF` from a server whose TMPDIR is full, and the server's log lines about
    files (the random part of each file name masked)."""
    port = free_port()
    hooks = tmp_path / f"hooks-{port}.json"
    hooks.write_text(json.dumps([{**FILE_HOOK[0], "pass-arguments-to-command": [
        {"source": "string", "name": "-c"}, {"source": "string", "name": 'printf "%s" "${MYF-unset}"'}]}]))
    log_path = tmp_path / f"log-{port}"
    with open(log_path, "wb") as err:
        process = subprocess.Popen([*argv, "-hooks", str(hooks), "-ip", "127.0.0.1", "-port", str(port),
                                    "-verbose"], stdout=subprocess.DEVNULL, stderr=err,
                                   env={**os.environ, "TMPDIR": str(tmpdir)})
    try:
        assert wait_until(lambda: _post(port, "/") is not None, timeout=15)
        answer = _post(port, "/hooks/file?a=secret")
        assert answer is not None and answer[0] == 200, answer
        assert wait_until(lambda: b"finished handling file" in log_path.read_bytes(), timeout=15)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    lines = [re.sub(r"^\[webhook\] \S+ \S+ \[\w+\] ", "", line) for line in log_path.read_text().splitlines()]
    about_files = [re.sub(r"/MYF\d+", "/MYF<n>", line) for line in lines if "file" in line and "MYF" in line]
    return answer[1], about_files


@pytest.mark.reference
def test_a_full_tmpdir_leaves_the_variable_unset_as_webhook_does(full_tmpdir: Path, tmp_path: Path) -> None:
    # webhook 2.8.0 logs Go's error for the failed write and runs the command without the variable. It
    # leaves the empty file behind in TMPDIR; hookrunner removes it (docs/compatibility.md).
    theirs = full_tmpdir_run([str(REFERENCE_BINARY)], full_tmpdir, tmp_path)
    left_by_webhook = sorted(path.name for path in full_tmpdir.glob("MYF*"))
    for name in left_by_webhook:
        (full_tmpdir / name).unlink()
    ours = full_tmpdir_run([HOOKRUNNER, *HOOKRUNNER_TEST_FLAGS], full_tmpdir, tmp_path)
    expected = [
        f"writing env MYF file {full_tmpdir}/MYF<n>",
        f"error writing file {full_tmpdir}/MYF<n> [write {full_tmpdir}/MYF<n>: no space left on device]",
    ]
    assert theirs == (b"unset", expected)
    assert ours == theirs
    assert len(left_by_webhook) == 1
    assert not list(full_tmpdir.glob("MYF*"))  # not a partial or empty file left behind
