"""Go's syscall.Errno text: how Go words an operating-system error."""

from __future__ import annotations

import os


def errno_text(err: OSError) -> str:
    """The text Go prints for `err`'s errno: glibc's message with only its first letter lowered
    (`no such file or directory`, `no CSI structure available`). An error without an errno of the system
    (a resolver's, whose numbers are negative) keeps its own message, first letter lowered the same way."""
    text = os.strerror(err.errno) if err.errno and err.errno > 0 else err.strerror or str(err)
    return text[:1].lower() + text[1:]
