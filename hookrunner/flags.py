"""A small clone of Go's `flag` package: webhook's command line, errors and usage text, into a Config."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hookrunner.config import Config, Header
from hookrunner.errors import UsageError
from hookrunner.golang.flag import INT64_MAX, FlagValueError, parse_go_bool, parse_go_int
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.time import go_duration_text, parse_go_duration

PROGRAM = "hookrunner"


@dataclass(frozen=True)
class Flag:
    """One command-line flag. `kind` picks the parser and the type word shown in the usage text."""

    name: str
    # "bool", "string", "int", "list" (repeatable string), "header" (repeatable name=value), and for
    # hookrunner's own flags "duration" (Go's flag.Duration), "size" (bytes, 25MiB) and "cidrs".
    kind: str
    usage: str
    field: str
    default: Any = None
    #: hookrunner's own flags (not in the reference's usage text); `choices` limits a string's values.
    extension: bool = False
    choices: tuple[str, ...] = ()
    #: An int or size flag that must be more than 0.
    positive: bool = False

    @property
    def type_word(self) -> str:
        # Go's flag.UnquoteUsage: bools show nothing, flag.Var values show "value", int64 shows "int".
        return {
            "bool": "",
            "string": "string",
            "int": "int",
            "list": "value",
            "header": "value",
            "duration": "duration",
            "size": "size",
            "cidrs": "cidrs",
        }[self.kind]

    def default_text(self) -> str:
        """The ` (default ...)` suffix, left out for a zero value as Go leaves it out."""
        if self.kind in ("bool", "list", "header", "cidrs") or not self.default:
            return ""
        if self.kind == "string":
            return f" (default {go_quote(self.default)})"
        if self.kind == "duration":
            return f" (default {go_duration_text(self.default)})"
        if self.kind == "size":
            return f" (default {size_text(self.default)})"
        return f" (default {self.default})"


FLAGS: tuple[Flag, ...] = (
    Flag(
        "access-log",
        "bool",
        "log one line per request (status, size, time, host, method, URI), even without -verbose",
        "access_log",
        extension=True,
    ),
    Flag(
        "admin-addr",
        "string",
        "HOST:PORT of the admin listener (run history, its JSON API and status page; docs/history.md), "
        "on a socket of its own; a host that is not loopback needs -admin-token-file or -admin-insecure; "
        "empty means none",
        "admin_addr",
        "",
        extension=True,
    ),
    Flag(
        "admin-insecure",
        "bool",
        "let -admin-addr listen on an address that is not loopback without -admin-token-file",
        "admin_insecure",
        extension=True,
    ),
    Flag(
        "admin-token-file",
        "string",
        "file holding the token every admin request must send as Authorization: Bearer <token>",
        "admin_token_file",
        "",
        extension=True,
    ),
    Flag("cert", "string", "path to the HTTPS certificate pem file", "cert", "cert.pem"),
    Flag(
        "command-timeout",
        "duration",
        "stop a hook's command (its whole process group) after this long, e.g. 10m; "
        "a hook's command-timeout wins; 0 means no limit",
        "command_timeout",
        0.0,
        extension=True,
    ),
    Flag("cipher-suites", "string", "comma-separated list of supported TLS cipher suites", "cipher_suites"),
    Flag("debug", "bool", "show debug output", "debug"),
    Flag(
        "header",
        "header",
        "response header to return, specified in format name=value, "
        "use multiple times to set multiple headers",
        "headers",
    ),
    Flag(
        "hooks",
        "list",
        "path to the json file containing defined hooks the webhook should serve, "
        "use multiple times to load from different files",
        "hooks",
    ),
    Flag(
        "history-output",
        "size",
        "how much of a run's combined output (its last bytes) the run history keeps; 0 keeps none",
        "history_output",
        64 << 10,
        extension=True,
    ),
    Flag("hotreload", "bool", "watch hooks file for changes and reload them automatically", "hotreload"),
    Flag(
        "http-methods",
        "string",
        'set default allowed HTTP methods (ie. "POST"); separate methods with comma',
        "http_methods",
        "",
    ),
    Flag("ip", "string", "ip the webhook should serve hooks on", "ip", "0.0.0.0"),
    Flag("key", "string", "path to the HTTPS certificate private key pem file", "key", "key.pem"),
    Flag("list-cipher-suites", "bool", "list available TLS cipher suites", "list_cipher_suites"),
    Flag(
        "log-format",
        "string",
        "log line format: text (webhook's lines) or json (one object per line)",
        "log_format",
        "text",
        extension=True,
        choices=("text", "json"),
    ),
    Flag("logfile", "string", "send log output to a file; implicitly enables verbose logging", "logfile", ""),
    Flag(
        "max-body-size",
        "size",
        "largest request body accepted, in bytes or with a unit (25MiB, 512KiB, 1GB); "
        "a larger one is answered 413 and runs nothing; 0 means no limit",
        "max_body_size",
        25 << 20,
        extension=True,
    ),
    Flag(
        "max-concurrent-commands",
        "int",
        "most hook commands running at once, all hooks together; the others wait; 0 means no limit",
        "max_concurrent_commands",
        0,
        extension=True,
    ),
    Flag(
        "max-multipart-mem",
        "int",
        "maximum memory in bytes for parsing multipart form data before disk caching",
        "max_multipart_mem",
        1 << 20,
    ),
    Flag(
        "metrics",
        "bool",
        "serve Prometheus metrics on /metrics (GET); /metrics then wins over a hook of that name",
        "metrics",
        extension=True,
    ),
    Flag(
        "nopanic",
        "bool",
        "do not panic if hooks cannot be loaded when webhook is not running in verbose mode",
        "nopanic",
    ),
    Flag("pidfile", "string", "create PID file at the given path", "pidfile", ""),
    Flag("port", "int", "port the webhook should serve hooks on", "port", 9000),
    Flag(
        "rate-limit-burst",
        "int",
        "with -rate-limit-enabled, how many requests a client may send at once before -rate-limit-rps "
        "holds it back",
        "rate_limit_burst",
        10,
        extension=True,
        positive=True,
    ),
    Flag(
        "rate-limit-enabled",
        "bool",
        "limit each client's hook requests (by address; with -trusted-proxies, the forwarded client's) "
        "to -rate-limit-rps a second, answering 429 with Retry-After past it",
        "rate_limit_enabled",
        extension=True,
    ),
    Flag(
        "rate-limit-rps",
        "int",
        "with -rate-limit-enabled, each client's hook requests a second, on average",
        "rate_limit_rps",
        100,
        extension=True,
        positive=True,
    ),
    Flag(
        "read-timeout",
        "duration",
        "close a connection whose request (headers and body) is not received within this long; "
        "0 means no limit",
        "read_timeout",
        30.0,
        extension=True,
    ),
    Flag("secure", "bool", "use HTTPS instead of HTTP", "secure"),
    Flag("setgid", "int", "set group ID after opening listening port; must be used with setuid", "setgid", 0),
    Flag("setuid", "int", "set user ID after opening listening port; must be used with setgid", "setuid", 0),
    Flag(
        "shutdown-timeout",
        "duration",
        "on SIGTERM or SIGINT, how long to wait for requests and commands still running "
        "before killing the commands' process groups",
        "shutdown_timeout",
        25.0,
        extension=True,
    ),
    Flag(
        "state-dir",
        "string",
        "folder of the run journal: accepted runs are written there before they are answered, and runs "
        "a stopped or crashed hookrunner left unfinished are run again at start; empty means no journal",
        "state_dir",
        "",
        extension=True,
    ),
    Flag(
        "state-done-age",
        "duration",
        "with -state-url, how long after its end a finished run's row stays in the database before it is "
        "deleted (and the history's events are folded by the run owners when no admin listener does)",
        "state_done_age",
        600.0,
        extension=True,
    ),
    Flag(
        "state-grace",
        "duration",
        "with -state-url, how long past a run's lease another replica waits before it takes the run over",
        "state_grace",
        10.0,
        extension=True,
    ),
    Flag(
        "state-keep",
        "int",
        "how many finished runs the run journal keeps (the older ones are deleted), and how many run "
        "records the run history keeps (-admin-addr)",
        "state_keep",
        1000,
        extension=True,
    ),
    Flag(
        "state-keep-age",
        "duration",
        "run records older than this are deleted from the run history (-admin-addr); 0 means no limit",
        "state_keep_age",
        0.0,
        extension=True,
    ),
    Flag(
        "state-lease",
        "duration",
        "with -state-url, how long a replica holds a run it does not renew; a replica that cannot renew "
        "its runs' leases in time kills their commands",
        "state_lease",
        30.0,
        extension=True,
    ),
    Flag(
        "state-replica",
        "string",
        "with -state-url, this replica's name, which names the runs it claims and its history events; "
        "empty means the host name (the pod's name in Kubernetes)",
        "state_replica",
        "",
        extension=True,
    ),
    Flag(
        "state-url",
        "string",
        "postgresql:// URL of the run state shared by every replica (caps, queues, coalescing, journal and "
        "history); empty means the embedded state (-state-dir)",
        "state_url",
        "",
        extension=True,
    ),
    Flag(
        "state-url-file",
        "string",
        "file holding -state-url (a Kubernetes Secret), read at start",
        "state_url_file",
        "",
        extension=True,
    ),
    Flag(
        "socket",
        "string",
        "path of a Unix socket to listen on (e.g. /tmp/webhook.sock) instead of the ip and port, "
        "which are then ignored",
        "socket",
        "",
    ),
    Flag(
        "stream-buffer",
        "size",
        "the most output held for the client of a hook with stream-command-output; "
        "a client further behind is cut off (the command runs on)",
        "stream_buffer",
        4 << 20,
        extension=True,
        positive=True,
    ),
    Flag(
        "stream-write-timeout",
        "duration",
        "cut off the client of a hook with stream-command-output when writing a piece of its answer "
        "takes longer than this (the command runs on); 0 means no limit",
        "stream_write_timeout",
        30.0,
        extension=True,
    ),
    Flag("template", "bool", "parse hooks file as a Go template", "template"),
    Flag("tls-min-version", "string", "minimum TLS version (1.0, 1.1, 1.2, 1.3)", "tls_min_version", "1.2"),
    Flag(
        "trusted-proxies",
        "cidrs",
        "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For is believed for "
        "ip-whitelist and the request remote-addr; repeatable",
        "trusted_proxies",
        extension=True,
    ),
    Flag(
        "urlprefix",
        "string",
        "url prefix to use for served hooks (protocol://yourserver:port/PREFIX/:hook-id)",
        "urlprefix",
        "hooks",
    ),
    Flag(
        "validate",
        "bool",
        "check the hooks files (with -template, as templates) and report every problem, then exit "
        "0 if there is none, 1 otherwise, without serving",
        "validate",
        extension=True,
    ),
    Flag("verbose", "bool", "show verbose output", "verbose"),
    Flag("version", "bool", "display webhook version and quit", "version"),
    Flag(
        "worker-class",
        "string",
        "how a worker serves connections: gevent (greenlets on one event loop) or gthread (a pool of "
        "64 threads); commands run on threads either way (docs/operations.md)",
        "worker_class",
        "gevent",
        extension=True,
        choices=("gevent", "gthread"),
    ),
    Flag(
        "workers",
        "int",
        "worker processes serving requests; more use more CPU cores, but each has its own "
        "hooks registry, concurrency limits and metrics (docs/operations.md)",
        "workers",
        1,
        extension=True,
    ),
    Flag("x-request-id", "bool", "use X-Request-Id header, if present, as request ID", "x_request_id"),
    Flag(
        "x-request-id-limit",
        "int",
        "truncate X-Request-Id header to limit; default no limit",
        "x_request_id_limit",
        0,
    ),
)

_BY_NAME = {flag.name: flag for flag in FLAGS}


def usage_text(program: str = PROGRAM, extensions: bool = True) -> str:
    """`Usage of <program>:` and every flag, sorted, in the layout of Go's flag.PrintDefaults.

    With `extensions=False` hookrunner's own flags are left out (the reference's text, for comparison).
    """
    lines = [f"Usage of {program}:"]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        if flag.extension and not extensions:
            continue
        head = f"  -{flag.name}"
        if flag.type_word:
            head += f" {flag.type_word}"
        # Go puts a one-letter bool's description on the same line; every webhook flag is longer.
        head += "\t" if len(head) <= 4 else "\n    \t"
        lines.append(head + flag.usage.replace("\n", "\n    \t") + flag.default_text())
    return "\n".join(lines) + "\n"


def parse_duration_flag(text: str) -> float:
    """A Go duration (`30s`, `5m`, `1h30m`) as seconds; hookrunner's duration flags are never negative."""
    try:
        seconds = parse_go_duration(text)
    except ValueError as err:
        raise FlagValueError("parse error") from err
    if seconds < 0:
        raise FlagValueError("must not be negative")
    return seconds


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
}
_SIZE = re.compile(r"([0-9]+)\s*([a-zA-Z]*)")


def parse_size(text: str) -> int:
    """Bytes from `26214400`, `25MiB`, `512KiB`, `1GB` (KB/MB/GB are powers of 1000, the others of 1024)."""
    try:
        value = parse_go_int(text)  # a plain number, as an int flag takes it
    except FlagValueError:
        match = _SIZE.fullmatch(text.strip())
        if match is None or match.group(2).lower() not in _SIZE_UNITS:
            raise
        value = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value < 0:
        raise FlagValueError("must not be negative")
    if value > INT64_MAX:
        raise FlagValueError("value out of range")
    return value


def size_text(size: int) -> str:
    """The shortest exact binary-unit spelling of a size: 26214400 -> `25MiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def parse_cidrs(text: str) -> list[str]:
    """Addresses or networks separated by commas or spaces; a bare address is a network of one."""
    networks = []
    for item in re.split(r"[\s,]+", text.strip()):
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise FlagValueError(f"{item} is not an IP address or CIDR") from None
    return networks


def _fail(message: str, program: str) -> UsageError:
    return UsageError(f"{message}\n{usage_text(program)}", exit_code=2)


def parse_args(argv: Sequence[str], program: str = PROGRAM) -> Config:
    """Parse argv (without the program name) as Go's flag.Parse would, into a frozen Config.

    Raises UsageError whose message is everything Go would print to stderr; exit code 0 for -h/-help.
    Like Go, parsing stops at the first non-flag argument or after `--`; what follows is ignored.
    """
    values: dict[str, Any] = {}
    hooks: list[str] = []
    headers: list[Header] = []
    proxies: list[str] = []
    args = list(argv)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        minuses = 1
        if arg[1] == "-":
            minuses = 2
            if len(arg) == 2:
                args.pop(0)
                break
        name = arg[minuses:]
        if not name or name[0] in "-=":
            raise _fail(f"bad flag syntax: {arg}", program)
        args.pop(0)
        has_value = "=" in name
        value = ""
        if has_value:
            name, value = name.split("=", 1)
        flag = _BY_NAME.get(name)
        if flag is None:
            if name in ("h", "help"):
                raise UsageError(usage_text(program), exit_code=0)
            raise _fail(f"flag provided but not defined: -{name}", program)
        if flag.kind == "bool":
            # A bool never takes the next argument: `-verbose false` stops parsing at `false`.
            try:
                values[flag.field] = parse_go_bool(value) if has_value else True
            except FlagValueError as err:
                raise _fail(f"invalid boolean value {go_quote(value)} for -{name}: {err}", program) from None
            continue
        if not has_value:
            if not args:
                raise _fail(f"flag needs an argument: -{name}", program)
            value = args.pop(0)
        try:
            if flag.kind == "int":
                values[flag.field] = parse_go_int(value)
                if flag.positive and values[flag.field] <= 0:
                    raise FlagValueError("must be positive")
            elif flag.kind == "list":
                hooks.append(value)
            elif flag.kind == "duration":
                values[flag.field] = parse_duration_flag(value)
            elif flag.kind == "size":
                values[flag.field] = parse_size(value)
                if flag.positive and values[flag.field] <= 0:
                    raise FlagValueError("must be positive")
            elif flag.kind == "cidrs":
                proxies.extend(parse_cidrs(value))
            elif flag.kind == "header":
                header_name, sep, header_value = value.partition("=")
                if not sep:
                    raise FlagValueError("header flag must be in name=value format")
                headers.append(Header(header_name, header_value))
            else:
                if flag.choices and value not in flag.choices:
                    raise FlagValueError("must be one of " + ", ".join(flag.choices))
                values[flag.field] = value
        except FlagValueError as err:
            raise _fail(f"invalid value {go_quote(value)} for flag -{name}: {err}", program) from None
    return Config(**values, hooks=tuple(hooks), headers=tuple(headers), trusted_proxies=tuple(proxies))
