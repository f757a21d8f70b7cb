"""The Go-style logger: webhook's text lines unchanged, and the JSON mode's one object per line."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest

from hookrunner.ops import log as log_module
from hookrunner.ops.log import GoLogger, decoded_pieces

TEXT_LINE = re.compile(r"^\[webhook\] \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (.*)$", re.S)


def logger(fmt: str) -> tuple[GoLogger, io.StringIO]:
    stream = io.StringIO()
    return GoLogger(stream, enabled=True, fmt=fmt), stream


def test_text_mode_is_webhooks_line_and_ignores_structured_fields() -> None:
    log, stream = logger("text")
    log.request("ab12cd", "t got matched\n", hook="t", event="matched", fields={"x": 1})
    log.output("version 1 starting")
    lines = stream.getvalue().splitlines()
    assert [TEXT_LINE.match(line).group(1) for line in lines] == [  # type: ignore[union-attr]
        "[ab12cd] t got matched",
        "version 1 starting",
    ]


def test_text_mode_raw_is_written_as_is() -> None:
    log, stream = logger("text")
    log.raw("> [id] GET / HTTP/1.1\n> [id] \n", request_id="id", event="request_dump", plain="GET /")
    assert stream.getvalue() == "> [id] GET / HTTP/1.1\n> [id] \n"


def test_json_mode_one_object_per_line_with_schema() -> None:
    log, stream = logger("json")
    log.request("ab12cd", "t got matched\n", hook="t", event="matched")
    log.request("ab12cd", "command output: line one\nline two\n", hook="t", fields={"bytes": 17})
    log.output("error occurred: exit status 3")
    log.printf("\tloaded: %s\n", "t")
    log.output("warn: use of deprecated option payload-hash-sha1; use payload-hmac-sha1 instead")
    log.raw("> [ab12cd] GET / HTTP/1.1\n", request_id="ab12cd", event="request_dump", plain="GET / HTTP/1.1")
    lines = stream.getvalue().split("\n")
    assert lines[-1] == ""
    entries = [json.loads(line) for line in lines[:-1]]
    assert len(entries) == 6
    for entry in entries:
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$", entry["time"])
    assert entries[0] == {
        **entries[0],
        "level": "info",
        "request_id": "ab12cd",
        "hook": "t",
        "event": "matched",
        "msg": "t got matched",
    }
    assert entries[1]["msg"] == "command output: line one\nline two"
    assert entries[1]["fields"] == {"bytes": 17}
    assert entries[2]["level"] == "error" and "request_id" not in entries[2]
    assert entries[3]["msg"] == "loaded: t"
    assert entries[4]["level"] == "warn"
    assert entries[5] == {**entries[5], "level": "debug", "event": "request_dump", "msg": "GET / HTTP/1.1"}


def test_json_mode_replaces_bytes_that_are_not_utf8() -> None:
    log, stream = logger("json")
    raw = b"caf\xe9".decode("utf-8", "surrogateescape")
    log.request("x", f"command output: {raw}")
    line = stream.getvalue()
    line.encode("utf-8")  # strict UTF-8
    assert json.loads(line)["msg"] == "command output: caf\ufffd"


def test_disabled_logger_writes_nothing() -> None:
    stream = io.StringIO()
    log = GoLogger(stream, enabled=False, fmt="json")
    log.output("x")
    log.raw("y")
    assert stream.getvalue() == ""


def test_access_only_writes_just_the_access_entries() -> None:
    stream = io.StringIO()
    log = GoLogger(stream, enabled=False)
    log.access = True
    log.request("ab12cd", "incoming HTTP POST request from 127.0.0.1:5555\n", event="incoming")
    log.request("ab12cd", "200 | 0 B | 1ms | h | POST /hooks/a", event="access")
    log.output("version 1 starting")
    (line,) = stream.getvalue().splitlines()
    assert TEXT_LINE.match(line).group(1) == "[ab12cd] 200 | 0 B | 1ms | h | POST /hooks/a"  # type: ignore[union-attr]


def test_a_fatal_entry_is_written_with_the_log_off_and_nothing_else_is() -> None:
    stream = io.StringIO()
    log = GoLogger(stream, enabled=False)
    log.output("version 1 starting")
    log.output(
        "run journal: cannot use x: file is not a database; not starting", level="error", event="fatal"
    )
    (line,) = stream.getvalue().splitlines()
    assert TEXT_LINE.match(line).group(1) == "run journal: cannot use x: file is not a database; not starting"  # type: ignore[union-attr]


def _binary_logger(fmt: str, where: Path | None) -> tuple[GoLogger, Callable[[], bytes]]:
    """A logger on a text stream with a buffer underneath, as stderr and -logfile are: in memory, or on a
    file (-logfile's way of opening it) whose descriptor the line is written to; and what it wrote."""
    if where is None:
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", write_through=True)
        return GoLogger(stream, enabled=True, fmt=fmt), raw.getvalue
    stream = open(where, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed once read

    def written() -> bytes:
        stream.close()
        return where.read_bytes()

    return GoLogger(stream, enabled=True, fmt=fmt), written


#: Byte sequences that the pieces of an output may cut through: UTF-8 of 2, 3 and 4 bytes, bytes that are not
#: UTF-8, whitespace (stripped at the ends of a JSON message), and what JSON escapes.
OUTPUT_ALPHABET = [b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"a", b"\x80", b"\xff", b"\xed\xa0\x80"]
OUTPUT_ALPHABET += [b"\xf4\x90", b" ", b"\n", b"\t", b"\xe3\x80\x80", b'"', b"\\", b"\x00", b"\x1f"]


@pytest.mark.parametrize("on_file", [False, True], ids=["in memory", "on a file"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_output_written_in_pieces_is_the_line_it_was_as_one_message(
    fmt: str, on_file: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """request_output writes, byte for byte, what request() wrote for the whole decoded output, whatever
    the pieces cut through (a few bytes a piece here, 1 MiB in use; an output of one piece is written as
    one message), for any request id."""
    random = Random(7)
    stamp = re.compile(rb'^\[webhook\] [0-9/: ]{20}|"time": "[^"]*"')
    for n in range(300):
        data = b"".join(random.choice(OUTPUT_ALPHABET) for _ in range(random.randint(0, 30)))
        if n % 10 == 0:  # UTF-8 throughout: a text line is written from the output's own bytes
            data = data.decode("utf-8", "replace").encode()
        monkeypatch.setattr(log_module, "OUTPUT_PIECE", random.randint(1, 5))
        rid = random.choice(["ab12cd", "r\udcc3\udca9", "x\ud800y"])
        hook = random.choice(["h", "\x00msg\x00"])  # the JSON entry's placeholder for the message, as a field
        whole, whole_written = _binary_logger(fmt, tmp_path / f"whole-{n}" if on_file else None)
        whole.request(rid, f"command output: {data.decode('utf-8', 'replace')}\n", hook=hook, event="out")
        pieces, pieces_written = _binary_logger(fmt, tmp_path / f"pieces-{n}" if on_file else None)
        pieces.request_output(rid, "command output: ", data, hook=hook, event="out")
        expected, written = (stamp.sub(b"", read()) for read in (whole_written, pieces_written))
        assert written == expected, (data, rid)


def test_a_line_the_kernel_takes_in_short_writes_is_written_whole_and_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """writev(2) may take fewer bytes than it was given (a pipe, a signal): the rest follows, in order, from
    where it stopped, also inside a part and across more parts than one call takes."""
    random = Random(11)
    real_writev = log_module.os.writev

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        joined = b"".join(buffers)
        return int(real_writev(fd, [joined[: random.randint(1, len(joined))]]))

    monkeypatch.setattr(log_module.os, "writev", short_writev)
    monkeypatch.setattr(log_module, "_IOV_MAX", 3)
    for n in range(100):
        parts = [bytes([65 + i % 26]) * random.randint(0, 40) for i in range(random.randint(1, 12))]
        where = tmp_path / f"short-{n}"
        with open(where, "wb") as file:
            log_module._write_all(file.fileno(), parts)
        assert where.read_bytes() == b"".join(parts)


def test_a_disabled_logger_writes_no_output() -> None:
    log, stream = logger("text")
    log.enabled = False
    log.request_output("id", "command output: ", b"x" * 100, event="command_output")
    assert stream.getvalue() == ""


def test_an_output_is_decoded_in_pieces_to_the_same_text() -> None:
    data = "é€😀".encode() * 3 + b"\xff"
    assert list(decoded_pieces(data, 4))[:2] == ["é", "€"]
    assert "".join(decoded_pieces(data, 4)) == data.decode("utf-8", "replace")
