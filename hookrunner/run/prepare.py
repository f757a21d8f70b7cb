"""What a run starts from a hook and a request: argv, the hook's variables and files (RunSpec), the value
its runs coalesce by, and the environment every command inherits from the server."""

from __future__ import annotations

import os

from hookrunner.errors import ArgumentError, HookrunnerError
from hookrunner.golang.base64 import go_base64_decode
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Hook
from hookrunner.hooks.params import argument_value
from hookrunner.hooks.request import Request
from hookrunner.ops.log import log
from hookrunner.state.journal import RunSpec

# The last environment inherited_environment() built, beside the bytes of os.environ it was built from.
_inherited: tuple[dict[bytes, bytes], dict[str, str]] | None = None


def inherited_environment() -> dict[str, str]:
    """The environment a command inherits: the server's own, as webhook passes it on (a new dict).

    Under a C locale Python sets LC_CTYPE=C.UTF-8 in its own environment at start-up (PEP 538 locale
    coercion); webhook's commands never see that variable, so it is left out when it can only have
    come from there (no LC_ALL, and LANG unset or C).

    Decoding the environment is most of the cost, and it grows with it (a pod gets variables for every
    service of its namespace): the last result is reused while os.environ's bytes are unchanged.
    """
    global _inherited
    raw: dict[bytes, bytes] | None = getattr(os.environ, "_data", None)
    last = _inherited
    if raw is not None and last is not None and last[0] == raw:
        return dict(last[1])
    env = dict(os.environ)
    coerced = env.get("LC_CTYPE") in ("C.UTF-8", "C.utf8", "UTF-8")
    if coerced and not env.get("LC_ALL") and env.get("LANG", "C") in ("", "C", "POSIX"):
        del env["LC_CTYPE"]
    if raw is not None:
        _inherited = (dict(raw), dict(env))
    return env


def _decode_base64(text: str) -> bytes:
    decoded, error = go_base64_decode(text.encode("utf-8", "surrogateescape"))
    if error is not None:
        log.printf("error decoding string [illegal base64 data at input byte %d]", error)
    return decoded


def _values(req: Request, args: tuple[Argument, ...], what: str) -> list[tuple[Argument, str | None]]:
    result: list[tuple[Argument, str | None]] = []
    for arg in args:
        try:
            result.append((arg, argument_value(arg, req)))
        except HookrunnerError:
            log.request(req.id, f"error extracting command arguments{what}: {ArgumentError(arg)}\n")
            result.append((arg, None))
    return result


def prepare(hook: Hook, req: Request) -> RunSpec:
    """What a run of `hook` for `req` starts: argv, the hook's variables, its files' contents, its folder."""
    argv = [hook.execute_command]
    argv += [value or "" for _, value in _values(req, hook.pass_arguments, "")]
    env: list[tuple[str, str]] = []
    for arg, value in _values(req, hook.pass_environment, " for environment"):
        if value is not None:
            env.append((arg.envname or "HOOK_" + arg.name, value))
    files: list[tuple[str, bytes]] = []
    for arg, value in _values(req, hook.pass_file, " for file"):
        if value is None:
            continue
        envname = arg.envname
        if not envname:
            envname = "HOOK_" + arg.name.upper()
            log.printf("no ENVVAR name specified, falling back to [%s]", envname)
        data = _decode_base64(value) if arg.base64decode else value.encode("utf-8", "surrogateescape")
        files.append((envname, data))
    return RunSpec(
        hook_id=hook.id,
        request_id=req.id,
        command=hook.execute_command,
        argv=tuple(argv),
        env=tuple(env),
        files=tuple(files),
        cwd=hook.command_working_directory,
    )


def coalesce_group(hook: Hook, req: Request) -> str | None:
    """The value of the hook's `coalesce-by` in this request: its runs coalesce only with runs of the same
    value. None without coalesce-by, and for a request that lacks the value (those coalesce together)."""
    by = hook.limits.coalesce_by
    if by is None:
        return None
    try:
        return argument_value(by, req)
    except HookrunnerError:
        return None
