"""Hook and Argument models, reading hooks files (JSON or YAML), and the registry that serves them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hookrunner.config import Header


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Hook:
    """One entry of a hooks file, with every field of upstream's Hook-Definition.md."""

    id: str = ""
    execute_command: str = ""
    command_working_directory: str = ""
    response_message: str = ""
    response_headers: tuple[Header, ...] = ()
    capture_output: bool = False
    capture_output_on_error: bool = False
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
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
