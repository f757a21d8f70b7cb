"""Go's %v printing of a decoded value, as webhook's ExtractParameterAsString does it."""

from __future__ import annotations

from typing import Any

from hookrunner.golang.json import JSONNumber, go_float, go_json_dumps

__all__ = ["render_value"]


def render_value(value: Any) -> str:
    """A value as webhook's ExtractParameterAsString prints it: maps and lists as JSON, the rest as %v."""
    if isinstance(value, dict | list | tuple):
        return go_json_dumps(value)
    if isinstance(value, JSONNumber):
        return str.__str__(value)
    if isinstance(value, str):
        return value
    if value is None:
        return "<nil>"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return go_float(value, "v")
    return str(value)
