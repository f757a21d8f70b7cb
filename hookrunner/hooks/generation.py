"""One moment for every worker's hooks (issue 32 step 9, docs/run-state.md): the generation counter every
process of the tree shares, what a generation of hooks is as it crosses from the run owner to a worker,
and the worker's side, which builds that generation's registry and catches up with it before matching."""

from __future__ import annotations

import ctypes
import mmap
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from hookrunner.errors import HooksFileError, HooksNotCurrent
from hookrunner.hooks.load import HookRegistry, parse_hooks
from hookrunner.ops.log import log

#: A generation's files: each path in the registry's order, with the checked text (rendered, with
#: -template) its hooks are read from, or None for the hooks the tree read at its start.
Files = Sequence[tuple[str, str | None]]

#: How long a request waits for its worker to apply the generation the owner published before it is
#: answered 503 (the worker's connection to the owner is gone, or its reload message does not come).
CATCH_UP_WAIT = 10.0


class SharedGeneration:
    """An 8-byte counter in an anonymous MAP_SHARED page, made by the master before any fork, so that the
    run owner's bump is seen by every worker at once. Only the owner writes it; an aligned 64-bit load or
    store is one instruction, never torn."""

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, mmap.PAGESIZE)  # anonymous: MAP_SHARED | MAP_ANONYMOUS
        self._value = ctypes.c_uint64.from_buffer(self._page)

    @property
    def value(self) -> int:
        return int(self._value.value)

    def set(self, value: int) -> None:
        self._value.value = value


def _text_bytes(text: str) -> bytes:
    # Lossless for any text: a file's undecodable bytes are kept as surrogates (yamljson's decode).
    return text.encode("utf-8", "surrogatepass")


def pack(files: Files) -> tuple[dict[str, Any], bytes]:
    """A generation's files as a message's fields and its bytes: each file's path and the length of its
    text (None: the start-up hooks), then the texts one after the other."""
    texts = [(path, None if text is None else _text_bytes(text)) for path, text in files]
    fields = {"files": [[path, None if data is None else len(data)] for path, data in texts]}
    return fields, b"".join(data for _, data in texts if data is not None)


def unpack(fields: dict[str, Any], data: bytes) -> list[tuple[str, str | None]]:
    """The files `pack` made; raises ValueError for a message that does not add up."""
    files: list[tuple[str, str | None]] = []
    offset = 0
    listed = fields.get("files")
    if not isinstance(listed, list):
        raise ValueError("no files")
    for entry in listed:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise ValueError(f"a file entry {entry!r:.100}")
        path, length = entry
        if length is None:
            files.append((path, None))
            continue
        if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= len(data) - offset:
            raise ValueError(f"a file length {length!r}")
        files.append((path, data[offset : offset + length].decode("utf-8", "surrogatepass")))
        offset += length
    if offset != len(data):
        raise ValueError(f"{len(data) - offset} bytes left over")
    return files


class Offload(Protocol):
    """How a worker waits and where it parses (run/spawn.py's Waits: threads, or the gevent loop)."""

    def sleep(self, seconds: float) -> None: ...

    def offload(self, work: Callable[..., Any], *args: Any) -> Any: ...


class Follower:
    """A worker's hooks, following the owner's generations: `apply` builds a generation's registry (off the
    request path: on the reader of the owner's connection, the parse on a native thread), and
    `catch_up`, called by each request before it matches its hook, waits until the worker has applied
    the generation the shared counter names."""

    def __init__(self, registry: HookRegistry, shared: SharedGeneration, waits: Offload) -> None:
        self._registry = registry
        self._shared = shared
        self._waits = waits
        #: The hooks the tree read at its start, as this worker was forked with them.
        self._start = {path: registry.hooks_of(path) for path in registry.by_file}
        self._parsed: dict[str, tuple[bytes, tuple[Any, ...]]] = {}  # path: (digest of its text, hooks)
        self.catch_up_wait = CATCH_UP_WAIT

    def apply(self, generation: int, files: Files) -> None:
        """Serve generation `generation`, made of `files`; an older or the same generation is ignored. Each
        text was checked by the owner; a file whose text is unchanged is not parsed again."""
        if generation <= self._registry.generation:
            return
        import hashlib  # here: the master, which imports this module, loads no OpenSSL (performance.md)

        by_file: dict[str, tuple[Any, ...]] = {}
        parsed: dict[str, tuple[bytes, tuple[Any, ...]]] = {}
        for path, text in files:
            if text is None:
                by_file[path] = self._start.get(path, ())
                continue
            digest = hashlib.sha256(_text_bytes(text)).digest()
            known = self._parsed.get(path)
            if known is not None and known[0] == digest:
                hooks = known[1]
            else:
                try:
                    hooks = tuple(self._waits.offload(parse_hooks, text))
                except HooksFileError as exc:  # the owner read it; this worker cannot: keep its hooks
                    log.output(f"hooks of {path} not read by worker: {exc}", level="error")
                    hooks = self._registry.hooks_of(path)
            by_file[path] = hooks
            parsed[path] = (digest, hooks)
        self._parsed = parsed
        self._registry.replace(by_file, generation)

    def catch_up(self) -> None:
        """Return once this worker serves the generation the owner last published (at once, nearly always:
        one read of the shared counter); raises HooksNotCurrent after `catch_up_wait`."""
        target = self._shared.value
        if self._registry.generation >= target:
            return
        deadline = time.monotonic() + self.catch_up_wait
        while self._registry.generation < target:
            if time.monotonic() >= deadline:
                raise HooksNotCurrent(f"hooks generation {target} not received")
            self._waits.sleep(0.001)
