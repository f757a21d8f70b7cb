"""Go's syscall.Errno texts, as webhook prints them."""

from __future__ import annotations

import errno
import socket

import pytest

from hookrunner.golang.syscall import errno_text


@pytest.mark.parametrize(
    ("number", "go_text"),
    [
        # Go's zerrors_linux table: glibc's message with only its first letter lowered.
        (errno.ENOENT, "no such file or directory"),
        (errno.EADDRINUSE, "address already in use"),
        (errno.EMFILE, "too many open files"),
        (errno.ENOCSI, "no CSI structure available"),
        (errno.EXFULL, "exchange full"),
    ],
)
def test_an_errno_reads_as_go_prints_it(number: int, go_text: str) -> None:
    assert errno_text(OSError(number, "whatever the raiser wrote")) == go_text


def test_a_resolver_error_keeps_its_own_message() -> None:
    err = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert errno_text(err) == "name or service not known"


def test_an_error_without_errno_is_its_text() -> None:
    assert errno_text(OSError("Something odd")) == "something odd"
