"""Go's yaml.v2 reading, as ghodss/yaml hands its tree to encoding/json: the scanner's quirks, yaml.v2's
scalar resolution, tags, merge keys and !!binary, and mapping keys written as JSON strings."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from typing import Any

import yaml
import yaml.constructor
import yaml.resolver

from hookrunner.errors import HooksFileError
from hookrunner.golang.decode import go_string, yaml_v2_scalar
from hookrunner.golang.strconv import quote
from hookrunner.golang.yamlevents import event_entries, event_tree
from hookrunner.golang.yamljson import NOT_PLAIN_TEXT, decode_hooks_bytes, json_entries, json_tree


class YamlV2Loader(yaml.SafeLoader):
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
        return _v2_tag(kind, value, implicit) or super().resolve(kind, value, implicit)

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


def _v2_tag(kind: Any, value: Any, implicit: Any) -> str | None:
    """A plain scalar's tag: resolved later by yaml.v2's rules (yaml_v2_scalar), `<<` a merge key."""
    if kind is yaml.ScalarNode and implicit[0]:
        return _MERGE_TAG if value == "<<" else _PLAIN_TAG
    return None
YamlV2Loader.add_constructor(_PLAIN_TAG, lambda loader, node: yaml_v2_scalar(node.value))


def _binary(loader: YamlV2Loader, node: yaml.ScalarNode) -> str:
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


def _unknown_tag(loader: YamlV2Loader, node: yaml.Node) -> Any:
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


def _go_tag(value: Any) -> str:
    """The short tag yaml.v2 resolved a scalar to."""
    if value is None:
        return "null"
    return next((kind for kind, test in _TAG_TYPES.items() if kind != "null" and test(value)), "str")


def _tagged_scalar(kind: str) -> Callable[[YamlV2Loader, yaml.Node], Any]:
    """`!!int '7'` and the like: yaml.v2 resolves the text as it would a plain scalar, and refuses it
    when that gives another type (`!!float '1'` is an error there, not 1.0)."""

    def construct(loader: YamlV2Loader, node: yaml.Node) -> Any:
        value = yaml_v2_scalar(str(loader.construct_scalar(node)))  # type: ignore[arg-type]
        if not _TAG_TYPES[kind](value):
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot decode !!{_go_tag(value)} `{node.value}` as a !!{kind}", node.start_mark
            )
        return value

    return construct


for _kind in _TAG_TYPES:
    YamlV2Loader.add_constructor(f"tag:yaml.org,2002:{_kind}", _tagged_scalar(_kind))
YamlV2Loader.add_constructor("tag:yaml.org,2002:binary", _binary)
YamlV2Loader.add_constructor(None, _unknown_tag)


_FLOAT_KEY_NAMES = {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}


def _unsupported_key(key: Any, value: Any) -> HooksFileError:
    """ghodss/yaml's refusal of a key JSON cannot have; its own words where the key is nil or a uint64 and
    the value a string (Go's %#v of other values is not reproduced)."""
    if key is None:
        kind, shown = "%!s(<nil>)", "<nil>"
    elif isinstance(key, int):
        kind, shown = "uint64", f"0x{key:x}"
    else:
        kind, shown = "", ""
    if kind and isinstance(value, str):
        words = f"Unsupported map key of type: {kind}, key: {shown}, value: {quote(value)}"
        return HooksFileError(f"error converting YAML to JSON: {words}")
    return HooksFileError(f"error converting YAML to JSON: Unsupported map key: {key!r}")


def _key_text(key: Any, value: Any) -> str:
    """A mapping key as ghodss/yaml writes it into JSON; the key types it refuses are an error."""
    unsupported = key is None or isinstance(key, int) and not isinstance(key, bool) and key >= 1 << 63
    if unsupported or isinstance(key, list | dict):  # yaml.v2 gives nil, uint64, ... there
        raise _unsupported_key(key, value)
    text = go_string(key)
    return _FLOAT_KEY_NAMES.get(text, text) if isinstance(key, float) else text


def _string_keys(value: Any) -> Any:
    """Mappings with their keys as ghodss/yaml writes them into JSON (`1` -> "1", `yes` -> "true").

    Each string, key or value, is a copy: the composer allocated it among the nodes and their marks, and
    kept as it was it would hold their memory once the nodes are gone (10,000 YAML hooks: the process
    held 118 MiB more after the read with libyaml's composer, 185 MiB with PyYAML's; 53 and 50 now)."""
    if isinstance(value, dict):
        return {_string_keys(_key_text(key, item)): _string_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    if type(value) is str and len(value) > 1:
        return value[:1] + value[1:]
    return value


# PyYAML's problems, worded as libyaml (and so yaml.v2) words them: (context, problem pattern) -> text.
# A context of None matches any.
_PROBLEMS: list[tuple[str | None, re.Pattern[str], str]] = [
    (None, re.compile(r"found character .* that cannot start any token"),
     "found character that cannot start any token"),
    (None, re.compile(r"mapping values are not allowed here"),
     "mapping values are not allowed in this context"),
    (None, re.compile(r"sequence entries are not allowed here"),
     "block sequence entries are not allowed in this context"),
    (None, re.compile(r"expected a comment or a line break"),
     "did not find expected comment or line break"),
    (None, re.compile(r"expected chomping or indentation indicators"),
     "did not find expected comment or line break"),
    (None, re.compile(r"expected the node content"),
     "did not find expected node content"),
    ('while parsing a block mapping', re.compile(r"expected <block end>"),
     "did not find expected key"),
    ('while parsing a block collection', re.compile(r"expected <block end>"),
     "did not find expected '-' indicator"),
    (None, re.compile(r"expected ',' or '\}'"),
     "did not find expected ',' or '}'"),
    (None, re.compile(r"expected ',' or '\]'"),
     "did not find expected ',' or ']'"),
    (None, re.compile(r"expected '<document start>'"),
     "did not find expected <document start>"),
    (None, re.compile(r"found a tab character that violates indentation"),
     "found a tab character that violate indentation"),
    (None, re.compile(r"found unknown escape character"),
     "found unknown escape character"),
    (None, re.compile(r"expected alphabetic or numeric character"),
     "did not find expected alphabetic or numeric character"),
    (None, re.compile(r"found undefined alias '?([^']*)'?"),
     "unknown anchor '{0}' referenced"),
    (None, re.compile(r"expected indentation indicator in the range 1-9, but found 0"),
     "found an indentation indicator equal to 0"),
    (None, re.compile(r"expected escape sequence of \d+ hexadecimal numbers"),
     "did not find expected hexdecimal number"),
    (None, re.compile(r"expected a mapping or list of mappings for merging"),
     "map merge requires map or sequence of maps as the value"),
    (None, re.compile(r"found incompatible YAML document"),
     "found incompatible YAML document"),
    (None, re.compile(r"expected a directive name|found unknown directive name"),
     "found unknown directive name"),
]


_NO_LINE = ("cannot decode ", "map merge requires")


def _utf8_problem(data: bytes) -> str:
    """What libyaml's reader says of the bytes at a character PyYAML refused (surrogate-escaped bytes)."""
    first = data[0]
    width = 1 if first < 0x80 else 2 if first & 0xE0 == 0xC0 else 3 if first & 0xF0 == 0xE0 else (
        4 if first & 0xF8 == 0xF0 else 0)
    if width == 0:
        return "invalid leading UTF-8 octet"
    if width == 1:
        return "control characters are not allowed"
    if len(data) < width:
        return "incomplete UTF-8 octet sequence"
    if any(byte & 0xC0 != 0x80 for byte in data[1:width]):
        return "invalid trailing UTF-8 octet"
    value = first & (0x1F, 0x0F, 0x07)[width - 2]
    for byte in data[1:width]:
        value = value << 6 | byte & 0x3F
    if value < (0x80, 0x800, 0x10000)[width - 2]:
        return "invalid length of a UTF-8 sequence"
    return "invalid Unicode character"


def yaml_v2_error(exc: yaml.YAMLError, text: str) -> str:
    """yaml.v2's one-line message for what PyYAML refused, e.g. `yaml: line 12: did not find expected ','
    or '}'`. yaml.v2 names the line of the problem counted from 0, as libyaml marks it, and only when it
    is not 0 (the context's line stands in then); errors of the reader (bad bytes) name no line."""
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        if "\udc80" <= char <= "\udcff":
            raw = text[exc.position : exc.position + 4].encode("utf-8", "surrogateescape")
            return f"yaml: {_utf8_problem(raw)}"
        return "yaml: control characters are not allowed"
    if not isinstance(exc, yaml.MarkedYAMLError):
        return f"yaml: {exc}"
    problem = exc.problem or ""
    for context, pattern, wording in _PROBLEMS:
        found = pattern.search(problem)
        if found and (context is None or exc.context == context):
            problem = wording.format(*found.groups()) if found.groups() else wording
            break
    if problem.startswith(_NO_LINE):
        return f"yaml: {problem}"  # the decoder's errors, not the parser's: yaml.v2 gives no line
    line = 0
    mark = exc.problem_mark
    if mark is not None:
        line = mark.line
        at_end = mark.column and mark.index >= len(text.rstrip("\0"))
        if at_end and (isinstance(exc, yaml.parser.ParserError) or problem == "could not find expected ':'"):
            line += 1  # past a last line with no line break, libyaml's stream end is on the next line
    if not line and exc.context_mark is not None:
        line = exc.context_mark.line
    return f"yaml: line {line}: {problem}" if line else f"yaml: {problem}"


def yaml_tree(text: str) -> Any:
    """A hooks file's text as ghodss/yaml hands it to encoding/json: yaml.v2's values, keys as strings.
    A file that is plain JSON is read by the C JSON parser where that gives the same tree (yamljson.py)."""
    tree = json_tree(text)
    if tree is None:
        tree = libyaml_tree(text)
    return tree if tree is not None else exact_yaml_tree(text)


def yaml_entries(text: str) -> Iterator[Any] | None:
    """The entries of the top-level sequence yaml_tree() would give, one at a time, where a fast reading
    takes the file (yamljson.json_entries, yamlevents.event_entries): the whole tree is never held. None
    where none does; the iterator raises ReadOtherwise if its reading stands aside part way, and then
    yaml_tree() has the last word."""
    entries = json_entries(text)
    if entries is None and libyaml_reads(text):
        entries = event_entries(text)
    return entries


try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: every file takes the exact reader
    CParser = None  # type: ignore[assignment,misc]


# What libyaml (0.2.5, in PyYAML's wheels) reads otherwise than the yaml.v2 of webhook 2.8.0, or may:
# tabs (skipped in more places by yaml.v2), escapes (`\'`, `\/`), tags and directives, a `#` right
# after a block scalar's indicators; in a file with flow collections, a `:` or `?` inside a plain
# scalar (libyaml takes them in flow context, yaml.v2 refuses `:`); and the characters yamljson.py
# names. A false alarm only costs the exact reader.
# The single characters are each looked for by a plain scan (a regex alternation over them took 37 ms of a
# 2.8 MB file), the pattern only where a `|` or `>` is there at all.
_C_APART_CHARS = ("\t", "\\", "!", "%")
_C_APART = re.compile(r"[|>][-+0-9]*#")
_FLOW_APART = re.compile(r":[^ \r\n]|\?")


def libyaml_reads(text: str) -> bool:
    """Whether libyaml's parser reads the characters of `text` as yaml.v2 does: none that _C_APART_CHARS
    and _C_APART name, and no `:` or `?` inside a plain scalar of a file with flow collections."""
    if CParser is None or NOT_PLAIN_TEXT.search(text) or any(char in text for char in _C_APART_CHARS):
        return False
    if ("|" in text or ">" in text) and _C_APART.search(text):
        return False
    return not (("[" in text or "{" in text) and _FLOW_APART.search(text))


def libyaml_tree(text: str) -> Any | None:
    """yaml_tree() read by libyaml's parser with the exact reader's resolution and constructors, or None
    where that could differ: a text _C_APART_CHARS or _C_APART names, and any file libyaml refuses (the
    exact reader then words the error). Checked against the yaml.v2 vectors like the exact reader
    (test_yaml.py)."""
    if not libyaml_reads(text):
        return None
    tree = event_tree(text)  # without a node tree where it can
    if tree is not None:
        return tree
    loader = _YamlV2CLoader(text)
    try:
        return _string_keys(loader.get_single_data())
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, HooksFileError):
        return None
    finally:
        loader.dispose()


if CParser is not None:

    class _YamlV2CLoader(CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """YamlV2Loader's scalar resolution and constructors on libyaml's parser and composer."""

        yaml_constructors = YamlV2Loader.yaml_constructors

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            return _v2_tag(kind, value, implicit) or super().resolve(kind, value, implicit)


def exact_yaml_tree(text: str) -> Any:
    """yaml_tree() by the YAML reader alone (YamlV2Loader), whatever the text."""
    try:
        return _string_keys(yaml.load(text, Loader=YamlV2Loader))
    except yaml.YAMLError as exc:
        raise HooksFileError(f"error converting YAML to JSON: {yaml_v2_error(exc, text)}") from exc
    except RecursionError:
        raise HooksFileError("error converting YAML to JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # a constructor's own complaint (a bad !!binary, say)
        raise HooksFileError(f"error converting YAML to JSON: {exc}") from exc


__all__ = ["decode_hooks_bytes"]  # where it was first, and is still looked for


def read_hooks_yaml(data: bytes) -> Any:
    """yaml_tree() of a hooks file's bytes, decoded as read_hooks_text() decodes them."""
    return yaml_tree(decode_hooks_bytes(data))
