"""A hook's Argument: a value taken from the request (a source and a name), as webhook's hook.Argument."""

from __future__ import annotations

from dataclasses import dataclass


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
