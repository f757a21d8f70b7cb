"""Hook and Argument models, reading hooks files (JSON or YAML), and the registry that serves them."""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from hookrunner.config import Header
from hookrunner.errors import DuplicateHookError, HooksFileError
from hookrunner.golang.decode import (
    fields,
    go_bool,
    go_int,
    go_string,
    json_kind,
    type_error,
    yaml_v2_scalar,
)
from hookrunner.golang.time import parse_go_duration
from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.run.scheduler import Limits


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

    def scan_to_next_token(self) -> None:
        """Skip white space, line breaks and comments up to the next token, as yaml.v2's scanner does.

        yaml.v2 (a port of libyaml) also skips a tab wherever a simple key cannot start: anywhere inside
        `[...]`/`{...}`, and in block context after other text on the line. PyYAML skips only spaces,
        so a JSON hooks file indented with tabs (upstream's own test file is one) failed to load.
        """
        if self.index == 0:  # the reader and then the scanner of yaml.v2 each drop a leading BOM
            for _ in range(2):
                if self.peek() == "\uFEFF":
                    self.forward()
        while True:
            while self.peek() == " " or (
                self.peek() == "\t" and (self.flow_level or not self.allow_simple_key)
            ):
                self.forward()
            if self.peek() == "#":
                while self.peek() not in "\0\r\n\x85\u2028\u2029":
                    self.forward()
            if not self.scan_line_break():
                return
            if not self.flow_level:
                self.allow_simple_key = True

    def scan_plain_spaces(self, indent: int, start_mark: Any) -> Any:
        """The white space inside a plain scalar, folded as YAML folds it; tabs count as blanks there in
        yaml.v2 (`a: b<TAB>c`, a line of tabs after the text), except as indentation inside the block."""
        breaks_chars = "\r\n\x85\u2028\u2029"
        length = 0
        while self.peek(length) in " \t":
            length += 1
        run = self.prefix(length)
        self.forward(length)
        if self.peek() not in breaks_chars:
            return [run] if run else []
        line_break = self.scan_line_break()
        self.allow_simple_key = True
        breaks = []
        while True:
            at_marker = self.column == 0 and self.prefix(3) in ("---", "...")
            if at_marker and self.peek(3) in "\0 \t\r\n\x85\u2028\u2029":
                return None
            ch = self.peek()
            if ch == "\t" and self.column < indent:
                raise yaml.scanner.ScannerError(
                    "while scanning a plain scalar", start_mark,
                    "found a tab character that violates indentation", self.get_mark(),
                )
            if ch in " \t":
                self.forward()
            elif ch in breaks_chars:
                breaks.append(self.scan_line_break())
            else:
                break
        chunks = [line_break] if line_break != "\n" else ([] if breaks else [" "])
        return chunks + breaks

    def scan_tag(self) -> Any:
        # A tab that ends a tag separates like a space in yaml.v2; PyYAML wants a space there, so the tab
        # is given to it as one (it is white space either way, and not part of any value).
        end = self.pointer
        while self.buffer[end] not in "\0 \t\r\n\x85\u2028\u2029":
            end += 1
        if self.buffer[end] == "\t":
            self.buffer = self.buffer[:end] + " " + self.buffer[end + 1 :]
        return super().scan_tag()

    def scan_block_scalar_indicators(self, start_mark: Any) -> Any:
        """The chomping (`+`/`-`) and indentation (1-9) indicators after `|` or `>`, in either order; as in
        yaml.v2, a tab or a `#` may follow them directly."""
        chomping: bool | None = None
        increment: int | None = None
        for _ in range(2):
            ch = self.peek()
            if ch in "+-" and chomping is None:
                chomping = ch == "+"
            elif ch in "0123456789" and increment is None:
                if ch == "0":
                    raise yaml.scanner.ScannerError(
                        "while scanning a block scalar", start_mark,
                        "expected indentation indicator in the range 1-9, but found 0", self.get_mark(),
                    )
                increment = int(ch)
            else:
                break
            self.forward()
        if self.peek() not in "\0 \t\r\n\x85\u2028\u2029#":
            raise yaml.scanner.ScannerError(
                "while scanning a block scalar", start_mark,
                f"expected chomping or indentation indicators, but found {self.peek()!r}", self.get_mark(),
            )
        return chomping, increment

    def scan_block_scalar_ignored_line(self, start_mark: Any) -> Any:
        # After `|` or `>` and their indicators, yaml.v2 skips tabs as well as spaces up to the line end.
        while self.peek() in " \t":
            self.forward()
        return super().scan_block_scalar_ignored_line(start_mark)

    def _no_tab_in_indentation(self, start_mark: Any, indent: int | None) -> None:
        if self.peek() == "\t" and (indent is None or self.column < indent):
            raise yaml.scanner.ScannerError(
                "while scanning a block scalar", start_mark,
                "found a tab character where an indentation space is expected", self.get_mark(),
            )

    def scan_block_scalar_indentation(self) -> Any:
        # yaml.v2 refuses a tab where a block scalar's indentation is still being found.
        result = super().scan_block_scalar_indentation()
        self._no_tab_in_indentation(self.get_mark(), None)
        return result

    def scan_block_scalar_breaks(self, indent: int) -> Any:
        result = super().scan_block_scalar_breaks(indent)
        self._no_tab_in_indentation(self.get_mark(), indent)
        return result

    def scan_flow_scalar_non_spaces(self, double: bool, start_mark: Any) -> Any:
        # yaml.v2 refuses an escape that names a UTF-16 surrogate (`"\ud800"`); PyYAML kept it as text
        # that cannot be encoded.
        chunks = super().scan_flow_scalar_non_spaces(double, start_mark)
        if double and any("\ud800" <= ch <= "\udfff" for chunk in chunks for ch in chunk):
            raise yaml.scanner.ScannerError(
                "while parsing a quoted scalar", start_mark,
                "found invalid Unicode character escape code", self.get_mark(),
            )
        return chunks

    def scan_plain(self) -> Any:
        # The yaml.v2 the reference vendors refuses `:` inside a plain scalar in flow context (`{a:1}`,
        # `{u: http://x}`), where PyYAML reads it as part of the text.
        token = super().scan_plain()
        if self.flow_level and ":" in token.value:
            raise yaml.scanner.ScannerError(
                "while scanning a plain scalar", token.start_mark, "found unexpected ':'", token.end_mark
            )
        return token

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _MERGE_TAG if value == "<<" else _PLAIN_TAG
        return super().resolve(kind, value, implicit)

    def compose_node(self, parent: Any, index: Any) -> Any:
        # yaml.v2 lets a later anchor of the same name replace the earlier one; PyYAML refuses.
        event = self.peek_event()
        if not isinstance(event, yaml.AliasEvent) and getattr(event, "anchor", None) in self.anchors:
            del self.anchors[event.anchor]
        return super().compose_node(parent, index)

    def get_single_data(self) -> Any:
        # yaml.v2's Unmarshal reads the first document and ignores the documents that follow it.
        if not self.check_node():
            return None
        node = self.get_node()
        self.peek_event()  # it does parse the start of the next one: garbage there is an error
        return self.construct_document(node)


_PLAIN_TAG = "tag:hookrunner,2026:yaml-v2-plain"
_MERGE_TAG = "tag:yaml.org,2002:merge"
HooksYamlLoader.add_constructor(_PLAIN_TAG, lambda loader, node: yaml_v2_scalar(node.value))


def _binary(loader: HooksYamlLoader, node: yaml.ScalarNode) -> str:
    # yaml.v2 decodes !!binary strictly (no stray white space, exact padding) into a Go string: the bytes
    # as they are.
    text = str(loader.construct_scalar(node)).replace("\r", "").replace("\n", "")  # Go skips these
    try:
        if len(text) % 4:
            raise ValueError("padding")
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise yaml.constructor.ConstructorError(
            None, None, "!!binary value contains invalid base64 data", node.start_mark
        ) from None
    return data.decode("utf-8", "surrogateescape")


def _unknown_tag(loader: HooksYamlLoader, node: yaml.Node) -> Any:
    # yaml.v2 ignores a tag it does not know: a scalar stays the text it was written as.
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_TAG_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "bool": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _tagged_scalar(kind: str) -> Callable[[HooksYamlLoader, yaml.Node], Any]:
    """`!!int '7'` and the like: yaml.v2 resolves the text as it would a plain scalar, and refuses it
    when that gives another type (`!!float '1'` is an error there, not 1.0)."""

    def construct(loader: HooksYamlLoader, node: yaml.Node) -> Any:
        value = yaml_v2_scalar(str(loader.construct_scalar(node)))  # type: ignore[arg-type]
        if not _TAG_TYPES[kind](value):
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot decode {node.value!r} as a !!{kind}", node.start_mark
            )
        return value

    return construct


for _kind in _TAG_TYPES:
    HooksYamlLoader.add_constructor(f"tag:yaml.org,2002:{_kind}", _tagged_scalar(_kind))
HooksYamlLoader.add_constructor("tag:yaml.org,2002:binary", _binary)
HooksYamlLoader.add_constructor(None, _unknown_tag)


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
    from hookrunner.hooks.rules import parse_rule  # rules imports this module's Argument

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


_FLOAT_KEY_NAMES = {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}


def _key_text(key: Any) -> str:
    """A mapping key as ghodss/yaml writes it into JSON; the key types it refuses are an error."""
    unsupported = key is None or isinstance(key, int) and not isinstance(key, bool) and key >= 1 << 63
    if unsupported or isinstance(key, list | dict):  # yaml.v2 gives nil, uint64, ... there
        raise HooksFileError(f"error converting YAML to JSON: Unsupported map key: {key!r}")
    text = go_string(key)
    return _FLOAT_KEY_NAMES.get(text, text) if isinstance(key, float) else text


def _string_keys(value: Any) -> Any:
    """Mappings with their keys as ghodss/yaml writes them into JSON (`1` -> "1", `yes` -> "true")."""
    if isinstance(value, dict):
        return {_key_text(key): _string_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    return value


def yaml_tree(text: str) -> Any:
    """A hooks file's text as ghodss/yaml hands it to encoding/json: yaml.v2's values, keys as strings."""
    try:
        return _string_keys(yaml.load(text, Loader=HooksYamlLoader))
    except yaml.YAMLError as exc:
        raise HooksFileError(f"error converting YAML to JSON: {exc}") from exc
    except RecursionError:
        raise HooksFileError("error converting YAML to JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # a constructor's own complaint (a bad !!binary, say)
        raise HooksFileError(f"error converting YAML to JSON: {exc}") from exc


def decode_hooks_bytes(data: bytes) -> str:
    """A hooks file's bytes as text: UTF-16 where a BOM says so (yaml.v2 reads it), else UTF-8 as it is."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass  # left to the YAML reader to refuse
    return data.decode("utf-8", "surrogateescape")


def read_hooks_yaml(data: bytes) -> Any:
    """yaml_tree() of a hooks file's bytes, decoded as read_hooks_text() decodes them."""
    return yaml_tree(decode_hooks_bytes(data))


def parse_hooks(text: str) -> list[Hook]:
    """Hooks from the text of a JSON or YAML hooks file (JSON is read as YAML, as webhook does)."""
    data = yaml_tree(text)
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
        with open(path, "rb") as handle:
            text = decode_hooks_bytes(handle.read())
    except OSError as exc:
        raise HooksFileError(f"open {path}: {(exc.strerror or str(exc)).lower()}") from exc
    if as_template:
        from hookrunner.golang.template import render_hooks_template

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
