"""A prepared run as it crosses from a worker to the run owner (docs/run-state.md, "The wire protocol"): the
`run` message, preceded by `part` messages when it does not fit one packet, and the run the owner rebuilds
from them: the RunSpec, a stand-in for the hook with what the executor reads of it, the coalesce group and
how the worker answers (capture, stream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hookrunner.hooks.model import Hook, Limits
from hookrunner.run.wire import FRAME, MAX_PACKET, Message, WireError
from hookrunner.state.model import RunSpec

#: Room kept for a `run` message's own header in its packet.
_HEADER_ROOM = 4096


@dataclass(frozen=True)
class RunOrder:
    """A run as the owner receives it: what the executor starts (`hook`, a stand-in carrying the command,
    its folder, timeout, replay and limits; `spec`), the coalesce `group`, whether the worker answers
    with the output (`capture`) or streams it (`stream`, with how far its client may fall behind: `behind`,
    0 for the owner's default), and whether it waits to be told of the start (`tell_start`: a background
    run answered once started)."""

    number: int
    hook: Hook
    spec: RunSpec
    group: str | None
    capture: bool
    stream: bool
    tell_start: bool = False
    behind: int = 0


def run_messages(
    number: int,
    hook: Hook,
    spec: RunSpec,
    group: str | None,
    capture: bool,
    stream: bool,
    tell_start: bool = False,
    behind: int = 0,
) -> Iterator[Message]:
    """The messages that carry run `number` to the owner: `part`s of the body, then `run`. The body is the
    spec's JSON (argv, variables, command, folder, coalesce group) followed by the files' contents, so no
    argv or file is too large for the wire."""
    text = json.dumps(
        {
            "command": spec.command,
            "argv": list(spec.argv),
            "env": [list(pair) for pair in spec.env],
            "cwd": spec.cwd,
            "group": group,
        },
        ensure_ascii=True,
        separators=(",", ":"),
    ).encode("ascii")
    body = text + b"".join(data for _, data in spec.files)
    limits = hook.limits
    fields: dict[str, Any] = {
        "id": number,
        "hook": hook.id,
        "request": spec.request_id,
        "spec": len(text),
        "files": [[name, len(data)] for name, data in spec.files],
        "timeout": hook.command_timeout,
        "replay": hook.replay,
        "limits": [limits.max_concurrency, limits.max_queue, limits.coalesce, limits.retry_after],
        "capture": capture,
        "stream": stream,
        "started": tell_start,
    }
    if behind:
        fields["behind"] = behind
    room = MAX_PACKET - _HEADER_ROOM - len(json.dumps(fields, ensure_ascii=True))
    while len(body) > room:
        yield Message("part", {"id": number}, body[:FRAME])
        body = body[FRAME:]
    yield Message("run", fields, body)


def run_order(message: Message, parts: bytes = b"") -> RunOrder:
    """The run in a `run` message whose body began with `parts`; raises WireError for anything else."""
    try:
        number = _typed(message["id"], int)
        body = parts + message.data
        size = _typed(message["spec"], int)
        spec = json.loads(body[:size])
        files: list[tuple[str, bytes]] = []
        at = size
        for name, length in message["files"]:
            if _typed(length, int) < 0:
                raise WireError(f"run {number}: a file of {length} bytes")
            files.append((_typed(name, str), body[at : at + length]))
            at += length
        if at != len(body) or size < 0:
            raise WireError(f"run {number}: a body of {len(body)} bytes, not {at}")
        concurrency, queue, coalesce, retry_after = message["limits"]
        limits = Limits(
            max_concurrency=_typed(concurrency, int),
            max_queue=_typed(queue, int),
            coalesce=_typed(coalesce, bool),
            retry_after=_typed(retry_after, int),
        )
        timeout = message["timeout"]
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise WireError(f"run {number}: a timeout of {timeout!r}")
        run_spec = RunSpec(
            hook_id=_typed(message["hook"], str),
            request_id=_typed(message["request"], str),
            command=_typed(spec["command"], str),
            argv=tuple(_typed(arg, str) for arg in spec["argv"]),
            env=tuple((_typed(key, str), _typed(value, str)) for key, value in spec["env"]),
            files=tuple(files),
            cwd=_typed(spec["cwd"], str),
        )
        hook = Hook(
            id=run_spec.hook_id,
            execute_command=run_spec.command,
            command_working_directory=run_spec.cwd,
            command_timeout=float(timeout),
            replay=_typed(message["replay"], bool),
            limits=limits,
        )
        group = spec.get("group")
        return RunOrder(
            number=number,
            hook=hook,
            spec=run_spec,
            group=None if group is None else _typed(group, str),
            capture=_typed(message["capture"], bool),
            stream=_typed(message["stream"], bool),
            tell_start=_typed(message.get("started", False), bool),
            behind=_typed(message.get("behind", 0), int),
        )
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field missing or misshapen, not JSON
        raise WireError(f"a run message that does not say what to run: {type(exc).__name__} {exc}") from None


def _typed(value: Any, kind: type) -> Any:
    """`value` when it is a `kind` (a bool is not an int here); raises WireError otherwise."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"{value!r} is not a {kind.__name__}")
    return value
