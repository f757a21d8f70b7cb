"""Tests for hookrunner.golang.fmt: values rendered as webhook's ExtractParameterAsString prints them."""

from __future__ import annotations

from typing import Any

import pytest

from hookrunner.golang.fmt import render_value
from hookrunner.golang.json import JSONNumber, NilMap

# --- rendering (verified: arguments as the reference passes them to the command) ---

RENDER_CASES: list[tuple[Any, str]] = [
    ("plain", "plain"),
    ("<&>", "<&>"),
    (JSONNumber("1.50"), "1.50"),
    (JSONNumber("12345678901234567890123"), "12345678901234567890123"),
    (True, "true"),
    (False, "false"),
    (None, "<nil>"),
    (NilMap(), "null"),
    ({"b": "<", "a": JSONNumber("1")}, '{"a":1,"b":"\\u003c"}'),
    (["x", JSONNumber("2")], '["x",2]'),
    ([], "[]"),
    (42, "42"),
    (1e6, "1e+06"),
    (100000.0, "100000"),
    (0.5, "0.5"),
    (1e-5, "1e-05"),
]


@pytest.mark.parametrize(("value", "rendered"), RENDER_CASES)
def test_render_value(value: Any, rendered: str) -> None:
    assert render_value(value) == rendered
