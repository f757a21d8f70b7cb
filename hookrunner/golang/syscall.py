"""Go's syscall texts: how Go words an operating-system error, and a process's end (os.ProcessState)."""

from __future__ import annotations

import os
import signal


def errno_text(err: OSError) -> str:
    """The text Go prints for `err`'s errno: glibc's message with only its first letter lowered
    (`no such file or directory`, `no CSI structure available`). An error without an errno of the system
    (a resolver's, whose numbers are negative) keeps its own message, first letter lowered the same way."""
    text = os.strerror(err.errno) if err.errno and err.errno > 0 else err.strerror or str(err)
    return text[:1].lower() + text[1:]


#: How Go's syscall package words the signals a command most often dies of.
SIGNAL_TEXT = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
}


def exit_text(returncode: int) -> str:
    """Go's ProcessState text: `exit status N`, or `signal: <Go's name for it>`."""
    if returncode >= 0:
        return f"exit status {returncode}"
    sig = -returncode
    try:
        name = SIGNAL_TEXT.get(signal.Signals(sig), f"signal {sig}")
    except ValueError:
        name = f"signal {sig}"
    return f"signal: {name}"
