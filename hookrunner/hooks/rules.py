"""Trigger rules: and / or / not / match, decoded from a hooks file once and evaluated per request.

Semantics, error texts and edge cases follow webhook 2.8 as built with Go 1.19 (the Debian reference).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from hookrunner.errors import HookrunnerError, ParameterNodeError, RuleError, SignatureError
from hookrunner.golang.decode import fields, go_bool, go_string, type_error
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.params import argument_value
from hookrunner.hooks.request import Request
from hookrunner.ops.log import log

__all__ = [
    "AndRule",
    "EmptyRule",
    "MatchRule",
    "NotRule",
    "OrRule",
    "Outcome",
    "Rule",
    "extract_signatures",
    "go_string",
    "parse_rule",
    "parse_scalr_date",
]

# Match types, as webhook spells them.
MATCH_VALUE = "value"
MATCH_REGEX = "regex"
MATCH_HMAC_SHA1 = "payload-hmac-sha1"
MATCH_HMAC_SHA256 = "payload-hmac-sha256"
MATCH_HMAC_SHA512 = "payload-hmac-sha512"
MATCH_HASH_SHA1 = "payload-hash-sha1"
MATCH_HASH_SHA256 = "payload-hash-sha256"
MATCH_HASH_SHA512 = "payload-hash-sha512"
MATCH_IP_WHITELIST = "ip-whitelist"
MATCH_SCALR_SIGNATURE = "scalr-signature"
#: Every match type, in the order webhook's documentation lists them.
MATCH_TYPES = (
    MATCH_VALUE, MATCH_REGEX, MATCH_HMAC_SHA1, MATCH_HMAC_SHA256, MATCH_HMAC_SHA512,
    MATCH_HASH_SHA1, MATCH_HASH_SHA256, MATCH_HASH_SHA512, MATCH_IP_WHITELIST, MATCH_SCALR_SIGNATURE,
)
#: The types that check a signature made with the rule's `secret`.
SIGNATURE_TYPES = frozenset(
    {
        MATCH_HMAC_SHA1, MATCH_HMAC_SHA256, MATCH_HMAC_SHA512,
        MATCH_HASH_SHA1, MATCH_HASH_SHA256, MATCH_HASH_SHA512, MATCH_SCALR_SIGNATURE,
    }
)
#: The deprecated payload-hash-* types and the payload-hmac-* types they are evaluated as.
DEPRECATED_TWINS = {
    MATCH_HASH_SHA1: MATCH_HMAC_SHA1,
    MATCH_HASH_SHA256: MATCH_HMAC_SHA256,
    MATCH_HASH_SHA512: MATCH_HMAC_SHA512,
}


def _go_bytes(s: str) -> bytes:
    # Request strings keep non-UTF-8 bytes as surrogate escapes (see params); Go sees the raw bytes.
    return s.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------------------------------------
# The rule tree


#: Go's (bool, error) pair: a rule can be true *and* carry an error (`not` over a missing parameter).
Outcome = tuple[bool, HookrunnerError | None]


class Rule(ABC):
    """One node of a trigger rule; immutable and shared by every request."""

    @abstractmethod
    def check(self, req: Request) -> Outcome:
        """webhook's Evaluate: the result and the error, exactly as Go returns them together.

        webhook triggers the hook when the result is true and the error is only a missing parameter
        (ParameterNodeError, which it logs); any other error is a 500.
        """

    def evaluate(self, req: Request) -> bool:
        """The result; raises the error if there is one (losing a true result that came with it)."""
        ok, error = self.check(req)
        if error is not None:
            raise error
        return ok

    @abstractmethod
    def describe(self) -> str:
        """A short human-readable form of the rule, for logs and explanations."""


@dataclass(frozen=True)
class EmptyRule(Rule):
    """A rule object with none of and/or/not/match set (`{}`): webhook evaluates it to false."""

    def check(self, req: Request) -> Outcome:
        return False, None

    def describe(self) -> str:
        return "{}"


@dataclass(frozen=True)
class AndRule(Rule):
    """True when every clause is; stops at the first false clause and passes any error up."""

    rules: tuple[Rule, ...] = ()

    def check(self, req: Request) -> Outcome:
        for rule in self.rules:
            ok, error = rule.check(req)
            if error is not None:
                return False, error
            if not ok:
                return False, None
        return True, None

    def describe(self) -> str:
        return "and(" + ", ".join(rule.describe() for rule in self.rules) + ")"


@dataclass(frozen=True)
class OrRule(Rule):
    """True when any clause is. A missing parameter, and with soft failures a bad signature, is skipped.

    A skipped clause still counts with the result it came with, as in webhook.
    """

    rules: tuple[Rule, ...] = ()

    def check(self, req: Request) -> Outcome:
        for rule in self.rules:
            ok, error = rule.check(req)
            if error is not None and not isinstance(error, ParameterNodeError):
                if not (req.allow_signature_errors and isinstance(error, SignatureError)):
                    return False, error
            if ok:
                return True, None
        return False, None

    def describe(self) -> str:
        return "or(" + ", ".join(rule.describe() for rule in self.rules) + ")"


@dataclass(frozen=True)
class NotRule(Rule):
    """The negation of one clause, with the clause's error passed along (so an error negates to true)."""

    rule: Rule = field(default_factory=EmptyRule)

    def check(self, req: Request) -> Outcome:
        ok, error = self.rule.check(req)
        return not ok, error

    def describe(self) -> str:
        return f"not({self.rule.describe()})"


@dataclass(frozen=True)
class MatchRule(Rule):
    """A leaf: compare one request value (or the peer address, or the body's signature) with the rule."""

    type: str = ""
    regex: str = ""
    secret: str = field(default="", repr=False)
    value: str = field(default="", repr=False)
    parameter: Argument = field(default_factory=Argument)
    ip_range: str = ""
    # Prepared once at load time. webhook compiles and parses these on every request and only fails
    # when it reaches them, so a bad regex or CIDR is kept as an error to raise at that moment.
    _pattern: Any = field(default=None, init=False, repr=False, compare=False)
    _pattern_error: str | None = field(default=None, init=False, repr=False, compare=False)
    _networks: tuple[_IPNet | str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.type == MATCH_REGEX:
            pattern, error = _compile_go_regexp(self.regex)
            object.__setattr__(self, "_pattern", pattern)
            object.__setattr__(self, "_pattern_error", error)
        elif self.type == MATCH_IP_WHITELIST:
            object.__setattr__(self, "_networks", _parse_ip_ranges(self.ip_range))

    def check(self, req: Request) -> Outcome:
        try:
            return self._match(req), None
        except HookrunnerError as error:
            return False, error

    def _match(self, req: Request) -> bool:
        if self.type == MATCH_IP_WHITELIST:
            return _check_ip_whitelist(req.remote_addr, self._networks)
        if self.type == MATCH_SCALR_SIGNATURE:
            return _check_scalr_signature(req, self.secret)

        # Every other type reads its parameter first, even an unknown type: a missing value is an error.
        arg = argument_value(self.parameter, req)
        kind = self.type
        if kind == MATCH_VALUE:
            return hmac.compare_digest(_go_bytes(arg), _go_bytes(self.value))
        if kind == MATCH_REGEX:
            if self._pattern_error is not None:
                raise RuleError(self._pattern_error)
            return self._pattern.search(_regexp_subject(arg)) is not None
        if kind in DEPRECATED_TWINS:
            log.output(_DEPRECATED_HASHES[kind])
            kind = DEPRECATED_TWINS[kind]
        if kind in _HMAC_TYPES:
            digest, prefix = _HMAC_TYPES[kind]
            _check_payload_signature(req.body, self.secret, arg, digest, prefix)
            return True
        return False

    def describe(self) -> str:
        if self.type == MATCH_IP_WHITELIST:
            return f"match ip-whitelist {self.ip_range!r}"
        if self.type == MATCH_SCALR_SIGNATURE:
            return "match scalr-signature"
        target = f"{self.parameter.source}:{self.parameter.name}"
        if self.type == MATCH_VALUE:
            return f"match value {target}"
        if self.type == MATCH_REGEX:
            return f"match regex {self.regex!r} {target}"
        return f"match {self.type} {target}"


_DEPRECATED_HASHES = {
    MATCH_HASH_SHA1: "warn: use of deprecated option payload-hash-sha1; use payload-hmac-sha1 instead",
    MATCH_HASH_SHA256: "warn: use of deprecated option payload-hash-sha256: use payload-hmac-sha256 instead",
    MATCH_HASH_SHA512: "warn: use of deprecated option payload-hash-sha512: use payload-hmac-sha512 instead",
}
_HMAC_TYPES: dict[str, tuple[Callable[..., Any], str]] = {
    MATCH_HMAC_SHA1: (hashlib.sha1, "sha1="),
    MATCH_HMAC_SHA256: (hashlib.sha256, "sha256="),
    MATCH_HMAC_SHA512: (hashlib.sha512, "sha512="),
}


# --------------------------------------------------------------------------------------------------------
# Payload signatures


def extract_signatures(source: str, prefix: str) -> list[str]:
    """The candidate signatures in a header value, as webhook's ExtractSignatures finds them.

    Without a comma the prefix is optional; with commas only the parts carrying the prefix count.
    """
    if "," in source:
        return [part[len(prefix) :] for part in source.split(",") if part.startswith(prefix)]
    return [source[len(prefix) :] if source.startswith(prefix) else source]


def _check_payload_signature(
    body: bytes, secret: str, header: str, digest: Callable[..., Any], prefix: str
) -> None:
    if secret == "":
        raise RuleError("signature validation secret can not be empty")
    signatures = extract_signatures(header, prefix)
    expected = hmac.new(_go_bytes(secret), body, digest).hexdigest().encode("ascii")
    # Check every candidate, so the time taken does not depend on which one matched.
    matched = False
    for signature in signatures:
        matched |= hmac.compare_digest(_go_bytes(signature), expected)
    if not matched:
        raise SignatureError(signatures=signatures, empty_payload=len(body) == 0)


def _check_scalr_signature(req: Request, secret: str) -> bool:
    signature = req.headers.get("X-Signature")
    date_header = req.headers.get("Date")
    if not isinstance(signature, str) or not isinstance(date_header, str):
        return False
    if secret == "":
        raise RuleError("signature validation signing key can not be empty")
    mac = hmac.new(_go_bytes(secret), req.body + _go_bytes(date_header), hashlib.sha1)
    if not hmac.compare_digest(_go_bytes(signature), mac.hexdigest().encode("ascii")):
        raise SignatureError(signature=signature)
    sent = parse_scalr_date(date_header)
    if abs(time.time() - sent) > 300:
        raise SignatureError(signature="outdated")
    return True


# --- Go's time.Parse for the one layout scalr uses: "Mon 02 Jan 2006 15:04:05 MST" ---------------------

SCALR_DATE_LAYOUT = "Mon 02 Jan 2006 15:04:05 MST"
_SHORT_DAYS = (b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat")
_SHORT_MONTHS = tuple(m.encode() for m in "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())
# (literal text before the element, the element as the layout spells it)
_SCALR_CHUNKS = (
    ("", "Mon"), (" ", "02"), (" ", "Jan"), (" ", "2006"),
    (" ", "15"), (":", "04"), (":", "05"), (" ", "MST"),
)


class _TimeParseError(Exception):
    def __init__(self, value_elem: bytes, layout_elem: str = "", message: str = "") -> None:
        super().__init__(message)
        self.value_elem = value_elem
        self.layout_elem = layout_elem
        self.message = message


def _time_quote(raw: bytes) -> str:
    # time.quote: printable ASCII as is (with " and \ escaped); every other byte as \xNN.
    out = ['"']
    for b in raw:
        if b >= 0x80 or b < 0x20:
            out.append(f"\\x{b:02x}")
        elif b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        else:
            out.append(chr(b))
    out.append('"')
    return "".join(out)


def _is_digit(s: bytes, i: int) -> bool:
    return i < len(s) and 0x30 <= s[i] <= 0x39


def _getnum(s: bytes, fixed: bool) -> tuple[int, bytes]:
    if not _is_digit(s, 0):
        raise _TimeParseError(s)
    if not _is_digit(s, 1):
        if fixed:
            raise _TimeParseError(s)
        return s[0] - 0x30, s[1:]
    return (s[0] - 0x30) * 10 + s[1] - 0x30, s[2:]


def _same_letter(a: int, b: int) -> bool:
    # time.match: equal bytes, or the same ASCII letter in another case.
    return a == b or ((a | 0x20) == (b | 0x20) and 0x61 <= (a | 0x20) <= 0x7A)


def _lookup(table: tuple[bytes, ...], s: bytes) -> tuple[int, bytes]:
    for index, name in enumerate(table):
        if len(s) >= len(name) and all(_same_letter(a, b) for a, b in zip(s, name, strict=False)):
            return index, s[len(name) :]
    raise _TimeParseError(s)


def _skip(value: bytes, prefix: bytes) -> bytes:
    # A space in the layout matches one or more spaces in the value.
    while prefix:
        if prefix[0] == 0x20:
            if value and value[0] != 0x20:
                raise _TimeParseError(value)
            prefix = prefix.lstrip(b" ")
            value = value.lstrip(b" ")
            continue
        if not value or value[0] != prefix[0]:
            raise _TimeParseError(value)
        prefix, value = prefix[1:], value[1:]
    return value


def _signed_offset_len(s: bytes) -> int:
    if not s or s[:1] not in (b"+", b"-"):
        return 0
    digits = len(s[1:]) - len(s[1:].lstrip(b"0123456789"))
    if digits == 0 or int(s[1 : 1 + digits]) > 23:
        return 0
    return 1 + digits


def _time_zone_len(s: bytes) -> int:
    """Go's parseTimeZone: the length of a zone abbreviation at the start of s, 0 if there is none."""
    if len(s) < 3:
        return 0
    if s[:4] in (b"ChST", b"MeST"):
        return 4
    if s[:3] == b"GMT":
        return 3 + _signed_offset_len(s[3:])
    if s[:1] in (b"+", b"-"):
        return _signed_offset_len(s)
    upper = 0
    while upper < 6 and upper < len(s) and 0x41 <= s[upper] <= 0x5A:
        upper += 1
    if upper == 3:
        return 3
    if upper == 4 and (s[3] == 0x54 or s[:4] == b"WITA"):
        return 4
    if upper == 5 and s[4] == 0x54:
        return 5
    return 0


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    # Days since 1970-01-01 in the proleptic Gregorian calendar (Go's year 0 included).
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _local_zone_offset(name: str) -> int | None:
    # Go gives a zone abbreviation its offset only when the local zone uses that name.
    if name == time.tzname[0]:
        return -time.timezone
    if time.daylight and name == time.tzname[1]:
        return -time.altzone
    return None


def parse_scalr_date(text: str) -> float:
    """Seconds since the epoch of a scalr `Date` header; raises RuleError with Go's time.Parse message."""
    raw = _go_bytes(text)
    try:
        return _parse_scalr_date(raw)
    except _TimeParseError as exc:
        head = f"parsing time {_time_quote(raw)}"
        if exc.message:
            raise RuleError(head + exc.message) from None
        raise RuleError(
            f"{head} as {_time_quote(SCALR_DATE_LAYOUT.encode())}: cannot parse "
            f"{_time_quote(exc.value_elem)} as {_time_quote(exc.layout_elem.encode())}"
        ) from None


def _parse_scalr_date(value: bytes) -> float:
    day = month = year = hour = minute = sec = 0
    nsec = 0
    zone_name = ""
    for prefix, elem in _SCALR_CHUNKS:
        try:
            value = _skip(value, prefix.encode())
        except _TimeParseError as exc:
            exc.layout_elem = prefix
            raise
        range_error = ""
        try:
            if elem == "Mon":
                _, value = _lookup(_SHORT_DAYS, value)
            elif elem == "02":
                day, value = _getnum(value, True)
            elif elem == "Jan":
                index, value = _lookup(_SHORT_MONTHS, value)
                month = index + 1
            elif elem == "2006":
                if len(value) < 4 or not _is_digit(value, 0):
                    raise _TimeParseError(value)
                digits, value = value[:4], value[4:]
                if not digits.isdigit():
                    raise _TimeParseError(value)
                year = int(digits)
            elif elem == "15":
                hour, value = _getnum(value, False)
                if hour >= 24:
                    range_error = "hour"
            elif elem == "04":
                minute, value = _getnum(value, True)
                if minute >= 60:
                    range_error = "minute"
            elif elem == "05":
                error: _TimeParseError | None = None
                try:
                    sec, value = _getnum(value, True)
                except _TimeParseError as exc:
                    error = exc
                if sec >= 60:
                    range_error = "second"
                elif len(value) >= 2 and value[:1] in (b".", b",") and _is_digit(value, 1):
                    # Go reads a fraction the layout does not mention, and (a quirk) forgets an error
                    # from the seconds themselves when it does.
                    n = 2
                    while n < len(value) and _is_digit(value, n):
                        n += 1
                    frac = value[1 : min(n, 10)]
                    nsec = int(frac) * 10 ** (9 - len(frac))
                    value = value[n:]
                    error = None
                if error is not None and not range_error:
                    raise error
            elif elem == "MST":
                if value[:3] == b"UTC":
                    value = value[3:]
                else:
                    length = _time_zone_len(value)
                    if length == 0:
                        raise _TimeParseError(value)
                    zone_name, value = value[:length].decode("ascii"), value[length:]
        except _TimeParseError as exc:
            exc.layout_elem = elem
            raise
        if range_error:
            raise _TimeParseError(value, elem, f": {range_error} out of range")
    if value:
        raise _TimeParseError(value, "", f": extra text: {_time_quote(value)}")
    if day < 1 or day > _days_in(month, year):
        raise _TimeParseError(value, "", ": day out of range")
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + sec
    if zone_name:
        # An unknown abbreviation (and GMT+n) leaves the clock reading as UTC, as Go's time.Parse does.
        offset = _local_zone_offset(zone_name)
        if offset is not None:
            seconds -= offset
    return seconds + nsec / 1e9


# --------------------------------------------------------------------------------------------------------
# Regular expressions: Go's regexp syntax is RE2's, with a few differences in what is rejected and how.

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would otherwise print every bad pattern on stderr
# RE2's default 8 MiB budget refuses programs Go compiles (`\p{^L}{1000}`); memory is used lazily.
_RE2_OPTIONS.max_mem = 64 << 20

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
    try:
        re2.compile(pattern, _RE2_OPTIONS)
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


def _compile_go_regexp(pattern: str) -> tuple[Any, str | None]:
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
    return re2.compile(pattern, _RE2_OPTIONS), None


def _regexp_subject(arg: str) -> str:
    # Go reads a byte that is not UTF-8 as U+FFFD (which `.` matches); RE2 would refuse to match it.
    return re.sub("[\udc80-\udcff]", "\ufffd", arg)


# --------------------------------------------------------------------------------------------------------
# IP ranges, with Go's net.ParseIP / ParseCIDR / IPNet.Contains semantics on raw bytes

_V4_IN_V6 = bytes(10) + b"\xff\xff"
_BIG = 0xFFFFFF


@dataclass(frozen=True)
class _IPNet:
    ip: bytes
    mask: bytes


def _dtoi(s: str) -> tuple[int, int, bool]:
    n = i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        n = n * 10 + ord(s[i]) - 0x30
        if n >= _BIG:
            return _BIG, i, False
        i += 1
    return (n, i, True) if i else (0, 0, False)


def _xtoi(s: str) -> tuple[int, int, bool]:
    n = i = 0
    while i < len(s) and s[i] in "0123456789abcdefABCDEF":
        n = n * 16 + int(s[i], 16)
        if n >= _BIG:
            return 0, i, False
        i += 1
    return (n, i, True) if i else (0, i, False)


def _parse_ipv4(s: str) -> bytes | None:
    octets = bytearray()
    for index in range(4):
        if not s:
            return None
        if index > 0:
            if s[0] != ".":
                return None
            s = s[1:]
        n, consumed, ok = _dtoi(s)
        if not ok or n > 0xFF or (consumed > 1 and s[0] == "0"):
            return None
        s = s[consumed:]
        octets.append(n)
    return _V4_IN_V6 + bytes(octets) if not s else None


def _parse_ipv6(s: str) -> bytes | None:
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return bytes(ip)
    i = 0
    while i < 16:
        n, consumed, ok = _xtoi(s)
        if not ok or n > 0xFFFF:
            return None
        if consumed < len(s) and s[consumed] == ".":
            if (ellipsis < 0 and i != 12) or i + 4 > 16:
                return None
            v4 = _parse_ipv4(s)
            if v4 is None:
                return None
            ip[i : i + 4] = v4[12:]
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = n >> 8, n & 0xFF
        i += 2
        s = s[consumed:]
        if not s:
            break
        if s[0] != ":" or len(s) == 1:
            return None
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        gap = 16 - i
        ip[ellipsis + gap : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + gap] = bytes(gap)
    elif ellipsis >= 0:
        return None
    return bytes(ip)


def _parse_ip(s: str) -> bytes | None:
    """Go's net.ParseIP: 16 bytes (IPv4 in its v4-in-v6 form), or None."""
    for c in s:
        if c == ".":
            return _parse_ipv4(s)
        if c == ":":
            return _parse_ipv6(s)
    return None


def _to4(ip: bytes) -> bytes | None:
    if len(ip) == 4:
        return ip
    if len(ip) == 16 and ip[:12] == _V4_IN_V6:
        return ip[12:]
    return None


def _parse_cidr(s: str) -> _IPNet | str:
    """Go's net.ParseCIDR as an _IPNet, or the text of its error."""
    error = f"invalid CIDR address: {s}"
    addr, slash, mask_text = s.partition("/")
    if not slash:
        return error
    bits = 32
    ip = _parse_ipv4(addr)
    if ip is None:
        bits, ip = 128, _parse_ipv6(addr)
    n, consumed, ok = _dtoi(mask_text)
    if ip is None or not ok or consumed != len(mask_text) or n > bits:
        return error
    mask = ((1 << bits) - 1 ^ ((1 << (bits - n)) - 1)).to_bytes(bits // 8, "big")
    if bits == 32:
        ip = ip[12:]
    return _IPNet(bytes(a & b for a, b in zip(ip, mask, strict=True)), mask)


def _net_contains(net: _IPNet, ip: bytes) -> bool:
    number = _to4(net.ip) or net.ip
    mask = net.mask
    if len(mask) == 16 and len(number) == 4:
        mask = mask[12:]  # an IPv4-mapped IPv6 network is an IPv4 network
    elif len(mask) == 4 and len(number) != 4:
        return False
    ip = _to4(ip) or ip
    if len(ip) != len(number):
        return False
    return all(a & m == b & m for a, b, m in zip(number, ip, mask, strict=True))


# Go's strings.Fields splits on Unicode white space.
_FIELDS = re.compile(r"[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


def _parse_ip_ranges(ip_range: str) -> tuple[_IPNet | str, ...]:
    # A bare address means /32, even an IPv6 one (which therefore matches a whole /32 network).
    return tuple(_parse_cidr(r if "/" in r else r + "/32") for r in _FIELDS.split(ip_range) if r)


def _check_ip_whitelist(remote_addr: str, networks: tuple[_IPNet | str, ...]) -> bool:
    host = remote_addr.strip(" []")
    colon = host.rfind(":")
    if colon != -1:
        host = host[:colon].strip(" []")
    ip = _parse_ip(host)
    if ip is None:
        raise RuleError(f"invalid IP address found in remote address '{remote_addr}'")
    for net in networks:
        if isinstance(net, str):
            raise RuleError(net)
        if _net_contains(net, ip):
            return True
    return False


# --------------------------------------------------------------------------------------------------------
# Decoding a trigger rule from a hooks file: ghodss/yaml, then encoding/json into webhook's structs.


_RULE_FIELDS = ("and", "or", "not", "match")
_MATCH_FIELDS = ("type", "regex", "secret", "value", "parameter", "ip-range")
_ARGUMENT_FIELDS = ("source", "name", "envname", "base64decode")
_RULE_GO_TYPES = {
    "and": "hook.AndRule", "or": "hook.OrRule", "not": "hook.NotRule", "match": "hook.MatchRule",
}


def _decode_rules(
    target: dict[str, Any], data: Mapping[Any, Any], path: str, struct_name: str = "Rules"
) -> None:
    """Decode one rules object into `target` (and/or/not/match drafts), merging as encoding/json does.

    `struct_name` is the Go type being filled, as error messages name it: a `not` object is a NotRule.
    """
    for name, value in fields(data, _RULE_FIELDS):
        where = f"{struct_name}.{path}.{name}"
        if value is None:
            target[name] = None
        elif name in ("and", "or"):
            if not isinstance(value, list | tuple):
                raise type_error(value, where, _RULE_GO_TYPES[name])
            old = target.get(name) or []
            new = []
            for index, item in enumerate(value):
                # Go decodes into the slice's existing elements before truncating it.
                element = old[index] if index < len(old) else {}
                if item is not None:
                    if not isinstance(item, Mapping):
                        raise type_error(item, where, "hook.Rules")
                    _decode_rules(element, item, f"{path}.{name}")
                new.append(element)
            target[name] = new
        elif not isinstance(value, Mapping):
            raise type_error(value, where, _RULE_GO_TYPES[name])
        elif name == "not":
            element = target.get("not") or {}
            _decode_rules(element, value, f"{path}.not", "NotRule")
            target["not"] = element
        else:
            element = target.get("match") or {}
            _decode_match(element, value, f"{path}.match")
            target["match"] = element


def _decode_match(target: dict[str, Any], data: Mapping[Any, Any], path: str) -> None:
    for name, value in fields(data, _MATCH_FIELDS):
        where = f"MatchRule.{path}.{name}"
        if name != "parameter":
            if value is not None:
                target[name] = go_string(value, where)
            continue
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise type_error(value, where, "hook.Argument")
        argument = target.setdefault("parameter", {})
        for arg_name, arg_value in fields(value, _ARGUMENT_FIELDS):
            arg_where = f"Argument.{path}.parameter.{arg_name}"
            if arg_name == "base64decode":
                argument[arg_name] = go_bool(arg_value, arg_where, argument.get(arg_name, False))
            elif arg_value is not None:
                argument[arg_name] = go_string(arg_value, arg_where)


def _build(draft: Mapping[str, Any]) -> Rule:
    # Evaluate uses the first of and, or, not, match that is set, in that order.
    if draft.get("and") is not None:
        return AndRule(tuple(_build(item) for item in draft["and"]))
    if draft.get("or") is not None:
        return OrRule(tuple(_build(item) for item in draft["or"]))
    if draft.get("not") is not None:
        return NotRule(_build(draft["not"]))
    match = draft.get("match")
    if match is not None:
        parameter = match.get("parameter", {})
        return MatchRule(
            type=match.get("type", ""),
            regex=match.get("regex", ""),
            secret=match.get("secret", ""),
            value=match.get("value", ""),
            parameter=Argument(
                source=parameter.get("source", ""),
                name=parameter.get("name", ""),
                envname=parameter.get("envname", ""),
                base64decode=parameter.get("base64decode", False),
            ),
            ip_range=match.get("ip-range", ""),
        )
    return EmptyRule()


def parse_rule(data: Mapping[str, Any] | None, path: str = "trigger-rule") -> Rule | None:
    """The rule tree for a hook's decoded `trigger-rule` value; None when there is no rule.

    `{}` gives a rule that is never satisfied. Keys match case-insensitively (`AND`, `Match`, `Type`).
    A value of the wrong JSON type raises HooksFileError with encoding/json's message, e.g.
    `json: cannot unmarshal string into Go struct field Rules.trigger-rule.and of type hook.AndRule`.
    """
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise type_error(data, f"Hook.{path}", "hook.Rules")
    draft: dict[str, Any] = {}
    _decode_rules(draft, data, path)
    return _build(draft)
