"""Starting a command's process with Popen's own child code (CPython's `_posixsubprocess.fork_exec`, the C
function Popen calls) without Popen's Python around it: the same child, byte for byte, for a third of the run
owner's CPU a start took. Used only on the Python whose fork_exec arguments this module was checked against;
elsewhere spawn.py's Popen starts every command.

What Popen does in Python and this does too: the environment as `key=value` bytes (a name with `=` refused
with Popen's ValueError), stdin on /dev/null opened read-write, stdout and stderr on one pipe, the error pipe
read until the exec closes it, and the child's error raised as Popen raises it (an OSError of its errno, named
by the executable, or by the working directory when the chdir failed). What it leaves out: Popen's object, its
list of unwaited children, its audit event and its lookup of a bare name on PATH (a path with no folder goes
to Popen)."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

try:
    import _posixsubprocess
except ImportError:  # not a POSIX CPython
    _posixsubprocess = None  # type: ignore[assignment]

# Typed loosely on purpose: typeshed's stub takes neither a None cwd nor a None preexec_fn, which Popen gives.
_fork_exec: Callable[..., int] | None = getattr(_posixsubprocess, "fork_exec", None)

#: The Pythons whose fork_exec takes the arguments `fork_exec_process` gives it (their order and meaning).
CHECKED_PYTHONS = ((3, 11),)
_USABLE = _fork_exec is not None and sys.version_info[:2] in CHECKED_PYTHONS
#: Popen's own choice of vfork (CPython may turn it off).
_USE_VFORK = bool(getattr(subprocess, "_USE_VFORK", True))


def available() -> bool:
    """Whether starts may leave Popen out on this Python."""
    return _USABLE


class StartedProcess:
    """A process fork_exec started: the part of Popen's surface the run path uses (`pid`, `stdout`,
    `returncode`, `poll`). Its exit status is collected by `poll` alone, as Popen's is."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code once the process has exited (-N for a signal N), else None; never blocks."""
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    self.returncode = 0  # as Popen: collected elsewhere, its status unknown
                else:
                    if pid == self.pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode


def fork_exec_process(
    path: str, argv: list[str], env: dict[str, str], cwd: str | None, session: bool = True
) -> StartedProcess | None:
    """Start `argv` with `path` as the executable exactly as spawn.start_process's Popen does, or return None
    (nothing started) where this module does not: another Python, or a path with no folder (Popen would
    search PATH for it). In a process group of its own, and with `session` in a session of its own too."""
    if not _USABLE or not os.path.dirname(path):
        return None
    env_list = []
    for key, value in env.items():
        name = os.fsencode(key)
        if b"=" in name:
            raise ValueError("illegal environment variable name")
        env_list.append(name + b"=" + os.fsencode(value))
    parents: list[int] = []  # our ends, kept only once the child has started
    childs: list[int] = []  # the child's, closed here whatever happens (it has its own copies)
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        childs.append(devnull)
        read_end, write_end = os.pipe()
        parents.append(read_end)
        childs.append(write_end)
        errpipe_read, errpipe_write = os.pipe()
        parents.append(errpipe_read)
        childs.append(errpipe_write)
        assert _fork_exec is not None
        pid = _fork_exec(
            argv,
            (os.fsencode(path),),
            True,  # close every other descriptor in the child
            (errpipe_write,),
            cwd,
            env_list,
            devnull,  # stdin
            -1,
            read_end,
            write_end,  # stdout
            -1,
            write_end,  # stderr: the same pipe
            errpipe_read,
            errpipe_write,
            True,  # restore_signals: SIGPIPE and SIGXFSZ back to their default
            session,  # a new session (which is a new process group too)
            -1 if session else 0,  # else a new process group alone
            None,
            None,
            None,  # no user or group change
            -1,  # the umask as it is
            None,  # no preexec_fn
            _USE_VFORK,
        )
    except BaseException:
        for fd in parents:
            os.close(fd)
        raise
    finally:
        for fd in childs:
            os.close(fd)
    try:
        error = bytearray()
        while True:  # until the exec closes it (close-on-exec), or the child's error
            part = os.read(errpipe_read, 50000)
            error += part
            if not part or len(error) > 50000:
                break
    finally:
        os.close(errpipe_read)
    if error:
        os.close(read_end)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        raise _child_error(bytes(error), path, cwd)
    return StartedProcess(pid, open(read_end, "rb", buffering=0))


def _child_error(data: bytes, path: str, cwd: str | None) -> Exception:
    """The exception Popen raises for what its child wrote on the error pipe."""
    try:
        name, hex_errno, raw = data.split(b":", 2)
        message = raw.decode()
    except ValueError:
        name, hex_errno, message = b"SubprocessError", b"0", f"Bad exception data from child: {data!r}"
    kind = getattr(builtins, name.decode("ascii"), subprocess.SubprocessError)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = subprocess.SubprocessError
    if issubclass(kind, OSError) and hex_errno:
        number = int(hex_errno, 16)
        never_exec = message == "noexec"  # the chdir failed, not the exec
        text = os.strerror(number) if number else "" if never_exec else message
        return kind(number, text, cwd if never_exec else path)
    return kind(message)
