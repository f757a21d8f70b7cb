"""-validate: load the hooks files as serving would (template included) and report every problem found.

webhook loads what it can and stays silent about the rest: `trigger_rule` for `trigger-rule` is ignored,
so the hook runs for everyone; a bad regex fails only when a request reaches it (upstream #407, #718).
Each problem is one line on stdout, `FILE: hook ID: problem`; the exit status is 0 when there are none.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from hookrunner.errors import CommandNotFound, HooksFileError
from hookrunner.golang.decode import fields, go_string
from hookrunner.golang.status import is_known_status
from hookrunner.golang.yaml import YamlV2Loader
from hookrunner.hooks.argument import Argument
from hookrunner.hooks.command import resolve_command
from hookrunner.hooks.load import read_hooks_text
from hookrunner.hooks.model import ARGUMENT_FIELDS, HOOK_FIELDS, LIMIT_FIELDS, Hook, decode_hook
from hookrunner.hooks.rules import (
    MATCH_IP_WHITELIST,
    MATCH_REGEX,
    MATCH_SCALR_SIGNATURE,
    MATCH_TYPES,
    SIGNATURE_TYPES,
    AndRule,
    EmptyRule,
    MatchRule,
    NotRule,
    OrRule,
)

#: The parameter sources webhook knows (`query` is an alias of `url`).
SOURCES = (
    "header", "url", "query", "payload", "request", "string",
    "raw-request-body", "entire-payload", "entire-headers", "entire-query",
)
#: What `request` can name (matched ignoring case, as webhook does).
REQUEST_NAMES = ("method", "remote-addr")
#: parse-parameters-as-json can only replace a value in these.
JSON_SOURCES = ("header", "url", "query", "payload")
#: Evaluation order: a rule object with several of these uses the first one only.
_RULE_KEYS = ("and", "or", "not", "match")
_MATCH_KEYS = ("type", "regex", "secret", "value", "parameter", "ip-range")
HOOK_KEYS = (*HOOK_FIELDS, *LIMIT_FIELDS)
_ARGUMENT_LISTS = (
    "pass-arguments-to-command", "pass-environment-to-command", "pass-file-to-command",
    "parse-parameters-as-json",
)


@dataclass(frozen=True)
class Problem:
    """One finding; `hook` is the hook's id (or `#N` for an entry without one), "" for the whole file."""

    file: str
    hook: str
    text: str

    def line(self) -> str:
        where = f"{self.file}: hook {self.hook}: " if self.hook else f"{self.file}: "
        return where + self.text


def suggest(key: str, known: Iterable[str]) -> str:
    """` (did you mean "x"?)` for a near-miss of a known key, else ""."""
    names = list(known)
    normal = key.strip().lower().replace("_", "-").replace(" ", "-")
    if normal in names:
        return f' (did you mean "{normal}"?)'
    close = difflib.get_close_matches(normal, names, n=1, cutoff=0.75)
    if close:
        return f' (did you mean "{close[0]}"?)'
    # Else a part of the right name (`hmac-sha256`, `env`, `body`) is as likely a slip.
    containing = [name for name in names if len(normal) >= 3 and normal in name]
    return f' (did you mean "{containing[0]}"?)' if len(containing) == 1 else ""


def _unknown_keys(data: Mapping[Any, Any], known: Sequence[str], where: str) -> list[str]:
    """Keys Go's decoder would drop (it matches names exactly, else ignoring case)."""
    folded = {name.lower() for name in known}
    return [
        f'{where}unknown key "{go_string(key)}" is ignored{suggest(go_string(key), known)}'
        for key in data
        if go_string(key).lower() not in folded
    ]


def _raw_value(data: Any, key: str) -> Any:
    """The value Go's decoder would take for `key` (exact, else case-insensitive, later wins)."""
    if not isinstance(data, Mapping):
        return None
    value = None
    for _, found in fields(data, (key,)):
        value = found
    return value


def _argument_problems(arg: Argument, where: str, sources: Sequence[str] = SOURCES) -> list[str]:
    if arg.source not in sources:
        known = ", ".join(sources)
        return [f'{where}unknown source "{arg.source}"{suggest(arg.source, sources)}; known: {known}']
    if arg.source == "request" and arg.name.lower() not in REQUEST_NAMES:
        return [f'{where}request has no "{arg.name}"; known: {", ".join(REQUEST_NAMES)}']
    return []


def _raw_rule_problems(data: Any, path: str) -> list[str]:
    """Unknown keys and ignored operators in a rule as written (the decoded rule no longer shows them)."""
    if not isinstance(data, Mapping):
        return []
    problems = _unknown_keys(data, _RULE_KEYS, f"{path}: ")
    present = [name for name, _ in fields(data, _RULE_KEYS)]
    used = [name for name in _RULE_KEYS if name in present]
    if len(used) > 1:
        ignored = ", ".join(f'"{name}"' for name in used[1:])
        problems.append(f'{path}: only "{used[0]}" is used; {ignored} ignored')
    for name, value in fields(data, _RULE_KEYS):
        if name in ("and", "or") and isinstance(value, list):
            for index, item in enumerate(value):
                problems += _raw_rule_problems(item, f"{path}.{name}[{index}]")
        elif name == "not":
            problems += _raw_rule_problems(value, f"{path}.not")
        elif name == "match" and isinstance(value, Mapping):
            problems += _unknown_keys(value, _MATCH_KEYS, f"{path}.match: ")
            parameter = _raw_value(value, "parameter")
            if isinstance(parameter, Mapping):
                problems += _unknown_keys(parameter, ARGUMENT_FIELDS, f"{path}.match.parameter: ")
    return problems


def _rule_problems(rule: Any, path: str) -> list[str]:
    """What the decoded rule would do wrong at request time."""
    if isinstance(rule, AndRule | OrRule):
        name = "and" if isinstance(rule, AndRule) else "or"
        found = []
        if not rule.rules:
            found.append(f'{path}: empty "{name}" is ' + ("always true" if name == "and" else "never true"))
        for index, item in enumerate(rule.rules):
            found += _rule_problems(item, f"{path}.{name}[{index}]")
        return found
    if isinstance(rule, NotRule):
        return _rule_problems(rule.rule, f"{path}.not")
    if isinstance(rule, EmptyRule):
        return [f"{path}: an empty rule is never satisfied"]
    if not isinstance(rule, MatchRule):
        return []
    where = f"{path}.match: "
    problems: list[str] = []
    if rule.type not in MATCH_TYPES:
        problems.append(
            f'{where}unknown type "{rule.type}"{suggest(rule.type, MATCH_TYPES)} is never satisfied; '
            f"known: {', '.join(MATCH_TYPES)}"
        )
    if rule.type == MATCH_REGEX:
        error = rule._pattern_error  # compiled once at load time; webhook would fail at request time
        if error is not None:
            problems.append(f"{where}bad regex: {error}")
    if rule.type == MATCH_IP_WHITELIST:
        if not rule.ip_range.strip():
            problems.append(f"{where}ip-whitelist without ip-range is never satisfied")
        problems += [f"{where}{net}" for net in rule._networks if isinstance(net, str)]
        return problems
    if rule.type in SIGNATURE_TYPES and not rule.secret:
        problems.append(f"{where}{rule.type} without a secret")
    if rule.type != MATCH_SCALR_SIGNATURE:
        problems += _argument_problems(rule.parameter, f"{where}parameter: ")
    return problems


def _command_problems(hook: Hook) -> list[str]:
    if not hook.execute_command:
        return ["no execute-command: nothing would run"]
    problems = []
    directory = hook.command_working_directory
    if directory and not os.path.isdir(directory):
        problems.append(f"command-working-directory {directory} is not a directory")
    try:
        resolve_command(hook)
    except CommandNotFound as exc:
        text = f"command not found or not executable: {exc}"
        if " " in hook.execute_command:
            text += "; use 'pass-arguments-to-command' to specify args"
        problems.append(text)
    return problems


def hook_problems(hook: Hook, raw: Mapping[Any, Any]) -> list[str]:
    """Every problem of one decoded hook; `raw` is its entry as written, for keys the decoding dropped."""
    problems = _unknown_keys(raw, HOOK_KEYS, "")
    problems += _command_problems(hook)
    for key in _ARGUMENT_LISTS:
        items = _raw_value(raw, key)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            if isinstance(item, Mapping):
                problems += _unknown_keys(item, ARGUMENT_FIELDS, f"{key}[{index}]: ")
    arguments = (
        ("pass-arguments-to-command", hook.pass_arguments, SOURCES),
        ("pass-environment-to-command", hook.pass_environment, SOURCES),
        ("pass-file-to-command", hook.pass_file, SOURCES),
        ("parse-parameters-as-json", hook.json_parameters, JSON_SOURCES),
    )
    for key, args, sources in arguments:
        for index, arg in enumerate(args):
            problems += _argument_problems(arg, f"{key}[{index}]: ", sources)
    for key, code in (
        ("success-http-response-code", hook.success_status),
        ("trigger-rule-mismatch-http-response-code", hook.mismatch_status),
    ):
        if code and not is_known_status(code):
            problems.append(f"{key} {code} is not a known HTTP status; 200 is sent instead")
    limits = hook.limits
    if not limits.max_concurrency and (limits.max_queue or limits.coalesce):
        problems.append("max-queue and coalesce have no effect without max-concurrency")
    by = _raw_value(raw, "coalesce-by")
    if isinstance(by, Mapping):
        problems += _unknown_keys(by, ARGUMENT_FIELDS, "coalesce-by: ")
    if limits.coalesce_by is not None:
        problems += _argument_problems(limits.coalesce_by, "coalesce-by: ")
    if hook.trigger_rule is not None:
        problems += _raw_rule_problems(_raw_value(raw, "trigger-rule"), "trigger-rule")
        problems += _rule_problems(hook.trigger_rule, "trigger-rule")
    return problems


def validate_files(paths: Sequence[str], as_template: bool = False) -> tuple[list[Problem], int]:
    """Every problem in the hooks files, in file order, and how many hooks were decoded."""
    problems: list[Problem] = []
    first_seen: dict[str, str] = {}  # hook id -> the file that defines it first
    count = 0
    for path in paths:
        try:
            data = yaml.load(read_hooks_text(path, as_template), Loader=YamlV2Loader)
        except HooksFileError as exc:
            problems.append(Problem(path, "", str(exc)))
            continue
        except yaml.YAMLError as exc:
            problems.append(Problem(path, "", f"error converting YAML to JSON: {exc}"))
            continue
        if data is None:
            problems.append(Problem(path, "", "no hooks in the file"))
            continue
        if not isinstance(data, list):
            problems.append(Problem(path, "", "the file must hold a list of hooks"))
            continue
        in_file: set[str] = set()
        for index, item in enumerate(data):
            raw_id = _raw_value(item, "id")
            label = go_string(raw_id) if isinstance(raw_id, str) and raw_id else f"#{index + 1}"
            if not isinstance(item, Mapping):
                problems.append(Problem(path, label, "not an object; the whole file is refused"))
                continue
            try:
                hook = decode_hook(item)
            except (HooksFileError, ValueError, TypeError) as exc:
                problems.append(Problem(path, label, f"{exc}; the whole file is refused"))
                continue
            count += 1
            found = hook_problems(hook, item)
            if not hook.id:
                found.insert(0, "no id")
            elif hook.id in in_file:
                found.insert(0, "duplicate id in this file; only the first one is served")
            elif hook.id in first_seen:
                found.insert(0, f"duplicate id, already loaded from {first_seen[hook.id]}; "
                                "the server refuses to start")
            else:
                first_seen[hook.id] = path
            in_file.add(hook.id)
            problems += [Problem(path, label, text) for text in found]
    return problems, count


def run_validation(
    paths: Sequence[str], as_template: bool = False, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """-validate: problems on stdout, a one-line summary on stderr; 0 when clean, else 1."""
    out = out or sys.stdout
    err = err or sys.stderr
    problems, count = validate_files(paths, as_template)
    for problem in problems:
        out.write(problem.line() + "\n")
    out.flush()
    files = f"{len(paths)} file(s)"
    if problems:
        err.write(f"{len(problems)} problem(s) in {files} ({count} hook(s) read)\n")
        return 1
    err.write(f"no problems in {files} ({count} hook(s))\n")
    return 0
