"""Starting a command's process and waiting on it (run/spawn.py): the process's shape, the output read to its
end or to a deadline, the exit seen through a pidfd within a deadline."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hookrunner.run.spawn import Exit, Output, Waits, own_session, start_process


def test_a_started_process_gets_argv_env_cwd_no_stdin_one_pipe_and_its_own_session(tmp_path: Path) -> None:
    script = (
        "import os, sys; print(sys.argv[1:], os.environ['ONLY'], os.getcwd(), os.readlink('/proc/self/fd/0'))"
    )
    script += (
        "; print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid()); print('err', file=sys.stderr)"
    )
    process = start_process(sys.executable, ["python-x", "-c", script, "a b"], {"ONLY": "1"}, str(tmp_path))
    assert process.stdout is not None
    output = Output(process.stdout.fileno(), Waits())
    assert output.read(time.monotonic() + 10)
    exit_ = Exit(process, Waits())
    assert exit_.wait(time.monotonic() + 10)
    exit_.close()
    process.stdout.close()
    assert process.returncode == 0
    assert sorted(output.data.decode().splitlines()) == sorted(
        [f"['a b'] 1 {tmp_path} /dev/null", f"True {own_session()}", "err"]
    )


def test_a_missing_executable_raises_its_errno() -> None:
    with pytest.raises(FileNotFoundError):
        start_process("/nonexistent/cmd", ["/nonexistent/cmd"], {}, None)


def test_output_and_exit_stop_at_their_deadline_and_exit_is_seen_once_it_comes() -> None:
    process = start_process("/bin/sh", ["sh", "-c", "echo one; sleep 0.4; echo two"], {}, None)
    assert process.stdout is not None
    output = Output(process.stdout.fileno(), Waits())
    exit_ = Exit(process, Waits())
    started = time.monotonic()
    assert not output.read(started + 0.15)  # the pipe is still open: the deadline ends the read
    assert output.data == b"one\n" and not output.eof
    assert not exit_.wait(time.monotonic() + 0.05)
    assert output.read(time.monotonic() + 5) and output.data == b"one\ntwo\n"
    assert exit_.wait(time.monotonic() + 5)
    assert process.returncode == 0
    assert time.monotonic() - started < 3
    exit_.close()
    process.stdout.close()


def test_exit_wait_stops_when_told_to() -> None:
    process = start_process("/bin/sleep", ["sleep", "5"], {}, None)
    exit_ = Exit(process, Waits())
    started = time.monotonic()
    assert not exit_.wait(None, stop=lambda: time.monotonic() - started > 0.1)
    assert time.monotonic() - started < 1
    os.kill(process.pid, signal.SIGKILL)
    assert exit_.wait(time.monotonic() + 5)
    assert process.returncode == -9
    exit_.close()
    assert process.stdout is not None
    process.stdout.close()


def test_a_listener_is_told_each_chunk_as_it_is_read_before_the_process_ends() -> None:
    code = "import sys, time; sys.stdout.write('one\\n'); sys.stdout.flush(); time.sleep(0.5); print('two')"
    process = start_process(sys.executable, [sys.executable, "-c", code], {}, None)
    assert process.stdout is not None
    heard: list[tuple[bytes, bool]] = []
    output = Output(
        process.stdout.fileno(), Waits(), lambda chunk: heard.append((chunk, process.poll() is None))
    )
    assert output.read(time.monotonic() + 10)
    assert Exit(process, Waits()).wait(time.monotonic() + 10)
    process.stdout.close()
    assert heard[0] == (b"one\n", True)  # told while the process still ran
    assert b"".join(chunk for chunk, _ in heard) == output.data == b"one\ntwo\n"


#: Starts a command as a run does and prints whether the server had a terminal and whether the command heads
#: a process group, and a session, of its own.
_SESSION_PROBE = """
import os, sys, time
from hookrunner.run.spawn import Exit, Output, Waits, own_session, start_process
code = "import os; print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())"
process = start_process(sys.executable, [sys.executable, "-c", code], {}, None)
output = Output(process.stdout.fileno(), Waits())
output.read(time.monotonic() + 10)
Exit(process, Waits()).wait(time.monotonic() + 10)
print("terminal", own_session(), "command", output.data.decode().strip(), flush=True)
"""


def test_a_command_gets_a_session_of_its_own_only_while_the_server_has_a_terminal() -> None:
    # No controlling terminal (a session of its own has none): a process group of its own, in our session.
    plain = subprocess.run(
        [sys.executable, "-c", _SESSION_PROBE],
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=30,
    )
    assert plain.stdout.strip() == "terminal False command True False", plain.stderr
    # A controlling terminal (a pty's child heads a session whose terminal it is): a session of its own too.
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(sys.executable, [sys.executable, "-c", _SESSION_PROBE])
    seen = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the pty's other end is closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(fd)
    os.waitpid(pid, 0)
    assert b"terminal True command True True" in seen, seen
