"""Go's fmt as the template engine has it: Sprintf's verbs, flags and error forms."""

from __future__ import annotations

from typing import Any

import pytest

from hookrunner.golang.template.printf import go_sprintf


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("%5.1f|%-4d|%x", 3.14159, 7, "hi"), "  3.1|7   |6869"),
        (("%d %d", 1), "1 %!d(MISSING)"),
        (("%s", 1, 2), "%!s(int=1)%!(EXTRA int=2)"),
        (("%v %v", [1, "a"], {"k": None}), "[1 a] map[k:<nil>]"),
        (("%08.3f|%+d|%q", -3.14159, 5, "é\n"), '-003.142|+5|"é\\n"'),
    ],
)
def test_go_sprintf(args: tuple[Any, ...], expected: str) -> None:
    assert go_sprintf(*args) == expected
