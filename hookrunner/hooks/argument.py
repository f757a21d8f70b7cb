"""A hook's Argument: a value taken from the request (a source and a name), as webhook's hook.Argument."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Argument:
    """A value taken from the request: `source` + `name`, with `envname`/`base64decode` for env and files."""

    source: str = ""
    name: str = ""
    envname: str = ""
    base64decode: bool = False

    def go_repr(self) -> str:
        """Go's `%+v` of webhook's Argument struct, as its log lines show it."""
        b64 = "true" if self.base64decode else "false"
        return f"{{Source:{self.source} Name:{self.name} EnvName:{self.envname} Base64Decode:{b64}}}"


#: Arguments by their four values: most hooks of a file name the same few (`payload` `ref`), and one frozen
#: Argument serves them all. Bounded, since it outlives the files it was filled from.
_SHARED: dict[tuple[str, str, str, bool], Argument] = {}
_SHARED_MAX = 4096


def shared_argument(source: str, name: str, envname: str = "", base64decode: bool = False) -> Argument:
    """The Argument with these values, one object for all the hooks that name it."""
    key = (source, name, envname, base64decode)
    argument = _SHARED.get(key)
    if argument is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        argument = _SHARED[key] = Argument(source, name, envname, base64decode)
    return argument


def plain_argument(source: Any, name: Any, envname: Any, base64decode: Any) -> Argument | None:
    """The shared Argument of a decoded mapping's four values where they need no conversion (strings, a
    bool, or null for a missing one) and so can hold nothing to refuse; None otherwise."""
    if (
        (type(source) is str or source is None)
        and (type(name) is str or name is None)
        and (type(envname) is str or envname is None)
        and (type(base64decode) is bool or base64decode is None)
    ):
        return shared_argument(source or "", name or "", envname or "", bool(base64decode))
    return None
