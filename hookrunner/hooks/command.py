"""Where a hook's execute-command is found: webhook's rule on top of Go's exec.LookPath."""

from __future__ import annotations

import os

from hookrunner.golang.exec import look_path
from hookrunner.hooks.model import Hook


def resolve_command(hook: Hook) -> str:
    """webhook's rule: absolute as is; else relative to command-working-directory; else from PATH."""
    command = hook.execute_command
    if os.path.isabs(command) or not hook.command_working_directory:
        return look_path(command)
    return look_path(os.path.join(hook.command_working_directory, command))
