"""Go's regexp.Compile on RE2: the patterns Go 1.19 accepts, its error texts, and its reading of strings
that are not UTF-8. Go's regexp syntax is RE2's, with a few differences in what is rejected and how."""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import Any


@functools.cache
def _re2() -> tuple[ModuleType, Any]:
    """google-re2 and its options, loaded with the first pattern: a server whose hooks have no regex
    never holds it (about 2.5 MiB per process; docs/performance.md, memory at rest)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would otherwise print every bad pattern on stderr
    # RE2's default 8 MiB budget refuses programs Go compiles (`\p{^L}{1000}`); memory is used lazily.
    options.max_mem = 64 << 20
    return re2, options


def load_engine() -> None:
    """Load RE2 now, for a process that may lose access to its files later (-setuid)."""
    _re2()

# RE2's error codes, reworded as Go's regexp/syntax words them.
_RE2_TO_GO = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid named capture group": "invalid named capture",
    "invalid repetition size": "invalid repeat count",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "pattern too large - compile failed": "expression too large",
}


def _go_regexp_error(code: str, expr: str) -> str:
    return f"error parsing regexp: {code}: `{expr}`"


def _go_only_rejection(pattern: str) -> tuple[int, str] | None:
    """Syntax RE2 accepts but Go 1.19's regexp refuses: `\\C` and named groups written `(?<name>`.

    Returns where the first one starts and Go's error for it.
    """
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            if pattern[i + 1] == "C":
                return i, _go_regexp_error("invalid escape sequence", "\\C")
            if pattern[i + 1] == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:
                    i = end + 2
                    continue
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1  # a leading ] is a literal
            continue
        if pattern.startswith("(?<", i):
            return i, _go_regexp_error("invalid or unsupported Perl syntax", "(?<")
        i += 1
    return None


_REPEAT_AT_END = re.compile(r"\{([0-9]+)(,([0-9]*))?\}\??$")


def _bad_repeat_count(expr: str) -> str | None:
    # Go checks a {n,m} count before it checks for a stacked repetition; RE2 does it the other way round.
    found = _REPEAT_AT_END.search(expr)
    if found is None:
        return None
    low = int(found.group(1))
    high = low if found.group(2) is None else int(found.group(3)) if found.group(3) else -1
    if low > 1000 or high > 1000 or (high >= 0 and low > high):
        return found.group(0).rstrip("?")
    return None


def _re2_error(pattern: str) -> str | None:
    """RE2's verdict on a pattern, worded as Go's regexp.Compile words it; None when it compiles."""
    re2, options = _re2()
    try:
        re2.compile(pattern, options)
    except re2.error as exc:
        message = exc.args[0] if exc.args else ""
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        code, _, expr = str(message).partition(": ")
        if code == "trailing \\":
            return _go_regexp_error("trailing backslash at end of expression", "")
        if code == "invalid perl operator" and expr.startswith("(?<"):
            expr = "(?<"
        if code == "bad repetition operator":
            count = _bad_repeat_count(expr)
            if count is not None:
                return _go_regexp_error("invalid repeat count", count)
        if code == "invalid repetition size" and _bad_repeat_count(expr) is not None:
            expr = expr.rstrip("?")  # Go quotes the count without a non-greedy `?`
        return _go_regexp_error(_RE2_TO_GO.get(code, code), expr)
    return None


def compile_go_regexp(pattern: str) -> tuple[Any, str | None]:
    """The compiled pattern, or None and the error Go's regexp.Compile would report."""
    if re.search("[\ud800-\udfff]", pattern):
        return None, _go_regexp_error("invalid UTF-8", "\ufffd")
    rejection = _go_only_rejection(pattern)
    if rejection is not None:
        # Go parses left to right: an error RE2 finds before that point is the one Go reports first
        # (except an unclosed group or class, which only the cut made unclosed).
        where, message = rejection
        earlier = _re2_error(pattern[:where])
        if earlier is not None and not earlier.startswith("error parsing regexp: missing closing "):
            # The same error, quoted with the context the whole pattern gives it.
            return None, _re2_error(pattern) or earlier
        return None, message
    error = _re2_error(pattern)
    if error is not None:
        return None, error
    re2, options = _re2()
    return re2.compile(pattern, options), None


def regexp_subject(arg: str) -> str:
    # Go reads a byte that is not UTF-8 as U+FFFD (which `.` matches); RE2 would refuse to match it.
    return re.sub("[\udc80-\udcff]", "\ufffd", arg)
