"""Go values as a template sees them, modelled with Python ones:
  None -> nil (no value), bool, int -> int, _Byte -> uint8 (an element of a string), float -> float64,
  complex -> complex128, str -> string, list -> []interface {}, dict -> map[string]interface {},
  _Iface(x) -> an element read out of a list or map: Go sees an interface value until it is unwrapped.
Also their Go type names and truth."""

from __future__ import annotations

from typing import Any


class _Byte(int):
    """A uint8, as indexing a string yields."""

    __slots__ = ()


class _Iface:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _unwrap(v: Any) -> Any:
    return v.value if type(v) is _Iface else v


def _go_type(v: Any) -> str:
    t = type(v)
    if t is _Iface:
        return "interface {}"
    if t is bool:
        return "bool"
    if t is _Byte:
        return "uint8"
    if t is int:
        return "int"
    if t is float:
        return "float64"
    if t is complex:
        return "complex128"
    if t is str:
        return "string"
    if t is list:
        return "[]interface {}"
    if t is dict:
        return "map[string]interface {}"
    return "<nil>"


def _is_true(v: Any) -> bool:
    v = _unwrap(v)
    if v is None:
        return False
    if isinstance(v, str | list | dict):
        return len(v) > 0
    return bool(v)
