"""Go's exec.LookPath: PATH search and Go's error texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookrunner.errors import CommandNotFound
from hookrunner.golang.exec import look_path, start_problem


def test_bare_name_comes_from_path() -> None:
    assert look_path("sh") in ("/bin/sh", "/usr/bin/sh")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("/nonexistent/cmd", 'exec: "/nonexistent/cmd": stat /nonexistent/cmd: no such file or directory'),
        ("no-such-command-here", 'exec: "no-such-command-here": executable file not found in $PATH'),
        ("{plain}", 'exec: "{plain}": permission denied'),
        ("/tmp", 'exec: "/tmp": permission denied'),
    ],
)
def test_lookup_errors_are_worded_as_go(command: str, message: str, tmp_path: Path) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("data")
    plain.chmod(0o644)
    command, message = command.format(plain=plain), message.format(plain=plain)
    with pytest.raises(CommandNotFound) as info:
        look_path(command)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("argv", "env", "cwd", "problem"),
    [
        (["/bin/echo", "ok"], ["A=b"], "", None),
        (["/bin/echo", "a\x00b"], ["A=b\x00c"], "/nonexistent/x", "exec: environment variable contains NUL"),
        (["/bin/echo", "a\x00b"], ["A=b"], "/nonexistent/x", "chdir /nonexistent/x: no such file or directory"),
        (["/bin/echo", "a\x00b"], ["A=b"], "/", "fork/exec /bin/echo: invalid argument"),
        (["/bin/echo"], [], "/dev/null/x", "chdir /dev/null/x: not a directory"),
        (["/bin/echo"], [], "/tmp/a\x00b", "chdir /tmp/a\x00b: invalid argument"),
    ],
)
def test_start_problem_in_gos_order(argv: list[str], env: list[str], cwd: str, problem: str | None) -> None:
    assert start_problem("/bin/echo", argv, env, cwd) == problem
