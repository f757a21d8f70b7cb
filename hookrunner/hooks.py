"""Hook and Argument models, reading hooks files (JSON or YAML), and the registry that serves them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from hookrunner import metrics
from hookrunner.config import Header
from hookrunner.errors import DuplicateHookError, HooksFileError
from hookrunner.godecode import (
    fields,
    go_bool,
    go_int,
    go_string,
    json_kind,
    parse_go_duration,
    type_error,
    yaml_v2_scalar,
)
from hookrunner.log import log
from hookrunner.scheduler import Limits


class HooksYamlLoader(yaml.SafeLoader):
    """YAML as Go's yaml.v2 reads it into interface{}: plain scalars resolved by yaml.v2's rules.

    The pure-Python scanner is used because its escape table can be made yaml.v2's: backslash-quote
    is a valid escape in a double-quoted string there (Go's `js` function writes it), backslash-slash
    is not.
    """

    ESCAPE_REPLACEMENTS = {  # type: ignore[misc]  # a class constant in the stubs, an override here
        **{k: v for k, v in yaml.SafeLoader.ESCAPE_REPLACEMENTS.items() if k != "/"},
        "'": "'",
    }

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _PLAIN_TAG
        return super().resolve(kind, value, implicit)


_PLAIN_TAG = "tag:hookrunner,2026:yaml-v2-plain"
HooksYamlLoader.add_constructor(_PLAIN_TAG, lambda loader, node: yaml_v2_scalar(node.value))


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
    # hookrunner's own fields (the reference ignores unknown keys, so files stay portable):
    command_timeout: float = 0.0
    replay: bool = True  # run again after a restart when left unfinished (-state-dir)
    limits: Limits = Limits()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


# --- decoding a hooks file the way webhook's YAML -> JSON -> struct decoding does -------------------------

# Each field: its key in the file, the Hook attribute, and how Go decodes it (value, "Struct.key" for errors).
HOOK_FIELDS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {}  # filled below, once the decoders exist
#: hookrunner's own keys for a hook's Limits (docs/limits.md); the reference ignores them.
LIMIT_FIELDS = ("max-concurrency", "max-queue", "coalesce", "retry-after")
ARGUMENT_FIELDS = ("source", "name", "envname", "base64decode")
_HEADER_FIELDS = ("name", "value")


def _known(data: Any, spec: Sequence[str], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields encoding/json would fill (exact name, else ignoring case; a later key wins) and the rest."""
    if not isinstance(data, dict):
        raise HooksFileError(f"json: cannot unmarshal {json_kind(data)} into Go value of type {where}")
    known = dict(fields(data, tuple(spec)))
    folded = {name.lower() for name in spec}
    extra = {go_string(k): v for k, v in data.items() if go_string(k).lower() not in folded}
    return known, extra


def _arguments(value: Any, where: str) -> tuple[Argument, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "[]hook.Argument")
    return tuple(decode_argument(item, where) for item in value if item is not None)


def decode_argument(data: Any, where: str = "Hook.parameter") -> Argument:
    """An Argument from its decoded mapping (also used for a match rule's `parameter`)."""
    if data is None:
        return Argument()
    known, _ = _known(data, ARGUMENT_FIELDS, where)
    return Argument(
        source=go_string(known.get("source"), where + ".source"),
        name=go_string(known.get("name"), where + ".name"),
        envname=go_string(known.get("envname"), where + ".envname"),
        base64decode=go_bool(known.get("base64decode"), where + ".base64decode"),
    )


def _headers(value: Any, where: str) -> tuple[Header, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "hook.ResponseHeaders")
    result = []
    for item in value:
        if item is None:
            continue
        known, _ = _known(item, _HEADER_FIELDS, where)
        result.append(Header(go_string(known.get("name"), where), go_string(known.get("value"), where)))
    return tuple(result)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise type_error(value, where, "[]string")
    return tuple(go_string(item, where) for item in value)


def _go_duration_field(value: Any, where: str) -> float:
    """A timeout given as seconds (a number) or as a Go duration string such as `30s` or `5m`."""
    if value is None:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = parse_go_duration(value)
        except ValueError as exc:
            raise HooksFileError(f"{where}: {exc}") from exc
    else:
        raise HooksFileError(f"{where}: a number of seconds or a duration like \"30s\" is needed")
    if seconds < 0:
        raise HooksFileError(f"{where}: must not be negative")
    return seconds


def _limits(known: dict[str, Any], where: str) -> Limits:
    limits = Limits(
        max_concurrency=go_int(known.get("max-concurrency"), where + "max-concurrency"),
        max_queue=go_int(known.get("max-queue"), where + "max-queue"),
        coalesce=go_bool(known.get("coalesce"), where + "coalesce"),
        retry_after=go_int(known.get("retry-after", 5), where + "retry-after"),
    )
    if min(limits.max_concurrency, limits.max_queue, limits.retry_after) < 0:
        raise HooksFileError(f"{where}max-concurrency, max-queue and retry-after must not be negative")
    return limits


def _replay(value: Any, where: str) -> bool:
    """`replay` defaults to true: only an explicit false opts a hook out of the run journal's replay."""
    return True if value is None else go_bool(value, where)


def _rule(value: Any, where: str) -> Any:
    from hookrunner.rules import parse_rule  # rules imports this module's Argument

    return parse_rule(value)


HOOK_FIELDS.update(
    {
        "id": ("id", go_string),
        "execute-command": ("execute_command", go_string),
        "command-working-directory": ("command_working_directory", go_string),
        "response-message": ("response_message", go_string),
        "response-headers": ("response_headers", _headers),
        "include-command-output-in-response": ("capture_output", go_bool),
        "include-command-output-in-response-on-error": ("capture_output_on_error", go_bool),
        "pass-environment-to-command": ("pass_environment", _arguments),
        "pass-arguments-to-command": ("pass_arguments", _arguments),
        "pass-file-to-command": ("pass_file", _arguments),
        "parse-parameters-as-json": ("json_parameters", _arguments),
        "trigger-rule": ("trigger_rule", _rule),
        "trigger-rule-mismatch-http-response-code": ("mismatch_status", go_int),
        "trigger-signature-soft-failures": ("signature_soft_failures", go_bool),
        "incoming-payload-content-type": ("incoming_payload_content_type", go_string),
        "success-http-response-code": ("success_status", go_int),
        "http-methods": ("http_methods", _strings),
        "command-timeout": ("command_timeout", _go_duration_field),  # hookrunner's own
        "replay": ("replay", _replay),  # hookrunner's own
    }
)


def decode_hook(data: Any) -> Hook:
    """One Hook from one decoded list entry; raises HooksFileError where Go's decoding fails."""
    known, extra = _known(data, (*HOOK_FIELDS, *LIMIT_FIELDS), "hook.Hook")
    values = {attr: decode(known.get(key), f"Hook.{key}") for key, (attr, decode) in HOOK_FIELDS.items()}
    return Hook(**values, limits=_limits(known, "Hook."), extra=extra)


def parse_hooks(text: str) -> list[Hook]:
    """Hooks from the text of a JSON or YAML hooks file (JSON is read as YAML, as webhook does)."""
    try:
        data = yaml.load(text, Loader=HooksYamlLoader)
    except yaml.YAMLError as exc:
        raise HooksFileError(f"error converting YAML to JSON: {exc}") from exc
    if data is None:
        return []
    if not isinstance(data, list):
        raise HooksFileError(f"json: cannot unmarshal {json_kind(data)} into Go value of type hook.Hooks")
    try:
        return [decode_hook(item) if item is not None else Hook() for item in data]
    except HooksFileError:
        raise
    except (ValueError, TypeError) as exc:  # a rule the rules module refuses
        raise HooksFileError(str(exc)) from exc


def read_hooks_text(path: str, as_template: bool = False) -> str:
    """A hooks file's text as serving reads it: bytes as they are, rendered first with -template."""
    try:
        # newline="": Go reads the bytes as they are, so error line numbers count the same lines.
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            text = handle.read()
    except OSError as exc:
        raise HooksFileError(f"open {path}: {(exc.strerror or str(exc)).lower()}") from exc
    if as_template:
        from hookrunner.gotemplate import render_hooks_template

        text = render_hooks_template(text)
    return text


def load_hooks(path: str, as_template: bool = False) -> list[Hook]:
    """Read one hooks file, optionally rendered as a Go template first; raises HooksFileError."""
    return parse_hooks(read_hooks_text(path, as_template))


# --- the registry ------------------------------------------------------------------------------------


class HookRegistry:
    """The hooks being served, per file; readers see an immutable snapshot that writers swap under a lock."""

    def __init__(self, files: Sequence[str], as_template: bool = False) -> None:
        self._as_template = as_template
        self._lock = threading.Lock()
        self._files: tuple[str, ...] = tuple(files)
        self._by_file: dict[str, tuple[Hook, ...]] = {}
        self._index: dict[str, Hook] = {}

    @property
    def files(self) -> tuple[str, ...]:
        return self._files

    def __len__(self) -> int:
        return sum(len(hooks) for hooks in self._by_file.values())

    def match(self, hook_id: str) -> Hook | None:
        return self._index.get(hook_id)

    def hooks_of(self, path: str) -> tuple[Hook, ...]:
        return self._by_file.get(path, ())

    def _publish(self, by_file: dict[str, tuple[Hook, ...]]) -> None:
        index: dict[str, Hook] = {}
        for hooks in by_file.values():
            for hook in hooks:
                index.setdefault(hook.id, hook)  # like webhook, the first hook with an id wins
        self._by_file = by_file
        self._index = index

    def load_initial(self) -> None:
        """Start-up: load every file as webhook does; an id loaded twice raises DuplicateHookError."""
        with self._lock:
            by_file: dict[str, tuple[Hook, ...]] = {}
            for path in self._files:
                log.printf("attempting to load hooks from %s\n", path)
                try:
                    hooks = load_hooks(path, self._as_template)
                except HooksFileError as exc:
                    log.printf("couldn't load hooks from file! %s\n", exc)
                    continue
                log.printf("found %d hook(s) in file\n", len(hooks))
                loaded = {hook.id for other in by_file.values() for hook in other}
                for hook in hooks:
                    if hook.id in loaded:
                        raise DuplicateHookError(hook.id)
                    log.printf("\tloaded: %s\n", hook.id)
                by_file[path] = tuple(hooks)
            self._publish(by_file)

    def reload_file(self, path: str) -> bool:
        """Reload one file; on any error the previous hooks stay. Returns whether the new hooks are served."""
        with self._lock:
            log.printf("attempting to reload hooks from %s\n", path)
            try:
                hooks = load_hooks(path, self._as_template)
            except HooksFileError as exc:
                log.printf("couldn't load hooks from file! %s\n", exc)
                metrics.record_reload(False)
                return False
            log.printf("found %d hook(s) in file\n", len(hooks))
            elsewhere = {hook.id for other, group in self._by_file.items() if other != path for hook in group}
            seen: set[str] = set()
            for hook in hooks:
                if hook.id in elsewhere or hook.id in seen:
                    log.printf("%s", DuplicateHookError(hook.id))
                    log.output("reverting hooks back to the previous configuration")
                    metrics.record_reload(False)
                    return False
                seen.add(hook.id)
                log.printf("\tloaded: %s\n", hook.id)
            by_file = dict(self._by_file)
            by_file[path] = tuple(hooks)
            if path not in self._files:
                self._files = (*self._files, path)
            self._publish(by_file)
            metrics.record_reload(True)
            return True

    def reload_all(self) -> None:
        for path in self._files:
            self.reload_file(path)

    def remove_file(self, path: str) -> int:
        """The file is gone: stop serving its hooks (re-creating the file restores them)."""
        with self._lock:
            removed = self._by_file.get(path, ())
            for hook in removed:
                log.printf("\tremoving: %s\n", hook.id)
            by_file = {other: group for other, group in self._by_file.items() if other != path}
            self._publish(by_file)
            log.printf("removed %d hook(s) that were loaded from file %s\n", len(removed), path)
            return len(removed)
