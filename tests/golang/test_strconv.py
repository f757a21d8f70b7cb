"""Go's strconv.Quote and underscore rules (cases checked with Go 1.19's strconv)."""

import pytest

from hookrunner.golang.strconv import quote, quote_rune, underscores_ok


@pytest.mark.parametrize(
    ("text", "ascii_only", "expected"),
    [
        ("plain", False, '"plain"'),
        ('say "hi"\\', False, '"say \\"hi\\"\\\\"'),
        ("\a\b\f\n\r\t\v", False, '"\\a\\b\\f\\n\\r\\t\\v"'),
        ("\x00\x7f", False, '"\\x00\\x7f"'),
        ("é☃", False, '"é☃"'),
        ("é☃", True, '"\\u00e9\\u2603"'),
        ("\U0001f600", True, '"\\U0001f600"'),
        ("\u200b", False, '"\\u200b"'),  # a format character is not printable
        ("bad\udcff", False, '"bad\\xff"'),  # an undecodable byte
    ],
)
def test_quote(text: str, ascii_only: bool, expected: str) -> None:
    assert quote(text, ascii_only) == expected


def test_quote_rune() -> None:
    assert quote_rune(ord("'")) == "'\\''"
    assert quote_rune(0xD800) == "'�'"


@pytest.mark.parametrize(
    ("text", "ok"),
    [("1_000", True), ("0x_1F", True), ("_1", False), ("1_", False), ("1__0", False), ("-0b_1", True), ("0_1", True), ("1_a", False)],
)
def test_underscores_ok(text: str, ok: bool) -> None:
    assert underscores_ok(text) is ok


def test_quote_of_mixed_escapes() -> None:
    assert quote('a"\\\x00\u00a0é\U0001f600') == '"a\\"\\\\\\x00\\u00a0é😀"'


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("foo", '"foo"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("\n\t\x00\x7f", '"\\n\\t\\x00\\x7f"'),
        ("é\u00a0\u2028", '"é\\u00a0\\u2028"'),
        ("\udcff", '"\\xff"'),
        ("\U0001f600", '"\U0001f600"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert quote(text) == quoted
