"""Hooks files decode as webhook decodes them, and the registry swaps whole, consistent sets."""

from pathlib import Path

import pytest

from hookrunner.config import Header
from hookrunner.errors import DuplicateHookError, HooksFileError
from hookrunner.hooks.load import Argument, HookRegistry, parse_hooks

FULL_YAML = """
- id: full
  execute-command: /bin/echo
  command-working-directory: /tmp
  response-message: done
  response-headers:
  - name: X-A
    value: 1
  include-command-output-in-response: true
  include-command-output-in-response-on-error: yes
  pass-arguments-to-command:
  - source: payload
    name: ref
  pass-environment-to-command:
  - source: header
    name: X-Event
    envname: EVENT
  pass-file-to-command:
  - source: payload
    name: blob
    base64decode: true
  parse-parameters-as-json:
  - source: payload
    name: inner
  trigger-rule-mismatch-http-response-code: 400
  trigger-signature-soft-failures: true
  incoming-payload-content-type: application/json
  success-http-response-code: 201
  http-methods: ["Post ", get]
  trigger_rule: {}
"""


def test_every_field_is_read() -> None:
    (hook,) = parse_hooks(FULL_YAML)
    assert hook.id == "full"
    assert hook.execute_command == "/bin/echo"
    assert hook.command_working_directory == "/tmp"
    assert hook.response_message == "done"
    assert hook.response_headers == (Header("X-A", "1"),)
    assert hook.capture_output is True
    assert hook.capture_output_on_error is True  # YAML 1.1 `yes`, as Go's yaml.v2 reads it
    assert hook.pass_arguments == (Argument("payload", "ref"),)
    assert hook.pass_environment == (Argument("header", "X-Event", "EVENT"),)
    assert hook.pass_file == (Argument("payload", "blob", "", True),)
    assert hook.json_parameters == (Argument("payload", "inner"),)
    assert hook.mismatch_status == 400
    assert hook.signature_soft_failures is True
    assert hook.incoming_payload_content_type == "application/json"
    assert hook.success_status == 201
    assert hook.http_methods == ("Post ", "get")
    assert hook.trigger_rule is None
    assert "trigger_rule" in hook.extra  # the misspelling webhook silently ignores


def test_json_and_yaml_read_the_same() -> None:
    json_text = (
        '[{"id": "a", "execute-command": "/bin/true", "response-headers": [{"name": "X", "value": "z"}]}]'
    )
    yaml_text = "- id: a\n  execute-command: /bin/true\n  response-headers:\n  - {name: X, value: z}\n"
    assert parse_hooks(json_text) == parse_hooks(yaml_text)


def test_keys_match_case_insensitively_like_encoding_json() -> None:
    (hook,) = parse_hooks('[{"ID": "x", "Execute-Command": "/bin/true", "RESPONSE-MESSAGE": "m"}]')
    assert (hook.id, hook.execute_command, hook.response_message) == ("x", "/bin/true", "m")


@pytest.mark.parametrize(
    "text",
    [
        '{"id": "not a list"}',
        '[{"id": "a", "success-http-response-code": "200"}]',
        '[{"id": "a", "include-command-output-in-response": "true"}]',
        '[{"id": "a", "http-methods": "POST"}]',
        '[{"id": "a", "pass-arguments-to-command": {"source": "x"}}]',
        "- id: [unclosed",
    ],
)
def test_type_errors_fail_the_whole_file(text: str) -> None:
    with pytest.raises(HooksFileError):
        parse_hooks(text)


def test_dates_stay_strings() -> None:
    (hook,) = parse_hooks("- id: 2026-11-22\n")
    assert hook.id == "2026-11-22"


def test_empty_file_has_no_hooks() -> None:
    assert parse_hooks("") == []


def write(path: Path, ids: list[str]) -> str:
    path.write_text("".join(f"- id: {i}\n  execute-command: /bin/true\n" for i in ids))
    return str(path)


def test_registry_loads_and_matches(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one", "two"])
    b = write(tmp_path / "b.yaml", ["three"])
    registry = HookRegistry([a, b])
    registry.load_initial()
    assert len(registry) == 3
    assert registry.match("three") is not None
    assert registry.match("nope") is None


def test_duplicate_across_files_is_fatal_at_startup(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    b = write(tmp_path / "b.yaml", ["one"])
    with pytest.raises(DuplicateHookError, match="one has already been loaded"):
        HookRegistry([a, b]).load_initial()


def test_broken_file_at_startup_is_skipped_but_kept_watchable(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    broken = tmp_path / "b.yaml"
    broken.write_text("- id: [")
    registry = HookRegistry([a, str(broken)])
    registry.load_initial()
    assert len(registry) == 1
    write(broken, ["two"])
    assert registry.reload_file(str(broken)) is True
    assert registry.match("two") is not None


def test_reload_keeps_previous_hooks_on_error(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    registry = HookRegistry([write(path, ["one"])])
    registry.load_initial()
    path.write_text("- id: [")
    assert registry.reload_file(str(path)) is False
    assert registry.match("one") is not None


def test_reload_reverts_on_duplicates(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    b = tmp_path / "b.yaml"
    registry = HookRegistry([a, write(b, ["two"])])
    registry.load_initial()
    write(b, ["one"])  # taken by a.yaml
    assert registry.reload_file(str(b)) is False
    write(b, ["two", "two"])  # twice in the same file
    assert registry.reload_file(str(b)) is False
    assert registry.match("two") is not None
    write(b, ["three"])
    assert registry.reload_file(str(b)) is True
    assert registry.match("two") is None and registry.match("three") is not None


def test_remove_and_recreate(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    registry = HookRegistry([write(path, ["one", "two"])])
    registry.load_initial()
    assert registry.remove_file(str(path)) == 2
    assert len(registry) == 0
    write(path, ["one"])
    assert registry.reload_file(str(path)) is True
    assert registry.match("one") is not None


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    registry = HookRegistry([str(tmp_path / "nope.json")])
    registry.load_initial()
    assert len(registry) == 0


def test_yaml_y_is_a_boolean_as_in_go() -> None:
    (hook,) = parse_hooks("- id: a\n  response-headers:\n  - {name: X, value: y}\n")
    assert hook.response_headers == (Header("X", "true"),)  # yaml.v2 reads `y` as true


def test_double_quoted_escapes_are_yaml_v2s() -> None:
    # Go's `js` writes \' for an apostrophe, which yaml.v2 (and so webhook) accepts; it refuses \/.
    (hook,) = parse_hooks('[{"id": "it\\\'s"}]')
    assert hook.id == "it's"
    with pytest.raises(HooksFileError):
        parse_hooks('[{"id": "a\\/b"}]')


def test_crlf_files_load(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    path.write_bytes(b"- id: a\r\n  execute-command: /bin/true\r\n")
    registry = HookRegistry([str(path)])
    registry.load_initial()
    assert registry.match("a") is not None


def test_tabs_where_yaml_v2_skips_them() -> None:
    # Inside [...] and {...} yaml.v2 takes a tab as white space, as it does after text on a block line:
    # upstream's own test hooks file indents some hooks with tabs.
    text = '[\n  {\n\t\t"id":\t"a",\n\t\t"execute-command": "/bin/echo"\t\n  }\n]\n'
    assert [(hook.id, hook.execute_command) for hook in parse_hooks(text)] == [("a", "/bin/echo")]
    assert [hook.id for hook in parse_hooks("- id: b\t\n  execute-command: /bin/true\t# note\n")] == ["b"]


def test_tab_as_block_indentation_fails_as_in_yaml_v2() -> None:
    with pytest.raises(HooksFileError, match="found a tab character that violates indentation"):
        parse_hooks("- id: a\n\texecute-command: /bin/true\n")


def test_tagged_scalars_as_yaml_v2_reads_them() -> None:
    # A tag names the type the text must resolve to; a constructor's ValueError was once a crash.
    assert parse_hooks("- id: !!str 5\n  success-http-response-code: !!int '201'\n")[0].success_status == 201
    for bad in ("- id: !!float ',1'\n", "- id: !!float '1'\n", "- id: !!null '['\n", "- id: !!binary 'GVsG='\n"):
        with pytest.raises(HooksFileError):
            parse_hooks(bad)


def test_replay_defaults_to_true_and_false_opts_out() -> None:
    default, off, on = parse_hooks(
        '[{"id": "a"}, {"id": "b", "replay": false}, {"id": "c", "replay": true}]'
    )
    assert (default.replay, off.replay, on.replay) == (True, False, True)
    assert "replay" not in off.extra
    with pytest.raises(HooksFileError, match="Hook.replay"):
        parse_hooks('[{"id": "a", "replay": "no"}]')
