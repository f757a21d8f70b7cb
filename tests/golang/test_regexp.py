"""Go's regexp.Compile on RE2: what Go 1.19 refuses that RE2 accepts, Go's error texts, non-UTF-8 subjects.

The full table of error texts, checked against the reference, is exercised through the `regex` match rule
in tests/hooks/test_rules.py; these pin the module's own contract on a few of those cases.
"""

from __future__ import annotations

import pytest

from hookrunner.golang.regexp import compile_go_regexp, regexp_subject


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(", "missing closing ): `(`"),
        ("(?<n>a)", "invalid or unsupported Perl syntax: `(?<`"),  # RE2 accepts this, Go 1.19 does not
        (r"\C", r"invalid escape sequence: `\C`"),  # RE2 accepts this too
        ("a**\\C", "invalid nested repetition operator: `**`"),  # the error Go meets first
        ("x{2}{1001}", "invalid repeat count: `{1001}`"),
    ],
)
def test_compile_errors_are_gos(pattern: str, message: str) -> None:
    assert compile_go_regexp(pattern) == (None, "error parsing regexp: " + message)


def test_compiled_pattern_searches() -> None:
    pattern, error = compile_go_regexp("^a.c$")
    assert error is None
    assert pattern.search(regexp_subject("a\udcffc")) is not None  # a stray byte reads as U+FFFD
    assert regexp_subject("a\udcffc") == "a\ufffdc"
