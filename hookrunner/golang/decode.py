"""Hooks-file values decoded as webhook decodes them (ghodss/yaml, then encoding/json)."""

from __future__ import annotations

import functools
import math
import re
import struct
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from hookrunner.errors import HooksFileError


def float32_text(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32): ghodss/yaml's text for a YAML float in a string field."""
    if math.isnan(value):
        return "NaN"
    try:
        f32 = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        f32 = math.copysign(math.inf, value)
    if math.isinf(f32):
        return "+Inf" if f32 > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f32) < 0 else ""
    f32 = abs(f32)
    if f32 == 0:
        return sign + "0"
    text = ""
    for precision in range(1, 10):
        text = f"{f32:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == f32:
            break
    mantissa, _, exp_text = text.partition("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    exponent = int(exp_text)
    # The shortest %g switches to an exponent below 1e-4 and from 1e+06 on (eprec is 6).
    if exponent < -4 or exponent >= 6:
        frac = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole = digits[: exponent + 1].ljust(exponent + 1, "0")
    frac = digits[exponent + 1 :]
    return f"{sign}{whole}{'.' + frac if frac else ''}"


def json_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string"


def type_error(value: Any, where: str, go_type: str) -> HooksFileError:
    kind = json_kind(value)
    return HooksFileError(f"json: cannot unmarshal {kind} into Go struct field {where} of type {go_type}")


def go_string(value: Any, where: str = "") -> str:
    """A decoded YAML/JSON scalar as webhook reads it into a Go string field.

    ghodss/yaml turns a YAML number or boolean into text when the target is a string: `1` -> "1",
    `yes`/`true` -> "true", `1.0` -> "1", `1000000.0` -> "1e+06" (floats are printed as float32).
    null leaves the field empty. An object or list is an error naming `where` (`Struct.path`).
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # yaml.v2 keeps an integer that fits int64 or uint64; a bigger one is read as a float64.
        if -(1 << 63) <= value < (1 << 64):
            return str(value)
        try:
            return float32_text(float(value))
        except OverflowError:
            return str(value)
    if isinstance(value, float):
        return float32_text(value)
    if isinstance(value, datetime | date):
        # yaml.v2 leaves a timestamp as the text it was written as; isoformat is the closest we have.
        return value.isoformat()
    raise type_error(value, where, "string")


def go_bool(value: Any, where: str, current: bool = False) -> bool:
    if value is None:
        return current  # null leaves a Go field as it was
    if isinstance(value, bool):
        return value
    raise type_error(value, where, "bool")


def _fold(key: str) -> str:
    # encoding/json matches keys ignoring case, with the Kelvin sign and long s folding to k and s.
    return key.replace("\u212a", "k").replace("\u017f", "s").lower()


@functools.cache
def _by_fold(names: tuple[str, ...]) -> tuple[frozenset[str], dict[str, str]]:
    # Asked once per decoded object with the same few tuples of names: made once per tuple.
    return frozenset(names), {_fold(name): name for name in names}


def fields(data: Mapping[Any, Any], names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(field, value) pairs in the order Go decodes them: ghodss re-marshals the object, so keys sorted.

    Each key goes to the field it names exactly, else to one it names ignoring case; a later key
    overwrites (or, for objects and lists, merges into) what an earlier one decoded.
    """
    exact, by_fold = _by_fold(names)
    keys = data.keys()
    if keys <= exact:  # the usual object: each key names its field exactly, so no two name the same one
        return [(key, data[key]) for key in sorted(keys)]
    if all(type(k) is str for k in data):  # as in any JSON file: each key is its own text, and unique
        return [(key if key in exact else by_fold[_fold(key)], data[key]) for key in sorted(data)
                if key in exact or _fold(key) in by_fold]
    pairs = []
    for key in sorted(go_string(k) for k in data):
        name = key if key in exact else by_fold.get(_fold(key))
        if name is not None:
            pairs.append((name, _lookup_key(data, key)))
    return pairs


def _lookup_key(data: Mapping[Any, Any], key: str) -> Any:
    if key in data:
        return data[key]
    for k, v in data.items():  # a YAML key that was not a string (`1: x`, `true: y`)
        if go_string(k) == key:
            return v
    return None


def go_int(value: Any, where: str) -> int:
    """A Go int field: a JSON number without a fraction (a float like 200.0 is fine); null is 0."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise type_error(value, where, "int")


# --- YAML plain scalars as Go's yaml.v2 resolves them (PyYAML's YAML 1.1 rules differ at the edges) ---

_V2_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_V2_SPECIAL: dict[str, Any] = {
    **_V2_BOOLS,
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# The float pattern of the yaml.v2 the reference (Debian's webhook 2.8.0) is built with: `1e3` and `1.`
# stay strings there, while `1e+3` and `.5` are numbers.
_V2_FLOAT = re.compile(r"[-+]?[0-9]*\.?[0-9]+([eE][-+][0-9]+)?")
_V2_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(([Tt]| +)[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}.*)?")
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _go_parse_int(text: str, signed: bool) -> int | None:
    """strconv.ParseInt/ParseUint with base 0 (0x, 0o, 0b and leading-0 octal), within 64 bits."""
    sign = 1
    body = text
    if signed and body[:1] in ("+", "-"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    base = 10
    if body[:2] in ("0x", "0X"):
        base, body = 16, body[2:]
    elif body[:2] in ("0o", "0O"):
        base, body = 8, body[2:]
    elif body[:2] in ("0b", "0B"):
        base, body = 2, body[2:]
    elif body[:1] == "0" and len(body) > 1:
        base, body = 8, body[1:]
    if not body or any(c not in _DIGITS[base] for c in body):
        return None
    value = sign * int(body, base)
    if signed:
        return value if -(1 << 63) <= value < (1 << 63) else None
    return value if 0 <= value < (1 << 64) else None


def yaml_v2_scalar(text: str) -> Any:
    """The value yaml.v2 gives an unquoted scalar when decoding into interface{} (as ghodss/yaml does)."""
    if text in _V2_SPECIAL:
        return _V2_SPECIAL[text]
    first = text[0]
    if first == ".":
        try:
            return float(text) if _V2_FLOAT.fullmatch(text) else text
        except ValueError:
            return text
    if not (first.isdigit() and first.isascii()) and first not in "+-":
        return text
    if _V2_TIMESTAMP.fullmatch(text):
        return text  # yaml.v2 keeps timestamp-like values as strings in interface{}
    plain = text.replace("_", "")
    for signed in (True, False):
        number = _go_parse_int(plain, signed)
        if number is not None:
            return number
    if _V2_FLOAT.fullmatch(plain):
        return float(plain)
    return text
