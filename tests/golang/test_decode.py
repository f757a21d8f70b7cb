"""Go-style decoding: ghodss/yaml's scalar-to-string conversion, int and bool fields."""

import pytest

from hookrunner.errors import HooksFileError
from hookrunner.golang.decode import fields, go_int, go_string, yaml_v2_scalar


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, "1"), (True, "true"), (False, "false"), (1.5, "1.5"), (1.0, "1"), (0.1, "0.1"), (1e21, "1e+21"),
     (123456.0, "123456"), (1234567.0, "1.234567e+06"), (123456789.0, "1.2345679e+08"), (1e-5, "1e-05"),
     (float("inf"), "+Inf"), (None, ""), ("s", "s")],
)  # fmt: skip
def test_scalars_become_strings_as_ghodss_yaml_makes_them(value: object, expected: str) -> None:
    assert go_string(value, "Hook.id") == expected


def test_int_fields() -> None:
    assert go_int(200, "Hook.x") == 200
    assert go_int(200.0, "Hook.x") == 200
    assert go_int(None, "Hook.x") == 0
    for bad in ("200", 1.5, True, [1]):
        with pytest.raises(HooksFileError, match="of type int"):
            go_int(bad, "Hook.x")


def test_fields_match_exactly_then_ignoring_case_in_sorted_order() -> None:
    assert fields({"Name": "a", "name": "b"}, ("name",)) == [("name", "a"), ("name", "b")]
    assert fields({"SOURCE": "x", "other": 1}, ("source", "name")) == [("source", "x")]


# Checked against the reference (Debian's webhook 2.8.0) with each value as an unquoted `string` argument.
@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.", "1."), ("1e3", "1e3"), ("1e+3", "1000"), (".5", "0.5"), ("1.5e+3", "1500"), ("0o17", "15"),
     ("0b101", "5"), ("12345678901234567890123", "1.2345679e+22"), ("18446744073709551615", "18446744073709551615"),
     ("-9223372036854775809", "-9.223372e+18"), ("1_0", "10"), ("0x_1F", "31"), ("y", "true"), ("Off", "false"),
     ("~", ""), ("2026-11-22", "2026-11-22"), ("nope", "nope")],
)  # fmt: skip
def test_yaml_plain_scalars_as_the_reference_reads_them(text: str, expected: str) -> None:
    assert go_string(yaml_v2_scalar(text)) == expected
