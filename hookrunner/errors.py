"""Errors with meaning: the caller branches on the type, the message matches webhook's log text."""

from __future__ import annotations

from typing import Protocol, TypeVar

E = TypeVar("E", bound=BaseException)


def as_value(error: E) -> E:
    """A caught error kept as a value, the way Go returns one: without the traceback of its raising, nor that
    of an error it was raised while handling. A traceback holds the frames it passed through, and each of
    those, once returned, its caller's frame: a caller that keeps the error in a variable makes a cycle
    with its own frame, and the request it served waits for the cyclic collector (docs/performance.md)."""
    error.__traceback__ = None
    error.__context__ = None
    return error


class GoPrinted(Protocol):
    """What an error needs of the value it names (a hook's Argument): Go's `%+v` of it."""

    def go_repr(self) -> str: ...


class HookrunnerError(Exception):
    """Base of every error hookrunner raises on purpose."""


class ParameterNodeError(HookrunnerError):
    """A value named by a parameter is not in the request: soft, the clause is simply false."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"parameter node not found: {self.key}"


class SignatureError(HookrunnerError):
    """A payload signature did not verify: hard (HTTP 500) unless soft failures are allowed in an `or`."""

    def __init__(
        self, signature: str = "", signatures: list[str] | None = None, empty_payload: bool = False
    ) -> None:
        super().__init__(signature)
        self.signature = signature
        self.signatures = signatures
        self.empty_payload = empty_payload

    def __str__(self) -> str:
        empty = " on empty payload" if self.empty_payload else ""
        if self.signatures is not None:
            # Go prints a []string with %s as [a b c].
            return f"invalid payload signatures [{' '.join(self.signatures)}]{empty}"
        return f"invalid payload signature {self.signature}{empty}"


class RuleError(HookrunnerError):
    """Any other failure while evaluating a rule (bad IP range, empty secret, bad date): HTTP 500."""


class ArgumentError(HookrunnerError):
    """A command argument could not be retrieved from the request."""

    def __init__(self, argument: GoPrinted) -> None:
        super().__init__(argument)
        self.argument = argument

    def __str__(self) -> str:
        return f"couldn't retrieve argument for {self.argument.go_repr()}"


class SourceError(HookrunnerError):
    """An argument names a source that cannot be used where it appears."""

    def __init__(self, argument: GoPrinted) -> None:
        super().__init__(argument)
        self.argument = argument

    def __str__(self) -> str:
        return f"invalid source for argument {self.argument.go_repr()}"


class PayloadParseError(HookrunnerError):
    """A request body could not be parsed; logged, the request goes on without a payload."""


class MultipartError(HookrunnerError):
    """A multipart body is broken: webhook answers 500 `Error occurred while parsing multipart form.`"""


class HooksFileError(HookrunnerError):
    """A hooks file could not be read, rendered or parsed; the hooks already loaded stay."""


class NotRegularFileError(HooksFileError):
    """A hooks path that is not a regular file after symlinks (a FIFO, a device, a socket, a directory):
    it is not read, so it can neither block a reader nor feed one without end."""


class HooksFileTooLarge(HooksFileError):
    """A hooks file over the size cap (ops/regularfile.py, HOOKS_FILE_CAP); it is not read."""


class TemplateError(HooksFileError):
    """A Go text/template error, worded as Go words it (`template: hooks:3: ...`)."""


class DuplicateHookError(HooksFileError):
    """A hook id is already loaded from this or another file."""

    def __init__(self, hook_id: str) -> None:
        super().__init__(hook_id)
        self.hook_id = hook_id

    def __str__(self) -> str:
        return (
            f"error: hook with the id {self.hook_id} has already been loaded!\n"
            "please check your hooks file for duplicate hooks ids!"
        )


class UsageError(HookrunnerError):
    """A bad command line; carries the exit code, as click's exceptions do."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ValueRetrievalError(HookrunnerError):
    """A plain (non parameter-node) error from webhook's Argument.Get: a rule sees it as a hard error."""


class CommandNotFound(HookrunnerError):
    """exec.LookPath failed; the text is Go's (`exec: "x": executable file not found in $PATH`)."""


class AdminSetupError(HookrunnerError):
    """The admin listener (-admin-addr) cannot be set up as asked; the text says why, for the log (exit 1)."""


class HooksNotCurrent(HookrunnerError):
    """A worker could not catch up with the hooks generation the run owner published (its connection to the
    owner is gone, or the owner's reload did not come in time): it answers 503 rather than serve old hooks."""

    retry_after = 1
