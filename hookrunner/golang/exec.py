"""Go's os/exec.LookPath: where a command is found, and Go's wording when it is not (syscall.Errno texts)."""

from __future__ import annotations

import os
import stat

from hookrunner.errors import CommandNotFound
from hookrunner.golang.syscall import errno_text


def _check_executable(path: str) -> None:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise CommandNotFound(f'exec: "{path}": stat {path}: {errno_text(exc)}') from exc
    if stat.S_ISDIR(info.st_mode) or not os.access(path, os.X_OK):
        raise CommandNotFound(f'exec: "{path}": permission denied')


def look_path(command: str) -> str:
    """Go's exec.LookPath: a name with a slash is checked as it is, any other is searched on PATH."""
    if "/" in command:
        _check_executable(command)
        return command
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", command)
        try:
            _check_executable(candidate)
        except CommandNotFound:
            continue
        return candidate
    raise CommandNotFound(f'exec: "{command}": executable file not found in $PATH')


def start_problem(path: str, argv: list[str], env: list[str], cwd: str) -> str | None:
    """What Go's exec.Cmd.Start says before any process exists, in its order: an environment entry with
    a NUL, then a working directory that cannot be stat'ed (os.StartProcess's `chdir` error), then an
    argument or path with a NUL (the fork's EINVAL). None when nothing stops the start there."""
    if any("\x00" in entry for entry in env):
        return "exec: environment variable contains NUL"
    if cwd:
        try:
            os.stat(cwd)
        except ValueError:
            return f"chdir {cwd}: invalid argument"
        except OSError as exc:
            return f"chdir {cwd}: {errno_text(exc)}"
    if "\x00" in path or any("\x00" in arg for arg in argv):
        return f"fork/exec {path}: invalid argument"
    return None
