"""Finding values in a request by webhook's dotted names, and webhook's Argument.Get over them."""

from __future__ import annotations

from typing import Any

from hookrunner.errors import HookrunnerError, ParameterNodeError, ValueRetrievalError
from hookrunner.golang.fmt import render_value
from hookrunner.golang.json import NilMap, go_json_dumps
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.request import Request, canonical_header_key

__all__ = [
    "NoParametersError",
    "ReplacePanicError",
    "argument_value",
    "get_parameter",
    "replace_parameter",
]


class NoParametersError(ValueRetrievalError):
    """GetParameter walked into a JSON null: Go answers the plain error `no parameters`."""

    def __init__(self) -> None:
        super().__init__("no parameters")


class ReplacePanicError(HookrunnerError):
    """webhook's ReplaceParameter panics on a dotted name: its handler dies and the connection drops."""


# --- Walking and replacing dotted names ---


def _parse_index(text: str) -> int | None:
    # strconv.ParseUint(s, 10, 64): ASCII digits only, no sign, at most 2**64 - 1.
    if not text or not text.isascii() or not text.isdigit():
        return None
    index = int(text)
    return index if index < 1 << 64 else None


def get_parameter(name: str, params: Any) -> Any:
    """webhook's GetParameter: a literal key (dots and all) first, then a walk through maps and lists.

    Raises ParameterNodeError where webhook does, and NoParametersError when the walk reaches a JSON
    null (webhook's plain `no parameters` error, which a rule treats as a hard error).
    """
    while True:
        if params is None:
            raise NoParametersError()
        if isinstance(params, list):
            if not params:
                raise ParameterNodeError(name)
            head, dot, rest = name.partition(".")
            index = _parse_index(head if dot else name)
            if index is None or index >= len(params):
                raise ParameterNodeError(name)
            if not dot:
                return params[index]
            name, params = rest, params[index]
            continue
        if isinstance(params, dict):
            if name in params:
                return params[name]
            head, dot, rest = name.partition(".")
            if head in params:
                if not dot:
                    return params[head]
                name, params = rest, params[head]
                continue
        raise ParameterNodeError(name)


def replace_parameter(name: str, params: dict[str, Any], value: Any) -> bool:
    """webhook's ReplaceParameter on a request's header, query or payload map.

    Only a plain top-level key can be replaced. For a dotted name webhook's type assertion panics (the
    map is passed by pointer) and its handler dies; that is raised as ReplacePanicError.
    """
    if "." in name:
        raise ReplacePanicError(
            "interface conversion: interface {} is *map[string]interface {}, not map[string]interface {}"
        )
    if name in params:
        params[name] = value
        return True
    return False


def argument_value(arg: Argument, req: Request) -> str:
    """webhook's Argument.Get: the argument's value from the request, rendered as Go prints it.

    Raises ParameterNodeError when a named value is missing, ValueRetrievalError for webhook's plain
    errors (`unsupported request key: "x"`, `no source for value retrieval`, `no parameters`).
    """
    source: dict[str, Any] | None
    key = arg.name
    match arg.source:
        case "header":
            source, key = req.headers, canonical_header_key(arg.name)
        case "url" | "query":
            source = req.query
        case "payload":
            # An unparsed body is Go's nil map: every lookup in it simply misses.
            source = req.payload if req.payload is not None else NilMap()
        case "string":
            return arg.name
        case "raw-request-body":
            return req.body.decode("utf-8", "surrogateescape")
        case "request":
            match arg.name.lower():
                case "remote-addr":
                    return req.remote_addr
                case "method":
                    return req.method
            raise ValueRetrievalError(f"unsupported request key: {go_quote(arg.name)}")
        case "entire-payload":
            return go_json_dumps(req.payload)
        case "entire-headers":
            return go_json_dumps(req.headers)
        case "entire-query":
            return go_json_dumps(req.query)
        case _:
            raise ValueRetrievalError("no source for value retrieval")
    return render_value(get_parameter(key, source))
