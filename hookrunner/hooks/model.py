"""The hook model: Hook and its Limits, and how a hooks file's decoded entry becomes one, field by field,
the way webhook's YAML -> JSON -> struct decoding does."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hookrunner.config import Header
from hookrunner.errors import HooksFileError
from hookrunner.golang.decode import (
    fields,
    go_bool,
    go_int,
    go_string,
    json_kind,
    type_error,
)
from hookrunner.golang.time import parse_go_duration
from hookrunner.hooks.argument import Argument, plain_argument
from hookrunner.hooks.rules import parse_rule


@dataclass(frozen=True, slots=True)
class Limits:
    """A hook's limits: `max_concurrency` 0 means unlimited; `max_queue` 0 means reject at the limit;
    `coalesce_by`: the request value whose runs coalesce with each other (one waiting run per value)."""

    max_concurrency: int = 0
    max_queue: int = 0
    coalesce: bool = False
    retry_after: int = 5
    coalesce_by: Argument | None = None


@dataclass(frozen=True, slots=True)
class Hook:
    """One entry of a hooks file, with every field of upstream's Hook-Definition.md."""

    id: str = ""
    execute_command: str = ""
    command_working_directory: str = ""
    response_message: str = ""
    response_headers: tuple[Header, ...] = ()
    capture_output: bool = False
    capture_output_on_error: bool = False
    stream_output: bool = False  # soulteary/webhook's stream-command-output (serve/stream.py)
    pass_environment: tuple[Argument, ...] = ()
    pass_arguments: tuple[Argument, ...] = ()
    pass_file: tuple[Argument, ...] = ()
    json_parameters: tuple[Argument, ...] = ()
    trigger_rule: Any = None  # rules.Rule | None
    mismatch_status: int = 0
    signature_soft_failures: bool = False
    incoming_payload_content_type: str = ""
    success_status: int = 0
    http_methods: tuple[str, ...] = ()
    # hookrunner's own fields (the reference ignores unknown keys, so files stay portable):
    command_timeout: float = 0.0
    replay: bool = True  # run again after a restart when left unfinished (-state-dir)
    limits: Limits = Limits()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


# --- decoding a hooks file the way webhook's YAML -> JSON -> struct decoding does -------------------------

# Each field: its key in the file, the Hook attribute, and how Go decodes it (value, "Struct.key" for errors).
HOOK_FIELDS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {}  # filled below, once the decoders exist
#: hookrunner's own keys for a hook's Limits (docs/limits.md); the reference ignores them.
LIMIT_FIELDS = ("max-concurrency", "max-queue", "coalesce", "coalesce-by", "retry-after")
ARGUMENT_FIELDS = ("source", "name", "envname", "base64decode")
_HEADER_FIELDS = ("name", "value")


@functools.cache
def _lowered(spec: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in spec)


@functools.cache
def _names(spec: tuple[str, ...]) -> frozenset[str]:
    return frozenset(spec)


def _known(data: Any, spec: Sequence[str], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields encoding/json would fill (exact name, else ignoring case; a later key wins) and the rest."""
    if not isinstance(data, dict):
        raise HooksFileError(f"json: cannot unmarshal {json_kind(data)} into Go value of type {where}")
    if data.keys() <= _names(tuple(spec)):  # the usual entry: every key names its field exactly
        return data, {}
    known = dict(fields(data, tuple(spec)))
    folded = _lowered(tuple(spec))
    if all(type(k) is str for k in data):
        return known, {k: v for k, v in data.items() if k.lower() not in folded}
    extra = {go_string(k): v for k, v in data.items() if go_string(k).lower() not in folded}
    return known, extra


def _arguments(value: Any, where: str) -> tuple[Argument, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "[]hook.Argument")
    return tuple(decode_argument(item, where) for item in value if item is not None)


def decode_argument(data: Any, where: str = "Hook.parameter") -> Argument:
    """An Argument from its decoded mapping (also used for a match rule's `parameter`)."""
    if data is None:
        return Argument()
    known, _ = _known(data, ARGUMENT_FIELDS, where)
    argument = plain_argument(*map(known.get, ARGUMENT_FIELDS))
    if argument is not None:  # nothing to convert and nothing to refuse
        return argument
    return Argument(
        source=go_string(known.get("source"), where + ".source"),
        name=go_string(known.get("name"), where + ".name"),
        envname=go_string(known.get("envname"), where + ".envname"),
        base64decode=go_bool(known.get("base64decode"), where + ".base64decode"),
    )


def _headers(value: Any, where: str) -> tuple[Header, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "hook.ResponseHeaders")
    result = []
    for item in value:
        if item is None:
            continue
        known, _ = _known(item, _HEADER_FIELDS, where)
        result.append(Header(go_string(known.get("name"), where), go_string(known.get("value"), where)))
    return tuple(result)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "[]string")
    return tuple(go_string(item, where) for item in value)


def _go_duration_field(value: Any, where: str) -> float:
    """A timeout given as seconds (a number) or as a Go duration string such as `30s` or `5m`."""
    if value is None:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = parse_go_duration(value)
        except ValueError as exc:
            raise HooksFileError(f"{where}: {exc}") from exc
    else:
        raise HooksFileError(f"{where}: a number of seconds or a duration like \"30s\" is needed")
    if seconds < 0:
        raise HooksFileError(f"{where}: must not be negative")
    return seconds


_NO_LIMITS = Limits()


def _limits(known: dict[str, Any], where: str) -> Limits:
    if known.keys().isdisjoint(LIMIT_FIELDS):
        return _NO_LIMITS
    by = known.get("coalesce-by")
    coalesce_by = None if by is None else decode_argument(by, where + "coalesce-by")
    limits = Limits(
        max_concurrency=go_int(known.get("max-concurrency"), where + "max-concurrency"),
        max_queue=go_int(known.get("max-queue"), where + "max-queue"),
        # coalesce-by is coalescing per value: it needs no coalesce: true beside it.
        coalesce=go_bool(known.get("coalesce"), where + "coalesce") or coalesce_by is not None,
        retry_after=go_int(known.get("retry-after", 5), where + "retry-after"),
        coalesce_by=coalesce_by,
    )
    if min(limits.max_concurrency, limits.max_queue, limits.retry_after) < 0:
        raise HooksFileError(f"{where}max-concurrency, max-queue and retry-after must not be negative")
    return limits


def _replay(value: Any, where: str) -> bool:
    """`replay` defaults to true: only an explicit false opts a hook out of the run journal's replay."""
    return True if value is None else go_bool(value, where)


def _rule(value: Any, where: str) -> Any:
    return parse_rule(value)


HOOK_FIELDS.update(
    {
        "id": ("id", go_string),
        "execute-command": ("execute_command", go_string),
        "command-working-directory": ("command_working_directory", go_string),
        "response-message": ("response_message", go_string),
        "response-headers": ("response_headers", _headers),
        "include-command-output-in-response": ("capture_output", go_bool),
        "include-command-output-in-response-on-error": ("capture_output_on_error", go_bool),
        "stream-command-output": ("stream_output", go_bool),  # soulteary/webhook's
        "pass-environment-to-command": ("pass_environment", _arguments),
        "pass-arguments-to-command": ("pass_arguments", _arguments),
        "pass-file-to-command": ("pass_file", _arguments),
        "parse-parameters-as-json": ("json_parameters", _arguments),
        "trigger-rule": ("trigger_rule", _rule),
        "trigger-rule-mismatch-http-response-code": ("mismatch_status", go_int),
        "trigger-signature-soft-failures": ("signature_soft_failures", go_bool),
        "incoming-payload-content-type": ("incoming_payload_content_type", go_string),
        "success-http-response-code": ("success_status", go_int),
        "http-methods": ("http_methods", _strings),
        "command-timeout": ("command_timeout", _go_duration_field),  # hookrunner's own
        "replay": ("replay", _replay),  # hookrunner's own
    }
)


#: What each field decodes to when its key is missing or null, as the decoders give it (decoded once here).
_ABSENT = {attr: decode(None, f"Hook.{key}") for key, (attr, decode) in HOOK_FIELDS.items()}
_WHERE = {key: f"Hook.{key}" for key in HOOK_FIELDS}


_HOOK_SPEC = (*HOOK_FIELDS, *LIMIT_FIELDS)


@functools.lru_cache(maxsize=256)
def _plan(keys: tuple[str, ...]) -> tuple[tuple[str, str, Callable[[Any, str], Any], str], ...]:
    """The fields an entry with these keys fills, in HOOK_FIELDS' order: (key, attribute, decoder, where).
    The hooks of a file mostly have the same few keys: worked out once for them, not per hook."""
    present = set(keys)
    return tuple(
        (key, attr, decode, _WHERE[key]) for key, (attr, decode) in HOOK_FIELDS.items() if key in present
    )


def decode_hook(data: Any) -> Hook:
    """One Hook from one decoded list entry; raises HooksFileError where Go's decoding fails."""
    known, extra = _known(data, _HOOK_SPEC, "hook.Hook")
    values = dict(_ABSENT)
    for key, attr, decode, where in _plan(tuple(known)):  # in this order: the first field's error is told
        value = known[key]
        if value is not None:
            values[attr] = decode(value, where)
    return Hook(**values, limits=_limits(known, "Hook."), extra=extra)
