"""Hot reload: watch hooks files and report "changed" or "removed"; knows nothing about HTTP or hooks.

It watches the parent directories, not the files, so renames over the file, deletes, re-creates and
Kubernetes ConfigMap `..data` symlink swaps are all seen, and it compares fingerprints so only real
changes are reported.

Only complete writes are reported. Where the platform reports a writer's close (inotify's
IN_CLOSE_WRITE, watchdog's "closed" event on Linux), a file that a writer opened and modified is not read
until that writer closes it, and every read is checked against the event stream: the read's own close
must come back through it with no write to the file before it, or the read is thrown away and the next
close tries again. Elsewhere a burst of events must go quiet first, as before.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from hookrunner.errors import HooksFileError
from hookrunner.ops.log import log
from hookrunner.ops.regularfile import HOOKS_FILE_CAP, read_regular_file_probed

#: Quiet time that ends a burst of events (an editor's write + rename, the kubelet's symlink dance).
DEBOUNCE = 0.12
#: A burst never delays a check for longer than this.
MAX_DELAY = 0.5
#: A slow stat-only check, in case the directory itself was replaced and its watch lost.
SAFETY_INTERVAL = 1.0
#: How long a read waits for its own close to come back through the event stream: it comes at once, unless
#: the machine is very busy. With no event at all for the file by MARKER_WAIT, its directory is taken as
#: not watched and the read as it is; with other events but not that one, it waits up to MARKER_LAG.
MARKER_WAIT = 0.5
MARKER_LAG = 5.0
#: An open handle with no event at all for this long is taken as closed (the kernel merges identical
#: events, so a count can be off); a writer that pauses longer than this in the middle of a save is read.
STALE_OPEN = 5.0

# Reads (ours and others') produce these: they mark the event stream, they do not change the file.
_READ_EVENTS = frozenset({"opened", "closed_no_write"})
# Events that change which file a name points to (a rename over it, the kubelet's `..data` symlink swap); on
# other names of the folder, writes and closes do not touch the hooks file.
_STRUCTURE_EVENTS = frozenset({"moved", "created", "deleted"})


@dataclass(frozen=True)
class Fingerprint:
    """What identifies one version of a file, after following symlinks."""

    device: int
    inode: int
    mtime_ns: int
    size: int
    digest: str


def _unread(st: os.stat_result) -> Fingerprint:
    # Not a regular file, or over the cap: identified by its status alone, never read.
    return Fingerprint(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, f"unread:{stat.S_IFMT(st.st_mode)}")


Snapshot = tuple[Fingerprint | None, bytes | None, bool | None]


def snapshot(path: str, previous: Fingerprint | None = None, probe: bool = False) -> Snapshot:
    """The file's fingerprint (None when it, or its symlink's target, does not exist), the bytes it was
    taken from (None when they were not read: unchanged, not a regular file, or over the cap), and
    whether a process had it open for writing when the read ended (None: not known, or not `probe`d)."""
    try:
        st = os.stat(path)
    except OSError:
        return None, None, None
    if not stat.S_ISREG(st.st_mode) or st.st_size > HOOKS_FILE_CAP:
        return _unread(st), None, None
    same_stat = previous is not None and (
        previous.device,
        previous.inode,
        previous.mtime_ns,
        previous.size,
    ) == (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    if same_stat and previous is not None and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
        # Unchanged and old enough that a same-size rewrite would have moved the mtime: skip hashing.
        return previous, None, None
    try:
        st, data, writers = read_regular_file_probed(path, probe_writers=probe)
    except HooksFileError:
        try:
            return _unread(os.stat(path)), None, None  # it changed kind under us; the loader will say why
        except OSError:
            return None, None, None
    digest = hashlib.sha256(data).hexdigest()
    return Fingerprint(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, digest), data, writers


def fingerprint(path: str, previous: Fingerprint | None = None) -> Fingerprint | None:
    """The file's fingerprint, or None when it (or its symlink's target) does not exist."""
    return snapshot(path, previous)[0]


def _quiet_lease_breaks() -> bool:
    """Whether reads may probe for writers with a lease. A writer that opens the file in the instant a
    read holds its lease makes the kernel send SIGIO, whose default action ends the process: it gets a
    handler (a handler, unlike SIG_IGN, is not passed on to the commands hookrunner starts). Only the
    main thread may set one; started elsewhere, with SIGIO unhandled, reads do not probe."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGIO) == signal.SIG_DFL:
        signal.signal(signal.SIGIO, lambda signum, frame: None)
    return signal.getsignal(signal.SIGIO) not in (signal.SIG_DFL, None)


def _event_key(path: str | bytes) -> str:
    # Events name a file by the watched directory's path; files are known by their real path.
    text = os.fsdecode(path)
    return os.path.join(os.path.realpath(os.path.dirname(text)), os.path.basename(text))


class _Events(FileSystemEventHandler):
    def __init__(self, watcher: HooksWatcher) -> None:
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._watcher._event(event)


def _reports_closes(observer: object) -> bool:
    try:
        from watchdog.observers.inotify import InotifyObserver
    except (ImportError, OSError):  # not Linux
        return False
    return isinstance(observer, InotifyObserver)


class HooksWatcher:
    """Calls `on_change(path, data)` when a file's content or identity changes (or it comes back), with
    the bytes it read (None when it did not read them: not a regular file, or over the cap), and
    `on_remove(path)` when it disappears. Callbacks run one at a time on the watcher's own thread (those
    for what `start` finds changed, on start's, before that thread starts), with the path exactly as
    given."""

    def __init__(
        self,
        paths: Sequence[str],
        on_change: Callable[[str, bytes | None], object],
        on_remove: Callable[[str], object],
        debounce: float = DEBOUNCE,
    ) -> None:
        self.paths = tuple(dict.fromkeys(paths))
        self._on_change = on_change
        self._on_remove = on_remove
        self._debounce = debounce
        self._states: dict[str, Fingerprint | None] = {}
        self._observer = Observer()
        #: Whether writers' closes are reported; without them, a quiet period stands in for one.
        self.close_events = _reports_closes(self._observer)
        self._handler = _Events(self)
        self._watched: dict[str, tuple[int, ObservedWatch]] = {}
        self._wake = threading.Event()
        self._urgent = False
        self._stopping = threading.Event()
        self._last_event = 0.0
        self._thread = threading.Thread(target=self._run, name="hooks-watcher", daemon=True)
        self._probe = False  # whether reads ask the kernel if a writer has the file open (start())
        # What the event stream says of each file, by real path, under _seen.
        self._seen = threading.Condition()
        self._reals: frozenset[str] = frozenset()
        self._changes: Counter[str] = Counter()  # events that may change the file's bytes
        self._read_closes: Counter[str] = Counter()  # closes of a reader (ours among them)
        self._open: Counter[str] = Counter()  # opened and not yet closed
        self._opens: Counter[str] = Counter()  # opened, ever
        self._last_seen: dict[str, float] = {}
        self._deferred: set[str] = set()  # not read because it was open; read again at its last close

    def start(self, read: Mapping[str, str] | None = None) -> None:
        """Watch from now on. `read`: the SHA-256 of the bytes the caller read of each file before ("" for
        none); a file whose bytes are not those any more is reported at once, changed (or removed), so
        that a change between that read and this start is not lost."""
        self._probe = self.close_events and _quiet_lease_breaks()
        self._remember_real_paths()
        missed: list[tuple[str, bytes | None]] = []
        for path in self.paths:
            now, data, _ = snapshot(path)
            self._states[path] = now
            before = (read or {}).get(path)
            if before is not None and (now.digest if now is not None else "") != before:
                missed.append((path, data))
        self._schedule_directories()
        self._observer.start()
        for path, data in missed:  # after the observer's start: a change from now on is its to report
            if self._states[path] is None:
                self._on_remove(path)
            else:
                self._on_change(path, data)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=2)
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    # --- the event stream (watchdog's thread) ----------------------------------------------------------

    def _event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        keys = {_event_key(event.src_path)}
        if getattr(event, "dest_path", ""):
            keys.add(_event_key(event.dest_path))
        files = set() if event.is_directory else keys & self._reals
        urgent = False
        now = time.monotonic()
        with self._seen:
            for key in files:
                self._last_seen[key] = now
                if kind == "opened":
                    self._open[key] += 1
                    self._opens[key] += 1
                    continue
                if kind in ("closed", "closed_no_write"):
                    self._open[key] = max(0, self._open[key] - 1)
                    # The last handle closed: a write is complete, or a reader no longer hides one.
                    urgent = urgent or (self._open[key] == 0 and (kind == "closed" or key in self._deferred))
                if kind == "closed_no_write":
                    self._read_closes[key] += 1
                    continue
                self._changes[key] += 1
                if kind in ("moved", "deleted"):
                    self._open[key] = 0  # handles on the old file are not this name's any more
            self._seen.notify_all()
        if kind in _READ_EVENTS and not urgent:
            return
        if not files and kind not in _STRUCTURE_EVENTS:
            # Another file of the folder written to (a log beside the hooks file): no burst to wait for.
            return
        self._last_event = now
        if urgent:
            self._urgent = True  # a finished write needs no quiet period
        self._wake.set()

    def _writing(self, real: str) -> bool:
        """Another process has the file open (a writer, as far as the events tell): its bytes may not be
        complete yet. Used where the kernel cannot be asked (no read lease on this file). A count left over
        from events the kernel merged expires after STALE_OPEN of silence."""
        if not self.close_events or self._open[real] <= 0:
            return False
        return time.monotonic() - self._last_seen[real] < STALE_OPEN

    # --- checking (the watcher's thread) ---------------------------------------------------------------

    def _remember_real_paths(self) -> dict[str, str]:
        reals = {path: os.path.realpath(path) for path in self.paths}
        with self._seen:
            self._reals = frozenset(reals.values())
        return reals

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
                while not self._urgent:
                    quiet = time.monotonic() - self._last_event
                    if quiet >= self._debounce or time.monotonic() - first >= MAX_DELAY:
                        break
                    time.sleep(min(self._debounce - quiet, 0.05) if quiet < self._debounce else 0.01)
                self._urgent = False
                self._wake.clear()
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - whatever one check meets, hot reload goes on
                log.output(f"hot reload: checking the hooks files failed: {type(exc).__name__}: {exc}")
                time.sleep(self._debounce)

    def _read(
        self, path: str, real: str, before: Fingerprint | None
    ) -> tuple[bool, Fingerprint | None, bytes | None]:
        """(complete, fingerprint, bytes): a snapshot, and whether no write touched the file while it was
        taken. The read's own open and close go through the same event stream as the writers' events,
        in order, so once its close has come back, every write that began before it has been seen."""
        with self._seen:
            if not self._probe and self._writing(real):
                self._deferred.add(real)
                return False, None, None
            self._deferred.discard(real)
            changes, closes, opens = self._changes[real], self._read_closes[real], self._opens[real]
            seen = self._last_seen.get(real)
        after, data, writers = snapshot(path, before, self._probe)
        if data is None or not self.close_events:
            return True, after, data
        with self._seen:
            marked = self._seen.wait_for(lambda: self._read_closes[real] > closes, timeout=MARKER_WAIT)
            unwatched = not marked and self._last_seen.get(real) == seen
            if not marked and not unwatched:
                marked = self._seen.wait_for(lambda: self._read_closes[real] > closes, timeout=MARKER_LAG)
            if writers is None:  # the kernel could not be asked: the events tell, as far as they can
                writers = self._writing(real) or self._opens[real] - opens > 1
            # Nobody had the file open for writing as the read ended, and nothing changed it until the read's
            # own close.
            complete = not writers and self._changes[real] == changes and (marked or unwatched)
            if not complete:
                self._deferred.add(real)
        return complete, after, data

    def check(self) -> None:
        """Compare every file with what was last seen and report the differences."""
        self._schedule_directories()
        reals = self._remember_real_paths()
        for path in self.paths:
            before = self._states.get(path)
            complete, after, data = self._read(path, reals[path], before)
            if not complete or after == before:
                continue  # a write in progress is read again when its writer closes the file
            try:
                if after is None:
                    self._on_remove(path)
                else:
                    self._on_change(path, data)
            except Exception as exc:  # noqa: BLE001 - a failing callback must not end hot reload
                # Not recorded as seen: the change is offered again at the next check.
                log.output(f"hot reload: handling a change of {path} failed: {type(exc).__name__}: {exc}")
                continue
            self._states[path] = after
