"""Go's time package where webhook reads or prints times: time.Parse for the scalr `Date` layout,
time.ParseDuration and Duration.String."""

from __future__ import annotations

import re
import time

from hookrunner.errors import RuleError

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
    raw = text.encode("utf-8", "surrogateescape")  # Go sees the raw bytes
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
                    try:
                        raise error
                    finally:
                        error = None  # raised from a variable of this frame: no cycle through its traceback
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


# --- Go's time.ParseDuration and Duration.String ----------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds from a Go duration (`30s`, `1m30s`, `1.5h`, `250ms`; a bare `0` is zero). ValueError if bad."""
    source = text
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{source}"')
    total = 0.0
    position = 0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None:
            if re.match(r"\d+\.?\d*|\.\d+", text[position:]) and not re.search(r"[a-zµμ]", text[position:]):
                raise ValueError(f'time: missing unit in duration "{source}"')
            raise ValueError(f'time: invalid duration "{source}"')
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    return sign * total


def go_duration_text(seconds: float) -> str:
    """Go's time.Duration.String(): `25s`, `1m30s`, `1h0m0s`, `1.5s`, `250ms`, `0s`."""
    ns = round(seconds * 1e9)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, scale in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= scale:
                whole, frac = divmod(ns, scale)
                digits = f"{frac:0{len(str(scale)) - 1}d}".rstrip("0") if scale > 1 else ""
                return f"{sign}{whole}{'.' + digits if digits else ''}{unit}"
    whole_seconds, frac = divmod(ns, 1_000_000_000)
    digits = f"{frac:09d}".rstrip("0")
    hours, rest = divmod(whole_seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs}{'.' + digits if digits else ''}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text
