"""Reading a hooks file safely: only a regular file (after symlinks), opened without blocking, up to a cap.

A FIFO would block its reader forever and `/dev/zero` would feed it without end; both are refused by
what `fstat` says of the opened descriptor, before anything is read.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from hookrunner.errors import HooksFileError, HooksFileTooLarge, NotRegularFileError
from hookrunner.golang.syscall import errno_text

#: The largest hooks file read: 16 MiB, hundreds of times any real one (docs/limits.md).
HOOKS_FILE_CAP = 16 * 1024 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a file that is not regular is, in words for the log."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _go_error(verb: str, path: str, exc: OSError) -> HooksFileError:
    # Go's *PathError text: `open hooks.json: no such file or directory`.
    return HooksFileError(f"{verb} {path}: {errno_text(exc)}")


def check_regular(path: str, mode: int, size: int, cap: int = HOOKS_FILE_CAP) -> None:
    """Raise the error reading `path` would give for a file of this mode and size; nothing if it is fine."""
    if stat.S_ISDIR(mode):
        raise NotRegularFileError(f"read {path}: is a directory")  # Go's own words, as webhook logs them
    if not stat.S_ISREG(mode):
        kind = file_kind(mode)
        raise NotRegularFileError(f"read {path}: not a regular file ({kind}); only regular files are read")
    if size > cap:
        raise HooksFileTooLarge(f"read {path}: file is larger than the {cap >> 20} MiB hooks-file cap")


def read_regular_file(path: str, cap: int = HOOKS_FILE_CAP) -> bytes:
    """The bytes of `path` if it is a regular file (after symlinks) of at most `cap` bytes.

    Raises NotRegularFileError, HooksFileTooLarge, or HooksFileError for a file that cannot be opened.
    """
    return read_regular_file_stat(path, cap)[1]


def read_regular_file_stat(path: str, cap: int = HOOKS_FILE_CAP) -> tuple[os.stat_result, bytes]:
    """read_regular_file(), with the opened file's status as it was before the read."""
    st, data, _ = read_regular_file_probed(path, cap, probe_writers=False)
    return st, data


def open_for_writing(fd: int) -> bool | None:
    """Whether any process has the file open for writing now (None: cannot tell here).

    Linux grants a read lease only on a file that nobody has open for writing; the lease is given back
    at once. Taking one needs the file's owner or CAP_LEASE, and a file system that has leases.
    """
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return True if exc.errno == errno.EAGAIN else None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return False


def read_regular_file_probed(
    path: str, cap: int = HOOKS_FILE_CAP, probe_writers: bool = True
) -> tuple[os.stat_result, bytes, bool | None]:
    """read_regular_file_stat(), and, after the read and before the close, open_for_writing()."""
    writers: bool | None = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _go_error("open", path, exc) from exc
    try:
        st = os.fstat(fd)
        check_regular(path, st.st_mode, st.st_size, cap)
        chunks: list[bytes] = []
        total = 0
        while True:  # to the end, but never past the cap: the file may grow while it is read
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                check_regular(path, st.st_mode, total, cap)
        if probe_writers:
            writers = open_for_writing(fd)
    except OSError as exc:
        raise _go_error("read", path, exc) from exc
    finally:
        os.close(fd)
    return st, b"".join(chunks), writers
