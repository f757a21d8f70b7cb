"""`man hookrunner`: the manual page, written from the flags table so that it cannot drift from `-help`.

`python -m hookrunner.manpage > hookrunner.1` writes it (scripts/deb does, when it builds the package). Every
flag comes from `flags.FLAGS` with the usage text and default that `-help` prints; the signals, exit
statuses, files and hook fields are the ones docs/operations.md and docs/limits.md describe.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from hookrunner.cli import WEBHOOK_COMPATIBLE, hookrunner_version
from hookrunner.flags import FLAGS, Flag

#: (signal, what it does), as docs/operations.md's "Signals" table says.
SIGNALS: tuple[tuple[str, str], ...] = (
    ("SIGHUP, SIGUSR1", "Reload every hooks file, as webhook does. The process keeps running."),
    (
        "SIGTERM, SIGINT",
        "Stop: close the listening socket, let requests in flight and running commands finish for up to "
        "-shutdown-timeout, then end every process of each command that is left, remove the pidfile and "
        "the -socket file, and exit 0.",
    ),
    ("SIGQUIT, or a second SIGINT", "Stop at once; running commands are left running."),
    ("SIGUSR2", "Ignored."),
)

#: (status, when), as docs/operations.md's "Exit status" table says.
EXIT_STATUSES: tuple[tuple[str, str], ...] = (
    ("0", "-h, -version, -list-cipher-suites; a stop by SIGTERM or SIGINT."),
    ("1", "Cannot listen, drop privileges or open -logfile; -setuid without -setgid or the reverse; "
          "a bad TLS version, cipher suite, certificate or key; the pidfile names a running process; a "
          "duplicate hook id at start-up; no hooks loaded without -verbose or -nopanic."),
    ("2", "An unknown flag or a bad value (the message and the usage on stderr)."),
)

#: (path, what it is) in the Debian package's layout (scripts/deb).
FILES: tuple[tuple[str, str], ...] = (
    ("/etc/webhook.conf", "The hooks file that hookrunner.service serves, as Debian's webhook.service does."),
    ("/etc/default/hookrunner", "HOOKRUNNER_OPTS: the flags hookrunner.service adds (-verbose as shipped)."),
    ("/var/lib/hookrunner", "The run journal (-state-dir) of hookrunner.service: accepted runs survive a "
                            "restart."),
    ("/lib/systemd/system/hookrunner.service", "The service, a drop-in for Debian's webhook.service."),
    ("/lib/systemd/system/hookrunner.socket", "Opt-in socket activation on port 9000."),
    ("/usr/share/doc/hookrunner", "The documentation: compatibility, operations, limits, history."),
)

#: hookrunner's own hook fields (webhook ignores unknown keys, so a hooks file stays portable).
HOOK_FIELDS: tuple[tuple[str, str], ...] = (
    ("command-timeout", "A Go duration (30s, 5m) or seconds: the command is ended after it; overrides "
                        "-command-timeout."),
    ("max-concurrency", "At most this many runs of the hook at once; 0 is unlimited."),
    ("max-queue", "Runs waiting for a free slot, first in, first out; past it the answer is 429."),
    ("coalesce", "true: pushes that arrive while a run waits are folded into that one run."),
    ("coalesce-by", "A source/name pair (payload ref): coalescing per value, one waiting run for each; "
                    "implies coalesce."),
    ("retry-after", "The Retry-After seconds of a 429 (default 5)."),
    ("replay", "false: the run journal does not run the hook again after a restart."),
    ("stream-command-output", "true (soulteary/webhook's field): the command's output is the answer, sent as "
                              "it is printed; see -stream-write-timeout and -stream-buffer."),
)


def escape(text: str) -> str:
    """Text as roff reads it literally: backslashes doubled, every hyphen a minus sign, and a line that
    would start with a control character (`.` or `'`) guarded with the zero-width `\\&`."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = [("\\&" + line) if line[:1] in (".", "'") else line for line in text.split("\n")]
    return "\n".join(lines)


def _option(flag: Flag) -> list[str]:
    name = escape(flag.name)
    head = f".BI \\-{name} \" {flag.type_word}\"" if flag.type_word else f".B \\-{name}"
    usage = " ".join(flag.usage.split())
    body = escape(usage + flag.default_text())
    if flag.extension:
        body += "\n.I (hookrunner's own)"
    return [".TP", head, body]


def _table(rows: Sequence[tuple[str, str]], bold: bool = True) -> list[str]:
    lines: list[str] = []
    for key, text in rows:
        lines += [".TP", (".B " if bold else "") + escape(key), escape(text)]
    return lines


def render(version: str, date: str) -> str:
    """The page in man(7) macros."""
    lines = [
        f'.TH HOOKRUNNER 1 "{date}" "hookrunner {escape(version)}" "User Commands"',
        ".SH NAME",
        "hookrunner \\- run commands from HTTP hooks; a drop\\-in replacement for webhook",
        ".SH SYNOPSIS",
        ".B hookrunner",
        "[\\fIoptions\\fR]",
        ".SH DESCRIPTION",
        escape(
            "hookrunner serves HTTP endpoints (hooks) that run commands, and takes the flags and the hooks "
            f"files (JSON, YAML, Go templates) of adnanh/webhook {WEBHOOK_COMPATIBLE}: the same answers, and "
            "the same argv and environment reaching each command. A command gets an argument vector, never "
            "a shell string."
        ),
        ".PP",
        escape(
            "Flags take one dash or two, as Go's flag package reads them. Flags marked as hookrunner's own "
            "are not in webhook."
        ),
        ".SH OPTIONS",
    ]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        lines += _option(flag)
    lines += [".SH HOOK FIELDS", escape(
        "Besides every field of webhook's hook definition, a hook may have these (webhook ignores them):")]
    lines += _table(HOOK_FIELDS)
    lines += [".SH SIGNALS", escape("Send signals to the main process (the -pidfile pid).")]
    lines += _table(SIGNALS)
    lines += [".SH EXIT STATUS"]
    lines += _table(EXIT_STATUSES)
    lines += [".SH FILES"]
    lines += _table(FILES, bold=False)
    lines += [
        ".SH SEE ALSO",
        ".BR systemctl (1),",
        ".BR systemd.socket (5),",
        escape("and /usr/share/doc/hookrunner."),
    ]
    return "\n".join(lines) + "\n"


def build_date() -> str:
    """The build's date: SOURCE_DATE_EPOCH's when set (dpkg sets it from debian/changelog), so that the
    page is the same bytes in every build of one version; else today's."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    stamp = int(epoch) if epoch and epoch.isdigit() else int(time.time())
    return time.strftime("%Y-%m-%d", time.gmtime(stamp))


def main() -> int:
    sys.stdout.write(render(hookrunner_version(), build_date()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
