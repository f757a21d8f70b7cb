"""-validate: each kind of mistake is reported once, as `FILE: hook ID: problem`, and a clean file passes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hookrunner.hooks.validate import run_validation, suggest, validate_files


def lines_for(tmp_path: Path, hooks: object, name: str = "hooks.json", template: bool = False) -> list[str]:
    path = tmp_path / name
    path.write_text(hooks if isinstance(hooks, str) else json.dumps(hooks))
    problems, _ = validate_files([str(path)], template)
    prefix = f"{path}: "
    return [p.line().removeprefix(prefix) for p in problems]


def hook(**fields: object) -> dict[str, object]:
    return {"id": "h", "execute-command": "/bin/true", **fields}


HEADER = {"source": "header", "name": "X-Token"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, []),
        ({"trigger_rule": {}}, ['hook h: unknown key "trigger_rule" is ignored (did you mean "trigger-rule"?)']),
        ({"Trigger-Rule": {"match": {"type": "value", "value": "v", "parameter": HEADER}}}, []),  # Go folds case
        ({"respone-message": "x"}, ['hook h: unknown key "respone-message" is ignored '
                                    '(did you mean "response-message"?)']),
        ({"colour": "x"}, ['hook h: unknown key "colour" is ignored']),
        ({"trigger-rule": {"match": {"type": "regex", "regex": "a(", "parameter": HEADER}}},
         ["hook h: trigger-rule.match: bad regex: error parsing regexp: missing closing ): `a(`"]),
        ({"trigger-rule": {"match": {"type": "regex", "regex": "(?<name>x)", "parameter": HEADER}}},
         ["hook h: trigger-rule.match: bad regex: error parsing regexp: invalid or unsupported Perl syntax: "
          "`(?<`"]),
        ({"trigger-rule": {"or": [{"match": {"type": "hmac-sha256", "secret": "s", "parameter": HEADER}}]}},
         ['hook h: trigger-rule.or[0].match: unknown type "hmac-sha256" (did you mean "payload-hmac-sha256"?) '
          "is never satisfied; known: value, regex, payload-hmac-sha1, payload-hmac-sha256, "
          "payload-hmac-sha512, payload-hash-sha1, payload-hash-sha256, payload-hash-sha512, ip-whitelist, "
          "scalr-signature"]),
        ({"trigger-rule": {"match": {"type": "payload-hmac-sha1", "parameter": HEADER}}},
         ["hook h: trigger-rule.match: payload-hmac-sha1 without a secret"]),
        ({"trigger-rule": {"not": {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/40"}}}},
         ["hook h: trigger-rule.not.match: invalid CIDR address: 10.0.0.0/40"]),
        ({"trigger-rule": {"match": {"type": "value", "value": "v",
                                     "parameter": {"source": "body", "name": "a", "env": "X"}}}},
         ['hook h: trigger-rule.match.parameter: unknown key "env" is ignored (did you mean "envname"?)',
          'hook h: trigger-rule.match: parameter: unknown source "body" (did you mean "raw-request-body"?); '
          "known: header, url, query, payload, request, string, raw-request-body, entire-payload, "
          "entire-headers, entire-query"]),
        ({"trigger-rule": {"and": [], "match": {"type": "value", "value": "v", "parameter": HEADER}}},
         ['hook h: trigger-rule: only "and" is used; "match" ignored',
          'hook h: trigger-rule: empty "and" is always true']),
        ({"trigger-rule": {}}, ["hook h: trigger-rule: an empty rule is never satisfied"]),
        ({"pass-arguments-to-command": [{"source": "request", "name": "path"}]},
         ['hook h: pass-arguments-to-command[0]: request has no "path"; known: method, remote-addr']),
        ({"parse-parameters-as-json": [{"source": "string", "name": "x"}]},
         ['hook h: parse-parameters-as-json[0]: unknown source "string"; known: header, url, query, payload']),
        ({"pass-environment-to-command": [{"source": "payload", "name": "a", "env_name": "A"}]},
         ['hook h: pass-environment-to-command[0]: unknown key "env_name" is ignored (did you mean "envname"?)']),
        ({"success-http-response-code": 299},
         ["hook h: success-http-response-code 299 is not a known HTTP status; 200 is sent instead"]),
        ({"coalesce": True}, ["hook h: max-queue and coalesce have no effect without max-concurrency"]),
        ({"max-concurrency": 1, "coalesce": True, "command-timeout": "5m"}, []),
        ({"max-concurrency": 1, "max-queue": 2, "coalesce-by": {"source": "payload", "name": "ref"}}, []),
        ({"max-concurrency": 1, "coalesce-by": {"source": "body", "name": "ref", "env": "X"}},
         ['hook h: coalesce-by: unknown key "env" is ignored (did you mean "envname"?)',
          'hook h: coalesce-by: unknown source "body" (did you mean "raw-request-body"?); known: header, url, '
          "query, payload, request, string, raw-request-body, entire-payload, entire-headers, entire-query"]),
        ({"coalesce-by": {"source": "payload", "name": "ref"}},
         ["hook h: max-queue and coalesce have no effect without max-concurrency"]),
        ({"execute-command": ""}, ["hook h: no execute-command: nothing would run"]),
        ({"execute-command": "no-such-command-here"},
         ['hook h: command not found or not executable: exec: "no-such-command-here": executable file not '
          "found in $PATH"]),
        ({"execute-command": "git pull --ff-only"},
         ['hook h: command not found or not executable: exec: "git pull --ff-only": executable file not found '
          "in $PATH; use 'pass-arguments-to-command' to specify args"]),
        ({"command-working-directory": "/no/such/dir", "execute-command": "/bin/true"},
         ["hook h: command-working-directory /no/such/dir is not a directory"]),
    ],
)
def test_hook_problems(tmp_path: Path, fields: dict[str, object], expected: list[str]) -> None:
    assert lines_for(tmp_path, [hook(**fields)]) == expected


def test_command_relative_to_working_directory_is_resolved_as_serving_does(tmp_path: Path) -> None:
    script = tmp_path / "deploy.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    found = lines_for(tmp_path, [hook(**{"execute-command": "deploy.sh", "command-working-directory": str(tmp_path)})])
    assert found == [f'hook h: command not found or not executable: exec: "{script}": permission denied']
    script.chmod(0o755)
    assert lines_for(tmp_path, [hook(**{"execute-command": "deploy.sh",
                                         "command-working-directory": str(tmp_path)})]) == []


def test_file_level_problems(tmp_path: Path) -> None:
    assert lines_for(tmp_path, "- id: [unclosed\n", "bad.yaml")[0].startswith("error converting YAML to JSON: ")
    assert lines_for(tmp_path, '{"id": "x"}') == ["the file must hold a list of hooks"]
    assert lines_for(tmp_path, "") == ["no hooks in the file"]
    problems, _ = validate_files([str(tmp_path / "missing.json")])
    assert [p.line() for p in problems] == [f"{tmp_path / 'missing.json'}: open {tmp_path / 'missing.json'}: "
                                            "no such file or directory"]


def test_a_wrongly_typed_value_refuses_the_file_but_the_other_hooks_are_still_checked(tmp_path: Path) -> None:
    found = lines_for(tmp_path, [hook(**{"max-concurrency": "one"}), {"execute-command": "/bin/true"}, 7])
    assert found == [
        "hook h: json: cannot unmarshal string into Go struct field Hook.max-concurrency of type int; "
        "the whole file is refused",
        "hook #2: no id",
        "hook #3: not an object; the whole file is refused",
    ]


def test_duplicate_ids_within_and_across_files(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.yaml"
    first.write_text(json.dumps([hook(), hook()]))
    second.write_text("- id: h\n  execute-command: /bin/true\n")
    problems, count = validate_files([str(first), str(second)])
    assert count == 3
    assert [p.line() for p in problems] == [
        f"{first}: hook h: duplicate id in this file; only the first one is served",
        f"{second}: hook h: duplicate id, already loaded from {first}; the server refuses to start",
    ]


def test_template_is_rendered_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VALIDATE_SECRET", "s3cret")
    text = ('[{"id": "t", "execute-command": "/bin/true", "trigger-rule": {"match": '
            '{"type": "payload-hmac-sha256", "secret": "{{ getenv "VALIDATE_SECRET" }}", '
            '"parameter": {"source": "header", "name": "X-Sig"}}}}]')
    assert lines_for(tmp_path, text, template=True) == []
    assert lines_for(tmp_path, '[{"id": "{{ .Missing.Field }"}]', template=True)[0].startswith("template: ")


def test_run_validation_exit_status_and_streams(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps([hook()]))
    out, err = io.StringIO(), io.StringIO()
    assert run_validation([str(path)], out=out, err=err) == 0
    assert (out.getvalue(), err.getvalue()) == ("", "no problems in 1 file(s) (1 hook(s))\n")
    path.write_text(json.dumps([hook(trigger_rule={})]))
    out, err = io.StringIO(), io.StringIO()
    assert run_validation([str(path)], out=out, err=err) == 1
    assert out.getvalue().count("\n") == 1
    assert err.getvalue() == "1 problem(s) in 1 file(s) (1 hook(s) read)\n"


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("trigger_rule", ' (did you mean "trigger-rule"?)'),
        ("EXECUTE_COMMAND", ' (did you mean "execute-command"?)'),
        ("max-concurency", ' (did you mean "max-concurrency"?)'),
        ("something-else", ""),
    ],
)
def test_suggest(key: str, hint: str) -> None:
    from hookrunner.hooks.validate import HOOK_KEYS

    assert suggest(key, HOOK_KEYS) == hint


def test_a_misspelling_wins_over_a_longer_name_containing_it() -> None:
    from hookrunner.hooks.validate import SOURCES

    assert suggest("headers", SOURCES) == ' (did you mean "header"?)'  # not "entire-headers"
    assert suggest("body", SOURCES) == ' (did you mean "raw-request-body"?)'


def test_replay_is_a_known_hook_field(tmp_path: Path) -> None:
    assert lines_for(tmp_path, [hook(replay=False)]) == []
    assert any('unknown key "replai"' in line for line in lines_for(tmp_path, [hook(replai=False)]))
