"""Go's flag package reading values: strconv.ParseInt with base 0 for an int flag."""

from __future__ import annotations

import pytest

from hookrunner.golang.flag import parse_go_int


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("-0", 0), ("0x_1F", 31), ("0_7", 7), ("-9223372036854775808", -(1 << 63)), ("1_2_3", 123)],
)
def test_go_int_syntax(text: str, value: int) -> None:
    assert parse_go_int(text) == value
