"""The Go-style logger: webhook's text lines unchanged, and the JSON mode's one object per line."""

from __future__ import annotations

import io
import json
import re

from hookrunner.ops.log import GoLogger

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
    assert entries[0] == {**entries[0], "level": "info", "request_id": "ab12cd", "hook": "t",
                          "event": "matched", "msg": "t got matched"}
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
    log.output("run journal: cannot use x: file is not a database; not starting", level="error", event="fatal")
    (line,) = stream.getvalue().splitlines()
    assert TEXT_LINE.match(line).group(1) == "run journal: cannot use x: file is not a database; not starting"  # type: ignore[union-attr]
