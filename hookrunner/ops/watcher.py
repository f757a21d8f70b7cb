"""Hot reload: watch hooks files and report "changed" or "removed"; knows nothing about HTTP or hooks.

It watches the parent directories, not the files, so renames over the file, deletes, re-creates and
Kubernetes ConfigMap `..data` symlink swaps are all seen, and it compares fingerprints so only real
changes are reported.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

#: Quiet time that ends a burst of events (an editor's write + rename, the kubelet's symlink dance).
DEBOUNCE = 0.12
#: A burst never delays a check for longer than this.
MAX_DELAY = 0.5
#: A slow stat-only check, in case the directory itself was replaced and its watch lost.
SAFETY_INTERVAL = 1.0

# Our own reads of the file produce these; reacting to them would loop forever.
_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})


@dataclass(frozen=True)
class Fingerprint:
    """What identifies one version of a file, after following symlinks."""

    device: int
    inode: int
    mtime_ns: int
    size: int
    digest: str


def fingerprint(path: str, previous: Fingerprint | None = None) -> Fingerprint | None:
    """The file's fingerprint, or None when it (or its symlink's target) does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    same_stat = (
        previous is not None
        and (previous.device, previous.inode, previous.mtime_ns, previous.size)
        == (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    )
    if same_stat and previous is not None and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
        # Unchanged and old enough that a same-size rewrite would have moved the mtime: skip hashing.
        return previous
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    return Fingerprint(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, digest)


class _Poke(FileSystemEventHandler):
    def __init__(self, poke: Callable[[], None]) -> None:
        self._poke = poke

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _IGNORED_EVENTS:
            self._poke()


class HooksWatcher:
    """Calls `on_change(path)` when a file's content or identity changes (or it comes back), and
    `on_remove(path)` when it disappears. Callbacks run one at a time on the watcher's own thread,
    with the path exactly as given."""

    def __init__(
        self,
        paths: Sequence[str],
        on_change: Callable[[str], object],
        on_remove: Callable[[str], object],
        debounce: float = DEBOUNCE,
    ) -> None:
        self.paths = tuple(dict.fromkeys(paths))
        self._on_change = on_change
        self._on_remove = on_remove
        self._debounce = debounce
        self._states: dict[str, Fingerprint | None] = {}
        self._observer = Observer()
        self._handler = _Poke(self._poke)
        self._watched: dict[str, tuple[int, ObservedWatch]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._last_event = 0.0
        self._thread = threading.Thread(target=self._run, name="hooks-watcher", daemon=True)

    def start(self) -> None:
        for path in self.paths:
            self._states[path] = fingerprint(path)
        self._schedule_directories()
        self._observer.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=2)
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _poke(self) -> None:
        self._last_event = time.monotonic()
        self._wake.set()

    def _directories(self) -> set[str]:
        # The file's own directory sees renames and symlink swaps; the target's directory sees writes
        # to a file reached through a symlink that lives elsewhere.
        found = set()
        for path in self.paths:
            found.add(os.path.dirname(os.path.abspath(path)))
            found.add(os.path.dirname(os.path.realpath(path)))
        return found

    def _schedule_directories(self) -> None:
        for directory in self._directories():
            try:
                inode = os.stat(directory).st_ino
            except OSError:
                continue  # not there yet; the safety check tries again
            known = self._watched.get(directory)
            if known is not None:
                if known[0] == inode:
                    continue
                # The directory was replaced: its old watch sees nothing any more.
                try:
                    self._observer.unschedule(known[1])
                except (KeyError, OSError):
                    pass
            try:
                watch = self._observer.schedule(self._handler, directory, recursive=False)
            except OSError:
                continue
            self._watched[directory] = (inode, watch)

    def _run(self) -> None:
        while not self._stopping.is_set():
            woken = self._wake.wait(timeout=SAFETY_INTERVAL)
            if self._stopping.is_set():
                return
            if woken:
                first = time.monotonic()
                # Let the burst settle, but never wait for longer than MAX_DELAY.
                while True:
                    quiet = time.monotonic() - self._last_event
                    if quiet >= self._debounce or time.monotonic() - first >= MAX_DELAY:
                        break
                    time.sleep(min(self._debounce - quiet, 0.05) if quiet < self._debounce else 0.01)
                self._wake.clear()
            self.check()

    def check(self) -> None:
        """Compare every file with what was last seen and report the differences."""
        self._schedule_directories()
        for path in self.paths:
            before = self._states.get(path)
            after = fingerprint(path, before)
            if after == before:
                continue
            self._states[path] = after
            try:
                if after is None:
                    self._on_remove(path)
                else:
                    self._on_change(path)
            except Exception:
                pass  # a failing callback must not end hot reload
