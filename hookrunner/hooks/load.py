"""Hooks files and the registry: reading a file (JSON or YAML, rendered first with -template) into its
hooks, and the registry that serves them per file and swaps whole sets on reload."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

from hookrunner.errors import DuplicateHookError, HooksFileError
from hookrunner.golang.decode import json_kind
from hookrunner.golang.yamljson import ReadOtherwise, decode_hooks_bytes, json_entries
from hookrunner.hooks.model import Hook, decode_hook
from hookrunner.ops import metrics
from hookrunner.ops.heap import malloc_trim
from hookrunner.ops.log import log
from hookrunner.ops.regularfile import read_regular_file


def parse_hooks(text: str) -> list[Hook]:
    """Hooks from the text of a JSON or YAML hooks file (JSON is read as YAML, as webhook does)."""
    with _collector_paused():
        return _parse_hooks(text)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a file is read: the hundreds of thousands of containers a
    big file's nodes and tree are would set off collections that walk all of them, again and again (10,000
    YAML hooks: 3.5 s of CPU with it, 1.2 s without). What a read builds holds no cycle. It is turned on
    again only if it was on when the read began: a pause of the gevent worker's (a big body's parse) that
    began first is left to end itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_hooks(text: str) -> list[Hook]:
    entries = json_entries(text)
    if entries is None:
        entries = _yaml_reader().yaml_entries(text)
    if entries is not None:
        try:
            return _decode_entries(entries)
        except ReadOtherwise:
            pass  # the exact readers decide, from the start
    data = _yaml_reader().yaml_tree(text)
    if data is None:
        return []
    if not isinstance(data, list):
        raise HooksFileError(f"json: cannot unmarshal {json_kind(data)} into Go value of type hook.Hooks")
    try:
        hooks = []
        for index, item in enumerate(data):
            hooks.append(decode_hook(item) if item is not None else Hook())
            data[index] = None  # each entry freed once decoded: its memory holds the next hooks
        return hooks
    except HooksFileError:
        raise
    except (ValueError, TypeError) as exc:  # a rule the rules module refuses
        raise HooksFileError(str(exc)) from exc


def _yaml_reader() -> ModuleType:
    """golang/yaml.py, loaded the first time a file is not plain JSON: PyYAML is not loaded at all to read
    JSON files (it was ~5% of a start's CPU). cli.py loads it before -setuid."""
    import hookrunner.golang.yaml

    return hookrunner.golang.yaml


def _decode_entries(entries: Iterator[Any]) -> list[Hook]:
    """Hooks decoded one entry at a time as a fast reading parses them, so that only the hooks and one
    entry's tree are ever held. As with a whole tree, the first entry that cannot be decoded is the error,
    but only once the whole file has been read: a file the exact readers would refuse is refused with their
    words (the iterator raises ReadOtherwise)."""
    hooks: list[Hook] = []
    problem: HooksFileError | None = None
    for item in entries:
        if problem is not None:
            continue  # read on: the rest of the file may yet be for the exact readers
        try:
            hooks.append(decode_hook(item) if item is not None else Hook())
        except HooksFileError as exc:
            problem = exc
        except (ValueError, TypeError) as exc:  # a rule the rules module refuses
            problem = HooksFileError(str(exc))
    if problem is not None:
        raise problem
    return hooks


def read_hooks_text(path: str, as_template: bool = False, data: bytes | None = None) -> str:
    """A hooks file's text as serving reads it: bytes as they are (`data` when the watcher already read
    them), rendered first with -template. Only a regular file up to the cap is read (ops/regularfile.py)."""
    # The bytes as they are: Go reads them so, and error line numbers count the same lines.
    text = decode_hooks_bytes(read_regular_file(path) if data is None else data)
    if as_template:
        # Loaded only for -template (it costs start-up time); cli.py preloads it before -setuid then.
        from hookrunner.hooks.template import render_hooks_template

        text = render_hooks_template(text)
    return text


def load_hooks(path: str, as_template: bool = False, data: bytes | None = None) -> list[Hook]:
    """Read one hooks file, optionally rendered as a Go template first; raises HooksFileError."""
    hooks = parse_hooks(read_hooks_text(path, as_template, data))
    # The text and each entry's tree are gone by now: their pages go back to the system instead of staying
    # in the heap among the hooks kept (10,000 hooks: 6 MiB less in the master, and in a reloading worker).
    malloc_trim()
    return hooks


# --- the registry ------------------------------------------------------------------------------------


class HookRegistry:
    """The hooks being served, per file; readers see an immutable snapshot that writers swap under a lock."""

    def __init__(self, files: Sequence[str], as_template: bool = False, digests: bool = False) -> None:
        self._as_template = as_template
        self._lock = threading.Lock()
        self._files: tuple[str, ...] = tuple(files)
        self._by_file: dict[str, tuple[Hook, ...]] = {}
        self._index: dict[str, Hook] = {}
        #: When each file's hooks were last (re)loaded, and who is told after each change (the run history).
        self.loaded_at: dict[str, float] = {}
        self.on_publish: Callable[[], None] | None = None
        #: Where a reload's lines go: the log, or (in the run owner) a list written out once every worker
        #: serves the new hooks (serve/ownerreload.py).
        self.say: Callable[[str], None] = log.output
        #: The hooks generation served (hooks/generation.py): 0 for the hooks read at the start.
        self.generation = 0
        #: How many times the served hooks were swapped.
        self.publishes = 0
        #: The checked text of each file (re)loaded since the start, kept when not None: the run owner's,
        #: which sends them to the workers.
        self.texts: dict[str, str] | None = None
        #: Called before a request matches its hook (`match_latest`): a worker's catch-up with the owner's
        #: generation (hooks/generation.py's Follower).
        self.latest: Callable[[], None] | None = None
        #: With `digests` (-hotreload), the SHA-256 of the bytes last read of each file ("" when none could
        #: be): the run owner's watcher starts after the master's read, and reports a file whose bytes are
        #: no longer these (ops/watcher.py), so that a change made in between is not lost.
        self.read_digests: dict[str, str] | None = {} if digests else None

    def _read(self, path: str, data: bytes | None = None) -> bytes:
        """A hooks file's bytes (`data`, or read by ops/regularfile.py's rules), their digest kept with
        `read_digests`."""
        if data is None:
            if self.read_digests is not None:
                self.read_digests[path] = ""
            data = read_regular_file(path)
        if self.read_digests is not None:
            import hashlib  # here: only -hotreload keeps digests

            self.read_digests[path] = hashlib.sha256(data).hexdigest()
        return data

    @property
    def files(self) -> tuple[str, ...]:
        return self._files

    def __len__(self) -> int:
        return sum(len(hooks) for hooks in self._by_file.values())

    def match(self, hook_id: str) -> Hook | None:
        return self._index.get(hook_id)

    def match_latest(self, hook_id: str) -> Hook | None:
        """The hook a request runs: matched once this process serves the latest hooks (raises
        HooksNotCurrent when it cannot catch up)."""
        if self.latest is not None:
            self.latest()
        return self._index.get(hook_id)

    @property
    def by_file(self) -> tuple[str, ...]:
        """The files whose hooks are served, in the order their hooks are matched."""
        return tuple(self._by_file)

    def files_now(self) -> list[tuple[str, str | None]]:
        """Each served file with its checked text, None for the hooks read at the start (with `texts`)."""
        texts = self.texts or {}
        return [(path, texts.get(path)) for path in self._by_file]

    def replace(self, by_file: dict[str, tuple[Hook, ...]], generation: int) -> None:
        """Serve `by_file` as generation `generation` (a worker following the owner), without a log line."""
        with self._lock:
            changed = [path for path, hooks in by_file.items() if self._by_file.get(path) is not hooks]
            self._publish(by_file, changed)
            self.generation = generation

    def hooks_of(self, path: str) -> tuple[Hook, ...]:
        return self._by_file.get(path, ())

    def _publish(self, by_file: dict[str, tuple[Hook, ...]], changed: Sequence[str] = ()) -> None:
        index: dict[str, Hook] = {}
        for hooks in by_file.values():
            for hook in hooks:
                index.setdefault(hook.id, hook)  # like webhook, the first hook with an id wins
        self._by_file = by_file
        self._index = index
        self.publishes += 1
        now = time.time()
        loaded = {path: self.loaded_at.get(path, now) for path in by_file}
        self.loaded_at = loaded | dict.fromkeys(changed, now)
        if self.on_publish is not None:
            self.on_publish()

    def load_initial(self) -> None:
        """Start-up: load every file as webhook does; an id loaded twice raises DuplicateHookError."""
        with self._lock:
            by_file: dict[str, tuple[Hook, ...]] = {}
            for path in self._files:
                log.printf("attempting to load hooks from %s\n", path)
                try:
                    hooks = load_hooks(path, self._as_template, self._read(path))
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
            self._publish(by_file, tuple(by_file))

    def reload_file(self, path: str, data: bytes | None = None) -> bool:
        """Reload one file (from `data`, its bytes as the watcher read them, if given); on any error the
        previous hooks stay. Returns whether the new hooks are served."""
        say = self.say
        with self._lock:
            say(f"attempting to reload hooks from {path}\n")
            try:
                text = read_hooks_text(path, self._as_template, self._read(path, data))
                hooks = parse_hooks(text)
            except HooksFileError as exc:
                say(f"couldn't load hooks from file! {exc}\n")
                metrics.record_reload(False)
                return False
            malloc_trim()  # the text's pages (see load_hooks)
            say(f"found {len(hooks)} hook(s) in file\n")
            elsewhere = {hook.id for other, group in self._by_file.items() if other != path for hook in group}
            seen: set[str] = set()
            for hook in hooks:
                if hook.id in elsewhere or hook.id in seen:
                    say(str(DuplicateHookError(hook.id)))
                    say("reverting hooks back to the previous configuration")
                    metrics.record_reload(False)
                    return False
                seen.add(hook.id)
                say(f"\tloaded: {hook.id}\n")
            by_file = dict(self._by_file)
            by_file[path] = tuple(hooks)
            if path not in self._files:
                self._files = (*self._files, path)
            if self.texts is not None:
                self.texts[path] = text
            self._publish(by_file, (path,))
            metrics.record_reload(True)
            return True

    def reload_all(self) -> None:
        for path in self._files:
            self.reload_file(path)

    def remove_file(self, path: str) -> int:
        """The file is gone: stop serving its hooks (re-creating the file restores them)."""
        say = self.say
        with self._lock:
            removed = self._by_file.get(path, ())
            for hook in removed:
                say(f"\tremoving: {hook.id}\n")
            by_file = {other: group for other, group in self._by_file.items() if other != path}
            if self.texts is not None:
                self.texts.pop(path, None)
            self._publish(by_file)
            say(f"removed {len(removed)} hook(s) that were loaded from file {path}\n")
            return len(removed)
