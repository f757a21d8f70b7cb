"""A hooks file's entries decode into Hooks as webhook's encoding/json decodes them, field by field."""

import pytest

from hookrunner.config import Header
from hookrunner.errors import HooksFileError
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.load import parse_hooks
from hookrunner.hooks.model import decode_hook

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


def test_replay_defaults_to_true_and_false_opts_out() -> None:
    default, off, on = parse_hooks(
        '[{"id": "a"}, {"id": "b", "replay": false}, {"id": "c", "replay": true}]'
    )
    assert (default.replay, off.replay, on.replay) == (True, False, True)
    assert "replay" not in off.extra
    with pytest.raises(HooksFileError, match="Hook.replay"):
        parse_hooks('[{"id": "a", "replay": "no"}]')


def test_stream_command_output_is_soulteary_s_boolean_and_off_by_default() -> None:
    default, on = parse_hooks('[{"id": "a"}, {"id": "b", "stream-command-output": true}]')
    assert (default.stream_output, on.stream_output) == (False, True)
    assert "stream-command-output" not in on.extra
    with pytest.raises(HooksFileError, match="Hook.stream-command-output"):
        parse_hooks('[{"id": "a", "stream-command-output": "yes"}]')


def test_coalesce_by_is_an_argument_and_turns_coalescing_on() -> None:
    plain, by = parse_hooks(
        '[{"id": "a", "max-concurrency": 1, "coalesce": true},'
        ' {"id": "b", "max-concurrency": 1, "coalesce-by": {"source": "payload", "name": "ref"}}]'
    )
    assert (plain.limits.coalesce, plain.limits.coalesce_by) == (True, None)
    assert (by.limits.coalesce, by.limits.coalesce_by) == (True, Argument("payload", "ref"))
    assert "coalesce-by" not in by.extra
    with pytest.raises(HooksFileError, match="coalesce-by"):
        parse_hooks('[{"id": "a", "coalesce-by": "ref"}]')


def test_of_two_bad_fields_the_first_in_go_s_order_is_told_whatever_the_keys_order() -> None:
    # The fields are decoded in HOOK_FIELDS' order (decode_hook's plan per set of keys), not the file's.
    for data in (
        {"http-methods": 1, "id": [], "execute-command": {}},
        {"execute-command": {}, "id": [], "http-methods": 1},
    ):
        with pytest.raises(HooksFileError, match=r"field Hook\.id of type string"):
            decode_hook(data)
    with pytest.raises(HooksFileError, match=r"field Hook\.execute-command of type string"):
        decode_hook({"http-methods": 1, "execute-command": {}})
