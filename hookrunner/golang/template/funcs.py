"""text/template's built-in functions (and, or, not, len, index, slice, eq, ne, lt, le, gt, ge, html, js,
urlquery, print, printf, println, call). Parameters are typed as Go types them, because argument
checking depends on it: "string", "any" (interface {}, receives the plain value) or "value"
(reflect.Value, sees what Go sees)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hookrunner.golang.strconv import is_print as _is_print
from hookrunner.golang.template.literals import _utf8_len
from hookrunner.golang.template.printf import go_sprint, go_sprintf, go_sprintln
from hookrunner.golang.template.values import _Byte, _go_type, _Iface, _is_true


class _CallError(Exception):
    """An error returned by a function; the executor wraps it as `error calling NAME: ...`."""


_ZERO_VALUE_TYPE = "reflect: call of reflect.Value.Type on zero Value"


@dataclass(frozen=True)
class _Func:
    params: tuple[str, ...]
    variadic: bool
    call: Callable[..., Any]
    builtin: bool = True


def _indirect_iface(v: Any) -> Any:
    return v.value if type(v) is _Iface else v


def _go_and_or(*args: Any) -> Any:  # never called: and/or short-circuit in the executor
    raise AssertionError("unreachable")


def _go_not(v: Any) -> bool:
    return not _is_true(v)


def _basic_kind(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is _Byte:
        return "uint"
    if t is float:
        return "float"
    if t is complex:
        return "complex"
    if t is str:
        return "string"
    return ""


def _go_eq(arg1: Any, *rest: Any) -> bool:
    arg1 = _indirect_iface(arg1)
    if not rest:
        raise _CallError("missing argument for comparison")
    k1 = _basic_kind(arg1)
    for arg in rest:
        arg = _indirect_iface(arg)
        k2 = _basic_kind(arg)
        truth = False
        if k1 != k2:
            if {k1, k2} == {"int", "uint"}:
                truth = int(arg1) >= 0 and int(arg) >= 0 and int(arg1) == int(arg)
            elif arg1 is not None and arg is not None:
                raise _CallError("incompatible types for comparison")
        elif k1:
            truth = arg1 == arg
        else:
            # Neither is a basic kind: only nil compares; lists and maps are not comparable.
            if arg1 is None or arg is None:
                truth = arg1 is None and arg is None
            else:
                if type(arg1) is not type(arg):
                    raise _CallError(
                        go_sprintf(
                            "non-comparable types %s: %v, %s: %v", arg1, _go_type(arg1), _go_type(arg), arg
                        )
                    )
                raise _CallError(go_sprintf("non-comparable type %s: %v", arg, _go_type(arg)))
        if truth:
            return True
    return False


def _go_ne(a: Any, b: Any) -> bool:
    return not _go_eq(a, b)


def _go_lt(a: Any, b: Any) -> bool:
    a = _indirect_iface(a)
    k1 = _basic_kind(a)
    if not k1:
        raise _CallError("invalid type for comparison")
    b = _indirect_iface(b)
    k2 = _basic_kind(b)
    if not k2:
        raise _CallError("invalid type for comparison")
    if k1 != k2:
        if {k1, k2} == {"int", "uint"}:
            return int(a) < int(b)
        raise _CallError("incompatible types for comparison")
    if k1 in ("bool", "complex"):
        raise _CallError("invalid type for comparison")
    if k1 == "string":
        # Go compares strings byte-wise, which for UTF-8 is code point order, as Python does.
        return bool(a < b)
    return bool(a < b)


def _go_le(a: Any, b: Any) -> bool:
    return _go_lt(a, b) or _go_eq(a, b)


def _go_gt(a: Any, b: Any) -> bool:
    return not _go_le(a, b)


def _go_ge(a: Any, b: Any) -> bool:
    return not _go_lt(a, b)


def _go_len(item: Any) -> int:
    if type(item) is _Iface:
        if item.value is None:
            raise _CallError("len of nil pointer")
        item = item.value
    if item is None:
        raise _CallError(_ZERO_VALUE_TYPE)
    if type(item) is str:
        return _utf8_len(item)
    if type(item) in (list, dict):
        return len(item)
    raise _CallError(f"len of type {_go_type(item)}")


def _index_arg(index: Any, cap: int) -> int:
    if type(index) is int or type(index) is _Byte:
        x = int(index)
    elif index is None:
        raise _CallError("cannot index slice/array with nil")
    else:
        raise _CallError(f"cannot index slice/array with type {_go_type(index)}")
    if x < 0 or x > cap:
        raise _CallError(f"index out of range: {x}")
    return x


def _go_index(item: Any, *indexes: Any) -> Any:
    item = _indirect_iface(item)
    if item is None:
        raise _CallError("index of untyped nil")
    for index in indexes:
        index = _indirect_iface(index)
        if type(item) is _Iface:
            if item.value is None:
                raise _CallError("index of nil pointer")
            item = item.value
        t = type(item)
        if t is str:
            b = item.encode("utf-8", "surrogateescape")
            x = _index_arg(index, len(b))
            if x == len(b):
                raise _CallError("reflect: string index out of range")
            item = _Byte(b[x])
        elif t is list:
            x = _index_arg(index, len(item))
            if x == len(item):
                raise _CallError("reflect: slice index out of range")
            item = _Iface(item[x])
        elif t is dict:
            if index is None:
                raise _CallError("value is nil; should be of type string")
            if type(index) is not str:
                raise _CallError(f"value has type {_go_type(index)}; should be string")
            item = _Iface(item.get(index))
        else:
            raise _CallError(f"can't index item of type {_go_type(item)}")
    return item


def _go_slice(item: Any, *indexes: Any) -> Any:
    item = _indirect_iface(item)
    if item is None:
        raise _CallError("slice of untyped nil")
    if len(indexes) > 3:
        raise _CallError(f"too many slice indexes: {len(indexes)}")
    t = type(item)
    if t is str:
        if len(indexes) == 3:
            raise _CallError("cannot 3-index slice a string")
        data = item.encode("utf-8", "surrogateescape")
        cap = len(data)
    elif t is list:
        cap = len(item)
    else:
        raise _CallError(f"can't slice item of type {_go_type(item)}")
    idx = [0, cap, 0]
    for i, index in enumerate(indexes):
        # Unlike index, slice does not look inside interface values: an element read from data is refused.
        idx[i] = _index_arg(index, cap)
    if idx[0] > idx[1]:
        raise _CallError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise _CallError(f"invalid slice index: {idx[1]} > {idx[2]}")
    if t is str:
        return data[idx[0] : idx[1]].decode("utf-8", "surrogateescape")
    return item[idx[0] : idx[1]]


def _go_call(fn: Any, *args: Any) -> Any:
    fn = _indirect_iface(fn)
    if fn is None:
        raise _CallError("call of nil")
    raise _CallError(f"non-function of type {_go_type(fn)}")


def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and type(args[0]) is str:
        return str(args[0])
    # A nil argument prints as "<no value>" here, unlike in print.
    return go_sprint(*["<no value>" if a is None else a for a in args])


_HTML_ESCAPES = {"\0": "\ufffd", '"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;"}


def html_escape(s: str) -> str:
    """text/template's html: escapes " ' & < > and NUL."""
    if not any(c in s for c in "'\"&<>\0"):
        return s
    return "".join(_HTML_ESCAPES.get(c, c) for c in s)


_JS_ESCAPES = {
    "\\": "\\\\",
    "'": "\\'",
    '"': '\\"',
    "<": "\\u003C",
    ">": "\\u003E",
    "&": "\\u0026",
    "=": "\\u003D",
}


def js_escape(s: str) -> str:
    """text/template's js: escapes quotes, backslash, < > & =, control characters and unprintable runes."""
    out: list[str] = []
    for ch in s:
        code = ord(ch)
        if ch in _JS_ESCAPES:
            out.append(_JS_ESCAPES[ch])
        elif code < 0x20:
            out.append(f"\\u00{code:02X}")
        elif code < 0x80 or _is_print(ch) or 0xDC80 <= code <= 0xDCFF:
            # Bytes that are not UTF-8 decode to U+FFFD in Go, which is printable, so they pass as they are.
            out.append(ch)
        else:
            out.append(f"\\u{code:04X}")
    return "".join(out)


def _go_html(*args: Any) -> str:
    return html_escape(_eval_args(args))


def _go_js(*args: Any) -> str:
    return js_escape(_eval_args(args))


def _go_urlquery(*args: Any) -> str:
    text = _eval_args(args).encode("utf-8", "surrogateescape")
    return urllib.parse.quote_plus(text, safe="")


def _go_print(*args: Any) -> str:
    return go_sprint(*args)


def _go_printf(fmt: str, *args: Any) -> str:
    return go_sprintf(fmt, *args)


def _go_println(*args: Any) -> str:
    return go_sprintln(*args)


_BUILTINS: dict[str, _Func] = {
    "and": _Func(("value", "value"), True, _go_and_or),
    "call": _Func(("value", "value"), True, _go_call),
    "html": _Func(("any",), True, _go_html),
    "index": _Func(("value", "value"), True, _go_index),
    "slice": _Func(("value", "value"), True, _go_slice),
    "js": _Func(("any",), True, _go_js),
    "len": _Func(("value",), False, _go_len),
    "not": _Func(("value",), False, _go_not),
    "or": _Func(("value", "value"), True, _go_and_or),
    "print": _Func(("any",), True, _go_print),
    "printf": _Func(("string", "any"), True, _go_printf),
    "println": _Func(("any",), True, _go_println),
    "urlquery": _Func(("any",), True, _go_urlquery),
    "eq": _Func(("value", "value"), True, _go_eq),
    "ge": _Func(("value", "value"), False, _go_ge),
    "gt": _Func(("value", "value"), False, _go_gt),
    "le": _Func(("value", "value"), False, _go_le),
    "lt": _Func(("value", "value"), False, _go_lt),
    "ne": _Func(("value", "value"), False, _go_ne),
}
