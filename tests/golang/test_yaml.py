"""Hooks files are read as Go's yaml.v2 (through ghodss/yaml) reads them: JSON as YAML, its scalars, escapes,
tabs and tags."""

import pytest

from hookrunner.config import Header
from hookrunner.errors import HooksFileError
from hookrunner.hooks.load import parse_hooks


def test_json_and_yaml_read_the_same() -> None:
    json_text = (
        '[{"id": "a", "execute-command": "/bin/true", "response-headers": [{"name": "X", "value": "z"}]}]'
    )
    yaml_text = "- id: a\n  execute-command: /bin/true\n  response-headers:\n  - {name: X, value: z}\n"
    assert parse_hooks(json_text) == parse_hooks(yaml_text)


def test_dates_stay_strings() -> None:
    (hook,) = parse_hooks("- id: 2026-11-22\n")
    assert hook.id == "2026-11-22"


def test_yaml_y_is_a_boolean_as_in_go() -> None:
    (hook,) = parse_hooks("- id: a\n  response-headers:\n  - {name: X, value: y}\n")
    assert hook.response_headers == (Header("X", "true"),)  # yaml.v2 reads `y` as true


def test_double_quoted_escapes_are_yaml_v2s() -> None:
    # Go's `js` writes \' for an apostrophe, which yaml.v2 (and so webhook) accepts; it refuses \/.
    (hook,) = parse_hooks('[{"id": "it\\\'s"}]')
    assert hook.id == "it's"
    with pytest.raises(HooksFileError):
        parse_hooks('[{"id": "a\\/b"}]')


def test_tabs_where_yaml_v2_skips_them() -> None:
    # Inside [...] and {...} yaml.v2 takes a tab as white space, as it does after text on a block line:
    # upstream's own test hooks file indents some hooks with tabs.
    text = '[\n  {\n\t\t"id":\t"a",\n\t\t"execute-command": "/bin/echo"\t\n  }\n]\n'
    assert [(hook.id, hook.execute_command) for hook in parse_hooks(text)] == [("a", "/bin/echo")]
    assert [hook.id for hook in parse_hooks("- id: b\t\n  execute-command: /bin/true\t# note\n")] == ["b"]


def test_tab_as_block_indentation_fails_as_in_yaml_v2() -> None:
    with pytest.raises(HooksFileError, match="yaml: line 1: found a tab character that violate indentation"):
        parse_hooks("- id: a\n\texecute-command: /bin/true\n")


def test_tagged_scalars_as_yaml_v2_reads_them() -> None:
    # A tag names the type the text must resolve to; a constructor's ValueError was once a crash.
    assert parse_hooks("- id: !!str 5\n  success-http-response-code: !!int '201'\n")[0].success_status == 201
    for bad in ("- id: !!float ',1'\n", "- id: !!float '1'\n", "- id: !!null '['\n", "- id: !!binary 'GVsG='\n"):
        with pytest.raises(HooksFileError):
            parse_hooks(bad)
