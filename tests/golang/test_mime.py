"""Tests for hookrunner.golang.mime: Go's mime.ParseMediaType."""

from __future__ import annotations

import pytest

from hookrunner.golang.mime import parse_media_type

# --- media types ---

MEDIA_CASES: list[tuple[str, str, dict[str, str]]] = [
    ('form-data; name="a"', "form-data", {"name": "a"}),
    ("FORM-DATA; NAME=a", "form-data", {"name": "a"}),
    ("multipart/form-data; boundary=XX", "multipart/form-data", {"boundary": "XX"}),
    ("form-data; name*=UTF-8''h%C3%A9", "form-data", {"name": "h\u00e9"}),
    ("form-data; name*0=ab; name*1=cd", "form-data", {"name": "abcd"}),
    ('form-data; name="a\\"b"', "form-data", {"name": 'a"b'}),
    ('form-data; name="a";', "form-data", {"name": "a"}),
]


@pytest.mark.parametrize(("value", "media_type", "params"), MEDIA_CASES)
def test_parse_media_type(value: str, media_type: str, params: dict[str, str]) -> None:
    assert parse_media_type(value) == (media_type, params)


@pytest.mark.parametrize(
    "value", ["", "a/", "/b", "a/b/c", "form-data; junk", "x; a=1; a=2", "form-data; name="]
)
def test_parse_media_type_rejects(value: str) -> None:
    with pytest.raises(Exception, match="^mime: "):
        parse_media_type(value)
