"""Go flag-package parsing: accepted spellings, Go's error texts and exit codes, the usage text."""

from __future__ import annotations

import importlib
import shutil
import subprocess

import pytest

from hookrunner.config import Config, Header
from hookrunner.errors import UsageError
from hookrunner.flags import parse_args, usage_text

ACCEPTED = [
    (["-port", "9001"], {"port": 9001}),
    (["--port", "9001"], {"port": 9001}),
    (["-port=9001"], {"port": 9001}),
    (["--port=9001"], {"port": 9001}),
    (["-port=0x10"], {"port": 16}),
    (["-port=010"], {"port": 8}),
    (["-port=1_000"], {"port": 1000}),
    (["-port=0b101"], {"port": 5}),
    (["-port=0o17"], {"port": 15}),
    (["-port=+5"], {"port": 5}),
    (["-port=-5"], {"port": -5}),
    (["-verbose"], {"verbose": True}),
    (["-verbose=false"], {"verbose": False}),
    (["-verbose=T"], {"verbose": True}),
    (["-verbose=0"], {"verbose": False}),
    (["-ip", "-port"], {"ip": "-port"}),  # a string flag takes the next argument, whatever it looks like
    (["-urlprefix="], {"urlprefix": ""}),
    (["-hooks", "a.json", "-hooks=b.yaml"], {"hooks": ("a.json", "b.yaml")}),
    (["-header", "X-A=1", "-header", "X-B=x=y"], {"headers": (Header("X-A", "1"), Header("X-B", "x=y"))}),
    (["-header", "X-Empty="], {"headers": (Header("X-Empty", ""),)}),
    # Parsing stops at the first non-flag argument, and after `--`.
    (["-verbose", "false", "-port", "1"], {"verbose": True}),
    (["-port", "1", "--", "-port", "2"], {"port": 1}),
    (["-port", "1", "extra", "-port", "2"], {"port": 1}),
    (["-port", "1", "-", "-port", "2"], {"port": 1}),
    (["-max-multipart-mem", "9223372036854775807"], {"max_multipart_mem": 9223372036854775807}),
    (["-debug", "-x-request-id", "-x-request-id-limit", "8"], {"debug": True, "x_request_id": True,
                                                             "x_request_id_limit": 8}),
    (["-socket", "/tmp/x.sock", "-setuid", "1", "-setgid", "2"], {"socket": "/tmp/x.sock", "setuid": 1,
                                                                   "setgid": 2}),
    ([], {}),
]


@pytest.mark.parametrize(("argv", "expected"), ACCEPTED, ids=[" ".join(a) or "(none)" for a, _ in ACCEPTED])
def test_accepted_command_lines(argv: list[str], expected: dict[str, object]) -> None:
    assert parse_args(argv) == Config(**expected)  # type: ignore[arg-type]


REJECTED = [
    (["-bogus"], "flag provided but not defined: -bogus"),
    (["--bogus=1"], "flag provided but not defined: -bogus"),
    (["-port", "abc"], 'invalid value "abc" for flag -port: parse error'),
    (["-port="], 'invalid value "" for flag -port: parse error'),
    (["-port", " 1"], 'invalid value " 1" for flag -port: parse error'),
    (["-port=_1"], 'invalid value "_1" for flag -port: parse error'),
    (["-port=1_"], 'invalid value "1_" for flag -port: parse error'),
    (["-port=0x"], 'invalid value "0x" for flag -port: parse error'),
    (["-port=08"], 'invalid value "08" for flag -port: parse error'),
    (["-port=9223372036854775808"], 'invalid value "9223372036854775808" for flag -port: value out of range'),
    (["-port"], "flag needs an argument: -port"),
    (["-header", "foo"], 'invalid value "foo" for flag -header: header flag must be in name=value format'),
    (["-verbose=maybe"], 'invalid boolean value "maybe" for -verbose: parse error'),
    (["---port=1"], "bad flag syntax: ---port=1"),
    (["-=x"], "bad flag syntax: -=x"),
]


@pytest.mark.parametrize(("argv", "message"), REJECTED, ids=[" ".join(a) for a, _ in REJECTED])
def test_rejected_command_lines(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(argv)
    assert caught.value.exit_code == 2
    first, rest = str(caught.value).split("\n", 1)
    assert first == message
    assert rest == usage_text()


@pytest.mark.parametrize("argv", [["-h"], ["-help"], ["--help"], ["-h=1"], ["-port", "1", "-h"]])
def test_help_prints_usage_and_exits_zero(argv: list[str]) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(argv)
    assert caught.value.exit_code == 0
    assert str(caught.value) == usage_text()


def test_usage_layout_is_go_flag_printdefaults() -> None:
    text = usage_text()
    lines = text.splitlines()
    assert lines[0] == "Usage of hookrunner:"
    names = [line.split()[0] for line in lines[1:] if line.startswith("  -")]
    assert names == sorted(names)
    assert "  -port int\n    \tport the webhook should serve hooks on (default 9000)\n" in text
    assert '  -ip string\n    \tip the webhook should serve hooks on (default "0.0.0.0")\n' in text
    assert "  -verbose\n    \tshow verbose output\n" in text
    assert "  -hooks value\n" in text
    assert "  -socket string\n" in text
    # Zero defaults are not shown.
    assert "(default 0)" not in text and '(default "")' not in text


reference = pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")


@pytest.mark.reference
@reference
@pytest.mark.parametrize(("argv", "message"), REJECTED, ids=[" ".join(a) for a, _ in REJECTED])
def test_rejections_match_the_reference(argv: list[str], message: str) -> None:
    done = subprocess.run(["webhook", *argv], capture_output=True, text=True, timeout=10)
    assert done.returncode == 2
    assert done.stderr.split("\n", 1)[0] == message
    ours = usage_text("webhook", extensions=False).replace("  -socket string\n", "")
    # The Debian reference (2.8.0) predates -socket; everything else must be the same, byte for byte.
    theirs = done.stderr.split("\n", 1)[1]
    assert [line for line in ours.splitlines() if "Unix socket" not in line] == theirs.splitlines()


@pytest.mark.reference
@reference
def test_help_matches_the_reference() -> None:
    done = subprocess.run(["webhook", "-h"], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0
    ours = [line for line in usage_text("webhook", extensions=False).splitlines() if "socket" not in line]
    assert ours == done.stderr.splitlines()


def test_workers_flag_sets_gunicorn_workers_and_defaults_to_one() -> None:
    from hookrunner.serve.arbiter import gunicorn_options

    assert parse_args([]).workers == 1
    assert gunicorn_options(parse_args([]), 3)["workers"] == 1
    assert gunicorn_options(parse_args(["-workers", "4"]), 3)["workers"] == 4
    assert gunicorn_options(parse_args(["-workers=0"]), 3)["workers"] == 1  # fewer than one means one


def test_worker_class_flag_picks_the_gunicorn_worker_and_defaults_to_gevent() -> None:
    from hookrunner.serve.arbiter import gunicorn_options
    from hookrunner.serve.greenworker import GreenWorker
    from hookrunner.serve.threadworker import HookWorker

    def serving(flags: list[str]) -> type:
        # gunicorn gets a stand-in that imports the real class only in the forked worker (arbiter.py).
        module, _, name = gunicorn_options(parse_args(flags), 3)["worker_class"].serving.partition(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]

    assert parse_args([]).worker_class == "gevent"
    assert serving([]) is GreenWorker
    assert serving(["-worker-class", "gthread"]) is HookWorker
    assert serving(["-worker-class=gevent"]) is GreenWorker
    with pytest.raises(UsageError, match="must be one of gevent, gthread"):
        parse_args(["-worker-class", "eventlet"])


# --- hookrunner's own flags for the safety limits (docs/limits.md) -----------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {"command_timeout": 0.0, "max_body_size": 25 << 20, "read_timeout": 30.0,
              "shutdown_timeout": 25.0, "max_concurrent_commands": 0, "validate": False,
              "trusted_proxies": ()}),
        (["-command-timeout", "1m30s"], {"command_timeout": 90.0}),
        (["-command-timeout=1500ms"], {"command_timeout": 1.5}),
        (["-read-timeout=0"], {"read_timeout": 0.0}),
        (["-shutdown-timeout", "2s"], {"shutdown_timeout": 2.0}),
        (["-max-concurrent-commands", "4"], {"max_concurrent_commands": 4}),
        (["-max-body-size", "1048576"], {"max_body_size": 1 << 20}),
        (["-max-body-size", "0x400"], {"max_body_size": 1024}),
        (["-max-body-size", "512KiB"], {"max_body_size": 512 << 10}),
        (["-max-body-size", "2M"], {"max_body_size": 2 << 20}),
        (["-max-body-size", "1GB"], {"max_body_size": 1000**3}),
        (["-max-body-size", "0"], {"max_body_size": 0}),
        (["-validate"], {"validate": True}),
        (["-trusted-proxies", "10.0.0.0/8, 172.17.0.1", "-trusted-proxies=::1"],
         {"trusted_proxies": ("10.0.0.0/8", "172.17.0.1/32", "::1/128")}),
        (["-trusted-proxies", "10.1.2.3/8"], {"trusted_proxies": ("10.0.0.0/8",)}),
        # soulteary/webhook's rate-limit flags, with its defaults (off; 100 a second, bursts of 10).
        ([], {"rate_limit_enabled": False, "rate_limit_rps": 100, "rate_limit_burst": 10}),
        (["-rate-limit-enabled", "-rate-limit-rps=5", "-rate-limit-burst", "20"],
         {"rate_limit_enabled": True, "rate_limit_rps": 5, "rate_limit_burst": 20}),
        # stream-command-output's slow clients (docs/limits.md, "Streamed answers").
        ([], {"stream_write_timeout": 30.0, "stream_buffer": 4 << 20}),
        (["-stream-write-timeout", "2s", "-stream-buffer", "64MiB"],
         {"stream_write_timeout": 2.0, "stream_buffer": 64 << 20}),
        (["-stream-write-timeout=0"], {"stream_write_timeout": 0.0}),
    ],
)
def test_limit_flags(argv: list[str], expected: dict[str, object]) -> None:
    config = parse_args(argv)
    assert {key: getattr(config, key) for key in expected} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-command-timeout", "5"], 'invalid value "5" for flag -command-timeout: parse error'),
        (["-read-timeout", "-1s"], 'invalid value "-1s" for flag -read-timeout: must not be negative'),
        (["-max-body-size", "12 parsecs"], 'invalid value "12 parsecs" for flag -max-body-size: parse error'),
        (["-max-body-size", "-1"], 'invalid value "-1" for flag -max-body-size: must not be negative'),
        (["-trusted-proxies", "proxy.local"],
         'invalid value "proxy.local" for flag -trusted-proxies: proxy.local is not an IP address or CIDR'),
        (["-rate-limit-rps", "0"], 'invalid value "0" for flag -rate-limit-rps: must be positive'),
        (["-rate-limit-burst=-3"], 'invalid value "-3" for flag -rate-limit-burst: must be positive'),
        (["-stream-buffer", "0"], 'invalid value "0" for flag -stream-buffer: must be positive'),
    ],
)
def test_limit_flag_rejections(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(argv)
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(message + "\nUsage of hookrunner:\n")


def test_limit_flags_in_usage_with_go_defaults() -> None:
    text = usage_text()
    assert "  -max-body-size size\n" in text and "(default 25MiB)\n" in text
    assert "  -read-timeout duration\n" in text and "(default 30s)\n" in text
    assert "  -shutdown-timeout duration\n" in text and "(default 25s)\n" in text
    # A zero duration shows no default, as Go's flag package leaves zero values out.
    command_timeout = text.split("  -command-timeout duration\n", 1)[1].split("\n", 1)[0]
    assert "(default" not in command_timeout
    assert "  -rate-limit-rps int\n" in text and "  -rate-limit-burst int\n" in text
    assert "  -rate-limit-enabled\n" in text
    assert "  -stream-write-timeout duration\n" in text and "  -stream-buffer size\n" in text
    assert "(default 4MiB)\n" in text
    # The reference's usage text (for comparisons) has none of them.
    assert "-validate" not in usage_text(extensions=False)
    assert "-rate-limit" not in usage_text(extensions=False)
