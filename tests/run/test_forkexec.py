"""The start without Popen's Python (run/forkexec.py) against Popen's: the same child, seen from inside it (argv,
executable, environment, descriptors, signals, session, folder), the same errors, and Popen where it must."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hookrunner.run.forkexec import StartedProcess, available, fork_exec_process
from hookrunner.run.processes import _children as children_of
from hookrunner.run.spawn import Exit, Output, Process, Waits, popen_process


def test_this_python_is_one_the_start_was_checked_against() -> None:
    # Not a skip: on the Python the package is built and tested with, the start must be in use.
    assert available(), sys.version_info


#: What a child reports of itself: everything Popen's child and fork_exec's must share.
PROBE = """
import json, os
def status(name):
    for line in open('/proc/self/status'):
        if line.startswith(name + ':'):
            return line.split()[1]
fds = {}
for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):
    try:
        target = os.readlink('/proc/self/fd/%d' % fd)
        flags = [l.split()[1] for l in open('/proc/self/fdinfo/%d' % fd) if l.startswith('flags:')][0]
    except OSError:
        continue  # the listing's own descriptor, closed by now
    fds[fd] = [target.split(':')[0], flags]
print(json.dumps({
    'argv': open('/proc/self/cmdline', 'rb').read().decode().split('\\0')[:-1],
    'exe': os.readlink('/proc/self/exe'),
    'env': open('/proc/self/environ', 'rb').read().decode(),
    'fds': fds,
    'same_pipe': os.fstat(1).st_ino == os.fstat(2).st_ino,
    'group_leader': os.getpgid(0) == os.getpid(),
    'session_leader': os.getsid(0) == os.getpid(),
    'cwd': os.getcwd(),
    'signals': {name: status(name) for name in ('SigBlk', 'SigIgn')},
}))
"""


def _popen(
    path: str, argv: list[str], env: dict[str, str], cwd: str | None = None, session: bool = True
) -> Process:
    """The child Popen gives, as spawn.start_process started every run before forkexec.py."""
    return popen_process(path, argv, env, cwd, session)


def _finish(process: Process) -> tuple[bytes, int]:
    assert process.stdout is not None
    output = Output(process.stdout.fileno(), Waits())
    exit_ = Exit(process, Waits())
    assert output.read(time.monotonic() + 20) and exit_.wait(time.monotonic() + 20)
    exit_.close()
    process.stdout.close()
    return output.data, exit_.code


def _probe(start: str, cwd: str | None = None, session: bool = True) -> dict[str, object]:
    env = {"ONLY": "one", "SPACED": "a b", "EMPTY": "", "LANG": "C"}
    argv = ["probe-x", "-c", PROBE, "an arg", ""]
    if start == "fork_exec":
        process: Process | None = fork_exec_process(sys.executable, argv, env, cwd, session)
        assert isinstance(process, StartedProcess)
    else:
        process = _popen(sys.executable, argv, env, cwd, session)
    data, code = _finish(process)
    assert code == 0, data
    seen: dict[str, object] = json.loads(data)
    return seen


@pytest.mark.parametrize("session", [True, False], ids=["own-session", "own-group"])
@pytest.mark.parametrize("in_folder", [False, True], ids=["own-folder", "command-working-directory"])
def test_the_child_is_the_one_popen_gives_argv_env_descriptors_signals_and_session(
    tmp_path: Path, in_folder: bool, session: bool
) -> None:
    # A thread with a signal blocked and one more ignored: the child inherits both, as Popen's does.
    seen: dict[str, dict[str, object]] = {}

    def both() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        for start in ("popen", "fork_exec"):
            seen[start] = _probe(start, str(tmp_path) if in_folder else None, session)

    previous = signal.signal(signal.SIGWINCH, signal.SIG_IGN)
    try:
        thread = threading.Thread(target=both)
        thread.start()
        thread.join()
    finally:
        signal.signal(signal.SIGWINCH, previous)
    popen, spawned = seen["popen"], seen["fork_exec"]
    assert spawned == popen
    assert spawned["argv"] == ["probe-x", "-c", PROBE, "an arg", ""]
    assert spawned["exe"] == os.path.realpath(sys.executable)
    assert spawned["env"] == "ONLY=one\0SPACED=a b\0EMPTY=\0LANG=C\0"
    fds = spawned["fds"]
    assert isinstance(fds, dict) and sorted(fds) == ["0", "1", "2"], fds  # and no descriptor of ours
    assert fds["0"][0] == "/dev/null" and int(fds["0"][1], 8) & os.O_ACCMODE == os.O_RDWR  # Popen's DEVNULL
    assert fds["1"][0] == fds["2"][0] == "pipe" and spawned["same_pipe"] and spawned["group_leader"]
    assert spawned["session_leader"] is session
    assert spawned["cwd"] == (str(tmp_path) if in_folder else os.getcwd())
    sigs = spawned["signals"]
    assert isinstance(sigs, dict)
    assert int(sigs["SigBlk"], 16) == 1 << (signal.SIGUSR2 - 1)  # the starting thread's mask, as Popen


def _signals(start: str) -> str:
    """A C program's signal lines (a Python child would ignore SIGPIPE and SIGXFSZ itself)."""
    argv = ["grep", "^Sig", "/proc/self/status"]
    process = (
        fork_exec_process("/bin/grep", argv, {}, None)
        if start == "fork_exec"
        else _popen("/bin/grep", argv, {})
    )
    assert process is not None
    data, code = _finish(process)
    assert code == 0, data
    return data.decode()


def test_signals_are_as_popens_restore_signals_leaves_them() -> None:
    previous = signal.signal(signal.SIGWINCH, signal.SIG_IGN)
    try:
        spawned, popen = _signals("fork_exec"), _signals("popen")
    finally:
        signal.signal(signal.SIGWINCH, previous)
    assert spawned == popen
    ignored = int(spawned.split("SigIgn:")[1].split()[0], 16)
    assert ignored == 1 << (signal.SIGWINCH - 1), hex(ignored)  # ignored stays ignored, as through exec
    # SIGPIPE and SIGXFSZ, which Python ignores, are back to their default, and nothing else is ignored:
    # glibc's posix_spawn (2.36) leaves its internal signals 32 and 33 ignored in its child, which is why
    # forkexec.py does not use it.


def test_an_inheritable_descriptor_of_ours_never_reaches_the_child(tmp_path: Path) -> None:
    leaky = os.open(tmp_path / "leaky", os.O_WRONLY | os.O_CREAT)
    os.set_inheritable(leaky, True)
    try:
        seen = _probe("fork_exec")
        fds = seen["fds"]
        assert isinstance(fds, dict) and sorted(fds) == ["0", "1", "2"], fds
    finally:
        os.close(leaky)


def _write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("make", "cwd", "expected"),
    [
        (lambda d: d / "missing", None, errno.ENOENT),
        (lambda d: _write(d / "plain", "#!/bin/sh\necho\n", 0o644), None, errno.EACCES),
        (lambda d: d, None, errno.EACCES),
        (lambda d: _write(d / "no-shebang", "echo hi\n", 0o755), None, errno.ENOEXEC),
        (lambda d: _write(d / "bad-interpreter", "#!/nonexistent/sh\n", 0o755), None, errno.ENOENT),
        (lambda d: Path("/bin/true"), "/nonexistent-folder", errno.ENOENT),
    ],
    ids=["missing", "not-executable", "a-folder", "no-shebang", "missing-interpreter", "missing-folder"],
)
def test_an_exec_that_fails_raises_what_popen_raises_and_leaves_no_child(
    tmp_path: Path, make: Callable[[Path], Path], cwd: str | None, expected: int
) -> None:
    path = str(make(tmp_path))
    before = sorted(os.listdir("/proc/self/fd"))
    children = _children()
    with pytest.raises(OSError) as popen_error:
        _popen(path, [path], {}, cwd)
    with pytest.raises(OSError) as spawn_error:
        fork_exec_process(path, [path], {}, cwd)
    got, want = spawn_error.value, popen_error.value
    assert (type(got), got.errno, got.strerror, got.filename) == (
        type(want),
        want.errno,
        want.strerror,
        want.filename,
    )
    assert got.errno == expected
    assert sorted(os.listdir("/proc/self/fd")) == before  # every pipe closed
    assert _children() <= children  # the failed child was collected: no zombie is left


def _children() -> set[int]:
    """This process's children, zombies included (this test's own and any an earlier test left running), as
    the process tracker finds them (every thread's /proc children file)."""
    found = children_of(os.getpid())
    assert found is not None, "no /proc/<pid>/task/<tid>/children on this kernel"
    return set(found)


def test_a_bad_variable_name_is_popens_value_error_and_a_bare_name_goes_to_popen() -> None:
    with pytest.raises(ValueError, match="illegal environment variable name"):
        fork_exec_process("/bin/true", ["true"], {"A=B": "x"}, None)
    assert fork_exec_process("true", ["true"], {}, None) is None  # Popen would search PATH for it
    process = fork_exec_process("/bin/true", ["true"], {"": "empty name"}, None)  # as Popen, it starts
    assert process is not None and _finish(process) == (b"", 0)


def test_exit_codes_and_signals_are_popens() -> None:
    process = fork_exec_process("/bin/sh", ["sh", "-c", "echo out; echo err >&2; exit 3"], {}, None)
    assert process is not None
    assert _finish(process) == (b"out\nerr\n", 3)
    sleeper = fork_exec_process("/bin/sleep", ["sleep", "30"], {}, None)
    assert sleeper is not None and sleeper.poll() is None
    os.killpg(sleeper.pid, signal.SIGKILL)  # its own process group: the timeout's kill
    assert _finish(sleeper)[1] == -signal.SIGKILL
    assert sleeper.poll() == -signal.SIGKILL  # collected once, kept


#: Run in a fresh interpreter: a descriptor limit that leaves room for /dev/null and one pipe, not two.
NO_ROOM = """
import json, os, resource
from hookrunner.run.forkexec import fork_exec_process
from hookrunner.run.spawn import popen_process
def free_below(limit):
    return sum(1 for fd in range(limit) if not os.path.exists(f"/proc/self/fd/{fd}"))
limit = 3
while free_below(limit) < 3:
    limit += 1
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
seen = {}
for name, start in (("fork_exec", fork_exec_process), ("popen", popen_process)):
    before = sorted(os.listdir("/proc/self/fd"))
    try:
        start("/bin/true", ["true"], {}, None)
    except OSError as exc:
        seen[name] = [type(exc).__name__, exc.errno, sorted(os.listdir("/proc/self/fd")) == before]
print(json.dumps(seen))
"""


def test_out_of_descriptors_raises_what_popen_raises_and_leaks_none() -> None:
    done = subprocess.run([sys.executable, "-c", NO_ROOM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["fork_exec"] == seen["popen"] == ["OSError", errno.EMFILE, True], seen
