"""pass-file-to-command's files: created as Go's os.CreateTemp creates them, and written whole or not at
all, with Go's error texts."""

from __future__ import annotations

import os

from hookrunner.golang.syscall import errno_text


def create_temp(folder: str, pattern: str) -> tuple[int, str]:
    """A new file, 0600, named as Go's os.CreateTemp(folder, pattern) names it: the random part, the
    decimal digits of a random uint32, replaces the pattern's last `*` or follows it; in `folder`, or else
    $TMPDIR or /tmp. Returns its descriptor and name; an OSError's strerror is Go's error text."""
    if "/" in pattern:
        raise OSError(0, f"createtemp {pattern}: pattern contains path separator")
    prefix, star, suffix = pattern.rpartition("*")
    if not star:
        prefix, suffix = pattern, ""
    folder = folder or os.environ.get("TMPDIR") or "/tmp"
    prefix = folder + prefix if folder.endswith("/") else f"{folder}/{prefix}"
    # Imported here: secrets loads hashlib and with it OpenSSL's libcrypto, which the run owner's process
    # otherwise never needs (docs/performance.md, memory at rest).
    import secrets

    for _ in range(10000):
        name = f"{prefix}{secrets.randbits(32)}{suffix}"
        try:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), name
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, f"open {name}: {errno_text(exc)}") from exc
    raise OSError(0, f"createtemp {prefix}*{suffix}: file already exists")


def write_temp(fd: int, name: str, data: bytes) -> None:
    """Writes all of `data` to the new file `name` open on `fd`, and closes it. When that fails (a full
    disk), the file is removed, so that no command is ever handed a partial or empty file, and the OSError
    raised has Go's text for the failed write (`write <name>: no space left on device`)."""
    try:
        with memoryview(data) as view:
            written = 0
            while written < len(view):  # os.File.Write: until all is written or it fails
                written += os.write(fd, view[written:])
    except OSError as exc:
        os.close(fd)
        try:
            os.remove(name)
        except OSError:
            pass  # what cannot be removed stays, as webhook leaves every such file
        raise OSError(exc.errno, f"write {name}: {errno_text(exc)}") from exc
    os.close(fd)
