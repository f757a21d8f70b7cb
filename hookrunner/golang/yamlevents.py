"""A YAML hooks file built into yaml.v2's tree straight from libyaml's events, with no node tree: where that
provably gives the tree that composing and constructing give (yaml.py's libyaml_tree), and None elsewhere.

Composing first holds every node of the file, each with its two marks, until the whole tree is built: 10,000
hooks took 1.5 s of CPU and ~200 MiB at the peak that way. Built from the events, each event is freed once
its value is placed. Only what needs no constructor's judgement is built here: untagged plain scalars
(resolved by yaml.v2's rules, yaml_v2_scalar), quoted and block scalars (strings), mappings with string keys
that are all different, and sequences, in one document. An anchor, an alias, a tag, a merge key (`<<`), a
key that is not a string or comes twice, a second document or a tree deeper than _DEEPEST leaves the file to
the composing reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from hookrunner.golang.decode import yaml_v2_scalar
from hookrunner.golang.yamljson import ReadOtherwise

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    CParser = None  # type: ignore[assignment,misc]

# As yamljson.py: real files nest < 20; deeper ones go to the readers that word recursion limits.
_DEEPEST = 100
_SHARED_TEXT = 64
_NO_KEY = object()
_BATCH = 100


class _Apart(Exception):
    """Something the composing reader may read otherwise, or must word as an error."""


def event_tree(text: str) -> Any | None:
    """The tree yaml.py's libyaml_tree() gives `text`, built from libyaml's events; None where this reading
    stands aside (see the module's docstring) or libyaml refuses the text. The caller has already checked
    that libyaml reads the text's characters as yaml.v2 does (yaml.py's libyaml_reads)."""
    if CParser is None:
        return None
    parser = CParser(text)
    try:
        next_event = parser.get_event
        event = _document(next_event)
        if event is None:
            return None  # no document: an empty file
        value = _node(next_event, event, _Texts())
        _end(next_event)
        return value
    except (_Apart, yaml.YAMLError):
        return None
    finally:
        parser.dispose()


def event_entries(text: str) -> Iterator[Any] | None:
    """The entries of the top-level sequence that event_tree() would give, one at a time, built _BATCH at a
    time as they are taken: the whole tree is never held. None where the text is not such a
    sequence or this reading stands aside at once; the iterator raises ReadOtherwise if it stands aside
    later (an anchor in the 9,000th entry, say) and ends only once the whole text has been parsed."""
    if CParser is None:
        return None
    parser = CParser(text)
    try:
        event = _document(parser.get_event)
    except (_Apart, yaml.YAMLError):
        event = None
    if type(event) is not SequenceStartEvent or event.anchor is not None or event.tag is not None:
        parser.dispose()
        return None
    return _entries(parser)


def _entries(parser: Any) -> Iterator[Any]:
    next_event = parser.get_event
    texts = _Texts()
    batch: list[Any] = []
    try:
        while True:
            # Entries are parsed _BATCH at a time, then handed on: parsing one and decoding it by turns cost
            # ~10% more CPU than by batches (10,000 hooks: 0.47 -> 0.42 s to parse and decode).
            for _ in range(_BATCH):
                event = next_event()
                if type(event) is SequenceEndEvent:
                    break
                batch.append(_node(next_event, event, texts, 1))
            else:
                yield from batch
                batch.clear()
                continue
            yield from batch
            break
        _end(next_event)
    except (_Apart, yaml.YAMLError):
        raise ReadOtherwise from None
    finally:
        parser.dispose()


def _document(next_event: Any) -> Any:
    """The first event of the document's node, or None for a stream with no document."""
    next_event()  # the stream's start
    event = next_event()
    if type(event) is StreamEndEvent:
        return None
    if type(event) is not DocumentStartEvent or event.version or event.tags:
        raise _Apart
    return next_event()


def _end(next_event: Any) -> None:
    if type(next_event()) is not DocumentEndEvent or type(next_event()) is not StreamEndEvent:
        raise _Apart  # a second document: the composing reader refuses it as libyaml's loader does


class _Texts:
    """A file's short scalars, each kept once: keys, `/bin/true`, `payload` and the like repeat in every
    hook. A plain one is resolved once, too."""

    def __init__(self) -> None:
        self.plain: dict[str, Any] = {}
        self.quoted: dict[str, str] = {}


def _node(next_event: Any, event: Any, texts: _Texts, depth: int = 0) -> Any:
    """The value of the node that begins with `event`, its events taken up to its end; `depth` containers
    hold it."""
    kind = type(event)
    if kind is ScalarEvent:
        return _scalar(event, texts)
    if kind is MappingStartEvent or kind is SequenceStartEvent:
        return _container(next_event, event, texts, depth)
    raise _Apart  # an alias, or what only the composer reports


def _scalar(event: Any, texts: _Texts) -> Any:
    """A scalar's value: a plain one resolved as yaml.v2 resolves it, once per text; a quoted or block one
    its text."""
    if event.anchor is not None or event.tag is not None:
        raise _Apart
    text = event.value
    if event.implicit[0]:
        plain = texts.plain
        value = plain.get(text, _NO_KEY)
        if value is _NO_KEY:
            if text == "<<":
                raise _Apart
            value = yaml_v2_scalar(text)  # a str, number, bool or None: immutable
            if len(text) <= _SHARED_TEXT:
                plain[text] = value
        return value
    return texts.quoted.setdefault(text, text) if len(text) <= _SHARED_TEXT else text


def _container(next_event: Any, event: Any, texts: _Texts, depth: int) -> Any:
    """The mapping or sequence that begins with `event`, with `depth` containers around it. One call per
    container, its own loop over its entries: scalars, by far the most events, are placed where they are
    read, without a stack of containers and keys to consult for each."""
    if event.anchor is not None or event.tag is not None or depth >= _DEEPEST:
        raise _Apart
    depth += 1
    if type(event) is SequenceStartEvent:
        sequence: list[Any] = []
        append = sequence.append
        while True:
            event = next_event()
            kind = type(event)
            if kind is ScalarEvent:
                append(_scalar(event, texts))
            elif kind is SequenceEndEvent:
                return sequence
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                append(_container(next_event, event, texts, depth))
            else:
                raise _Apart
    mapping: dict[str, Any] = {}
    while True:
        event = next_event()
        kind = type(event)
        if kind is not ScalarEvent:
            if kind is MappingEndEvent:
                return mapping
            raise _Apart  # a mapping or sequence as a key, or an alias
        key = _scalar(event, texts)
        if type(key) is not str or key in mapping:
            raise _Apart
        event = next_event()
        kind = type(event)
        if kind is ScalarEvent:
            mapping[key] = _scalar(event, texts)
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            mapping[key] = _container(next_event, event, texts, depth)
        else:
            raise _Apart
