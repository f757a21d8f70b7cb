"""A hooks file that is plain JSON, read by the C JSON parser where that provably gives yaml.v2's tree; None
wherever yaml.v2 could read the text otherwise, so that the exact reader (yaml.py) decides."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from hookrunner.golang.decode import yaml_v2_scalar

# Characters outside libyaml's printable set (its reader refuses them, or, for NEL, LS and PS, reads them as
# line breaks), a BOM anywhere, and the surrogates that stand for bytes that are not UTF-8.
NOT_PLAIN_TEXT = re.compile(
    "[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
# Escapes whose meaning differs: yaml.v2 refuses `\/` and an escaped UTF-16 surrogate, which JSON reads (a
# false alarm such as `\\/` only costs the exact path).
_ESCAPE_APART = re.compile(r"\\(?:/|[uU][dD][89a-fA-F])")
# A key is a YAML simple key: it must end (at its `:`) on the line it starts on and within 1024 characters.
# A line break before a `:` (JSON strings hold none), or a long run of blanks before one; looked for only
# when a `:` follows white space at all, as it seldom does in JSON.
_KEY_APART = re.compile(r"[\r\n][ \t\r\n]*:|[ \t]{60}[ \t]*:")
_BLANK_COLONS = (" :", "\t:", "\n:", "\r:")
# With the blanks above, a key of up to 160 characters (6 per `\uXXXX` escape) ends within 1024.
_LONGEST_KEY = 160
# Deeper trees are left to the exact reader, which refuses what PyYAML cannot recurse into (at about 300
# levels; docs/compatibility.md): what is served stays what that reader would serve. Real files nest < 20.
_DEEPEST = 100
_SHARED_TEXT = 64


class _Differs(Exception):
    """What the JSON reading found that yaml.v2 may read otherwise."""


class ReadOtherwise(Exception):
    """Raised by an iterator of a file's entries (json_entries, yamlevents.event_entries) that found, part
    way, what its fast reading may read otherwise than yaml.v2: the file is for the exact readers."""


class _Mappings:
    """json.loads' object_pairs_hook: a dict per JSON object, refusing what yaml.v2 could read otherwise.
    Short strings are kept once per file (`/bin/true`, `payload` and the like repeat in every hook)."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping = dict(pairs)
        if len(mapping) != len(pairs):  # a duplicate key: left to the exact reader
            raise _Differs
        texts = self._texts
        for key, value in mapping.items():
            if len(key) > _LONGEST_KEY or key == "<<":
                raise _Differs
            if type(value) is str and len(value) <= _SHARED_TEXT:
                mapping[key] = texts.setdefault(value, value)
        return mapping


def _constant(text: str) -> Any:
    raise _Differs  # NaN and Infinity: not JSON, plain scalars to yaml.v2


def decode_hooks_bytes(data: bytes) -> str:
    """A hooks file's bytes as text: UTF-16 where a BOM says so (yaml.v2 reads it), else UTF-8 as it is."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass  # left to the YAML reader to refuse
    return data.decode("utf-8", "surrogateescape")


def _plain_json(text: str) -> str | None:
    """The text stripped, if it is a JSON array or object in which no character, escape or key spacing
    tells yaml.v2 apart (json_tree's docstring); None otherwise."""
    body = text.strip(" \r\n")
    if body[:1] not in ("[", "{") or body[-1:] not in ("]", "}"):
        return None
    if NOT_PLAIN_TEXT.search(text) or _ESCAPE_APART.search(text):
        return None
    if any(colon in text for colon in _BLANK_COLONS) and _KEY_APART.search(text):
        return None
    return body


def _decoder() -> json.JSONDecoder:
    return json.JSONDecoder(
        object_pairs_hook=_Mappings(),
        parse_int=yaml_v2_scalar,
        parse_float=yaml_v2_scalar,
        parse_constant=_constant,
    )


def json_tree(text: str) -> Any | None:
    """The tree yaml.v2 (through ghodss/yaml) gives a hooks file whose text is a JSON array or object, or
    None when the text is not one, or is one that yaml.v2 might read differently.

    JSON in a file is YAML flow syntax: a number is a plain scalar (so resolved by yaml.v2's rules from its
    text: `1e3` stays a string there), a string a double-quoted scalar with the same escapes but `\\/` and
    surrogates, and a key a simple key. Duplicate keys, long keys, keys split from their `:` by a line
    break, tabs or other text around the value, characters libyaml refuses and `\\/` all go to the exact
    reader, as do NaN and nesting deeper than _DEEPEST."""
    body = _plain_json(text)
    if body is None:
        return None
    try:
        tree = _decoder().decode(body)
    except (_Differs, ValueError, RecursionError):
        return None
    return tree if _shallow(tree) else None


_BLANKS = re.compile("[ \t\r\n]*")


def json_entries(text: str) -> Iterator[Any] | None:
    """The entries of the JSON array json_tree() would read, one at a time, each parsed only when the one
    before has been taken: the whole tree is never held. None where the text is not such an array; the
    iterator raises ReadOtherwise where json_tree() would give None (a duplicate key in the 9,000th entry,
    say), and ends only once the whole text has been parsed."""
    body = _plain_json(text)
    if body is None or body[0] != "[" or body[-1] != "]":
        return None
    return _entries(body)


def _entries(body: str) -> Iterator[Any]:
    decode = _decoder().raw_decode
    index = _BLANKS.match(body, 1).end()  # type: ignore[union-attr]  # matches the empty string
    if index == len(body) - 1:  # only the closing `]` is left
        return
    while True:
        start = index
        try:
            item, index = decode(body, index)
        except (_Differs, ValueError, RecursionError):
            raise ReadOtherwise from None
        # The array is one level; an entry with fewer brackets than _DEEPEST needs no walk to tell.
        brackets = body.count("[", start, index) + body.count("{", start, index)
        if brackets >= _DEEPEST - 1 and not _shallow([item]):
            raise ReadOtherwise
        yield item
        index = _BLANKS.match(body, index).end()  # type: ignore[union-attr]
        if body[index : index + 1] == ",":
            index = _BLANKS.match(body, index + 1).end()  # type: ignore[union-attr]
        elif index == len(body) - 1:  # the closing `]`, and nothing after it
            return
        else:
            raise ReadOtherwise


def _shallow(tree: Any) -> bool:
    """Whether the tree nests no deeper than _DEEPEST, walked a level at a time (no recursion)."""
    level = [tree]
    for _ in range(_DEEPEST):
        level = [
            item
            for container in level
            for item in (container.values() if type(container) is dict else container)
            if type(item) is dict or type(item) is list
        ]
        if not level:
            return True
    return False
