"""Properties of the hooks-file loader that must hold on any input: any bytes, as JSON, YAML or a
template, give hooks or a HooksFileError, never another exception."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.errors import HooksFileError
from hookrunner.hooks.load import load_hooks, parse_hooks
from hookrunner.hooks.model import Hook

SCALARS = st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | st.text(max_size=6)
ANY_JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)
FIELDS = [
    "id", "execute-command", "command-working-directory", "response-message", "response-headers",
    "pass-arguments-to-command", "pass-environment-to-command", "pass-file-to-command", "parse-parameters-as-json",
    "trigger-rule", "trigger-rule-mismatch-http-response-code", "success-http-response-code", "http-methods",
    "incoming-payload-content-type", "include-command-output-in-response",
    "include-command-output-in-response-on-error", "trigger-signature-soft-failures", "command-timeout",
    "max-concurrency", "max-queue", "coalesce", "retry-after", "unknown",
]
ARGUMENT = st.fixed_dictionaries(
    {}, optional={"source": st.sampled_from(["payload", "url", "string", "header", "x"]) | ANY_JSON,
                  "name": ANY_JSON, "envname": ANY_JSON, "base64decode": ANY_JSON}
)
HOOK = st.dictionaries(
    st.sampled_from(FIELDS),
    ANY_JSON | st.lists(ARGUMENT, max_size=2) | st.sampled_from(["1s", "-1", "5m", "x", 200, 0, "/bin/true"]),
    max_size=6,
)
HOOK_LISTS = st.lists(HOOK | ANY_JSON, max_size=3) | ANY_JSON


@st.composite
def hooks_texts(draw: st.DrawFn) -> str:
    value = draw(HOOK_LISTS)
    text = json.dumps(value) if draw(st.booleans()) else yaml.safe_dump(value)
    if text and draw(st.booleans()):  # cut short, or a byte changed: a file caught mid-write
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.sampled_from(["", "{", "]", ":", "\t", "&a", "*a", "!!python/object ", "{{"]))
    return text


@given(hooks_texts() | st.text(max_size=40))
@example("- &a [*a]")
@example("[!!binary aGk=]")
@example("{{")
@example('[{"id": "a", "trigger-rule": {"and": 1}}]')
@example("- id: a\n  success-http-response-code: 1e400\n")
def test_any_hooks_text_loads_or_fails_typed(text: str) -> None:
    try:
        hooks = parse_hooks(text)
    except HooksFileError:
        return
    assert all(isinstance(hook, Hook) for hook in hooks)


@given(st.binary(max_size=60) | hooks_texts().map(lambda t: t.encode("utf-8")), st.booleans())
@example(b"\xff\xfe[]", False)
@example(b'{{ cat "/nonexistent" }}', True)
def test_any_hooks_file_loads_or_fails_typed(data: bytes, as_template: bool) -> None:
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        try:
            hooks = load_hooks(path, as_template)
        except HooksFileError:
            return
        assert all(isinstance(hook, Hook) for hook in hooks)
    finally:
        os.unlink(path)
