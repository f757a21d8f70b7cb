"""Go's DetectContentType, case by case (cases checked against Go's net/http sniffing table)."""

import pytest

from hookrunner.golang.sniff import detect_content_type

HTML = "text/html; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", TEXT),
        (b"hello\n", TEXT),
        (b'{"a":1}\n', TEXT),
        (b"<html><body>hi", HTML),
        (b"  \n<HTML>", HTML),
        (b"<!DOCTYPE html>", HTML),
        (b"<p>x", HTML),
        (b"<p", TEXT),  # the tag must be followed by a space or `>`
        (b"<pre>", TEXT),  # <P must be followed by space or >
        (b"<!-- c -->", HTML),
        (b"<?xml version='1.0'?>", "text/xml; charset=utf-8"),
        (b"%PDF-1.4", "application/pdf"),
        (b"\xef\xbb\xbfhi", TEXT),
        (b"\xfe\xff\x00h", "text/plain; charset=utf-16be"),
        (b"GIF89a....", "image/gif"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff\xe0", "image/jpeg"),
        (b"\x1f\x8b\x08\x00", "application/x-gzip"),
        (b"PK\x03\x04", "application/zip"),
        (b"\x00\x01\x02", "application/octet-stream"),
        (b"line\x1aSUB", "application/octet-stream"),
        (b"esc\x1b[0m", TEXT),  # ESC is not a binary byte for Go
        (b"tab\tand\r\nnewlines\x0c", TEXT),
        (b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom", "video/mp4"),
        (b"x" * 600 + b"\x00", TEXT),  # only the first 512 bytes are looked at
    ],
)
def test_detect_content_type(body: bytes, expected: str) -> None:
    assert detect_content_type(body) == expected
