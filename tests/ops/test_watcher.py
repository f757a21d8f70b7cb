"""The hooks-file watcher on a real filesystem: every way editors, tools and the kubelet change a file."""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hookrunner.ops.regularfile import HOOKS_FILE_CAP
from hookrunner.ops.watcher import HooksWatcher, fingerprint

#: Hot reload promises the served hooks follow a change within one second.
DEADLINE = 1.0


class Recorder:
    """Collects (kind, path) reports from the watcher thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.data: list[bytes | None] = []  # the bytes handed over with each change
        self._cond = threading.Condition()

    def changed(self, path: str, data: bytes | None = None) -> None:
        with self._cond:
            self.events.append(("change", path))
            self.data.append(data)
            self._cond.notify_all()

    def removed(self, path: str) -> None:
        with self._cond:
            self.events.append(("remove", path))
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = DEADLINE) -> list[tuple[str, str]]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.events) >= count, timeout=timeout)
            return list(self.events)


@pytest.fixture
def hooks_file(tmp_path: Path) -> Path:
    path = tmp_path / "hooks.json"
    path.write_text('[{"id": "a"}]')
    return path


def watch(paths: list[str], recorder: Recorder, close_events: bool = True, probe: bool = True) -> HooksWatcher:
    watcher = HooksWatcher(paths, recorder.changed, recorder.removed)
    watcher.close_events = watcher.close_events and close_events
    watcher.start()
    watcher._probe = watcher._probe and probe  # before its first check, which waits for an event
    return watcher


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield Recorder()


def test_nothing_changes_nothing_reported(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        # Longer than the safety interval, so the periodic check has run at least once.
        assert recorder.wait_for(1, timeout=1.5) == []
        hooks_file.read_text()  # reading the file is not a change
        assert recorder.wait_for(1, timeout=0.5) == []
    finally:
        watcher.stop()


def test_in_place_write(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        started = time.monotonic()
        with open(hooks_file, "r+") as handle:
            handle.write('[{"id": "b"}]')
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        assert time.monotonic() - started < DEADLINE
    finally:
        watcher.stop()


def test_truncate_then_write_is_one_change(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        with open(hooks_file, "w") as handle:  # truncates, then writes: a burst of events
            handle.flush()
            time.sleep(0.02)
            handle.write('[{"id": "c"}]')
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        assert recorder.wait_for(2, timeout=0.4) == [("change", str(hooks_file))]
    finally:
        watcher.stop()


def test_same_size_rewrite_is_seen(hooks_file: Path, recorder: Recorder) -> None:
    # Same length, possibly the same mtime tick: only the content hash tells it apart.
    watcher = watch([str(hooks_file)], recorder)
    try:
        hooks_file.write_text('[{"id": "z"}]')
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
    finally:
        watcher.stop()


def test_atomic_rename_over(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        temp = hooks_file.with_name(".hooks.json.swp")
        temp.write_text('[{"id": "renamed"}]')
        os.replace(temp, hooks_file)
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        # The watch survives the rename: a second replacement is seen too (webhook loses track here).
        temp.write_text('[{"id": "renamed-again"}]')
        os.replace(temp, hooks_file)
        assert recorder.wait_for(2) == [("change", str(hooks_file))] * 2
    finally:
        watcher.stop()


def test_delete_then_recreate(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        hooks_file.unlink()
        assert recorder.wait_for(1) == [("remove", str(hooks_file))]
        hooks_file.write_text('[{"id": "back"}]')
        assert recorder.wait_for(2) == [("remove", str(hooks_file)), ("change", str(hooks_file))]
    finally:
        watcher.stop()


def test_missing_at_start_then_created(tmp_path: Path, recorder: Recorder) -> None:
    path = tmp_path / "later.yaml"
    watcher = watch([str(path)], recorder)
    try:
        path.write_text("- id: later\n")
        assert recorder.wait_for(1) == [("change", str(path))]
    finally:
        watcher.stop()


def test_only_the_changed_file_is_reported(tmp_path: Path, recorder: Recorder) -> None:
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    first.write_text("[]")
    second.write_text("[]")
    watcher = watch([str(first), str(second)], recorder)
    try:
        second.write_text('[{"id": "two"}]')
        assert recorder.wait_for(1) == [("change", str(second))]
        assert recorder.wait_for(2, timeout=0.4) == [("change", str(second))]
    finally:
        watcher.stop()


def test_relative_path_is_reported_as_given(
    tmp_path: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("hooks.json").write_text("[]")
    watcher = watch(["hooks.json"], recorder)
    try:
        Path("hooks.json").write_text('[{"id": "rel"}]')
        assert recorder.wait_for(1) == [("change", "hooks.json")]
    finally:
        watcher.stop()


def _configmap_version(volume: Path, stamp: str, content: str) -> str:
    """Write one timestamped data directory as the kubelet's atomic writer does."""
    name = f"..{stamp}"
    (volume / name).mkdir()
    (volume / name / "hooks.yaml").write_text(content)
    return name


def _configmap_swap(volume: Path, target: str) -> None:
    """The kubelet's update: a `..data_tmp` symlink renamed over `..data`, then the old dir removed."""
    old = os.readlink(volume / "..data")
    os.symlink(target, volume / "..data_tmp")
    os.rename(volume / "..data_tmp", volume / "..data")
    for child in (volume / old).iterdir():
        child.unlink()
    (volume / old).rmdir()


def test_kubernetes_configmap_symlink_swap(tmp_path: Path, recorder: Recorder) -> None:
    volume = tmp_path / "config"
    volume.mkdir()
    first = _configmap_version(volume, "2026_11_22_10_00_00.123", "- id: v1\n")
    os.symlink(first, volume / "..data")
    os.symlink("..data/hooks.yaml", volume / "hooks.yaml")
    served = str(volume / "hooks.yaml")
    watcher = watch([served], recorder)
    try:
        second = _configmap_version(volume, "2026_11_22_10_05_00.456", "- id: v2\n")
        started = time.monotonic()
        _configmap_swap(volume, second)
        assert recorder.wait_for(1) == [("change", served)]
        assert time.monotonic() - started < DEADLINE
        assert Path(served).read_text() == "- id: v2\n"
        # And again: the watch is on the volume directory, which the swap never replaces.
        third = _configmap_version(volume, "2026_11_22_10_10_00.789", "- id: v3\n")
        _configmap_swap(volume, third)
        assert recorder.wait_for(2) == [("change", served)] * 2
    finally:
        watcher.stop()


def test_symlink_to_a_file_in_another_directory(tmp_path: Path, recorder: Recorder) -> None:
    real_dir, link_dir = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    link_dir.mkdir()
    (real_dir / "hooks.json").write_text("[]")
    os.symlink(real_dir / "hooks.json", link_dir / "hooks.json")
    watcher = watch([str(link_dir / "hooks.json")], recorder)
    try:
        (real_dir / "hooks.json").write_text('[{"id": "through-link"}]')
        assert recorder.wait_for(1) == [("change", str(link_dir / "hooks.json"))]
    finally:
        watcher.stop()


def test_directory_replaced_is_picked_up_again(tmp_path: Path, recorder: Recorder) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = folder / "hooks.json"
    path.write_text("[]")
    watcher = watch([str(path)], recorder)
    try:
        path.unlink()
        folder.rmdir()
        assert recorder.wait_for(1, timeout=2.5) == [("remove", str(path))]
        folder.mkdir()
        path.write_text('[{"id": "new-dir"}]')
        # The old directory watch is dead; the periodic check notices the new one.
        assert recorder.wait_for(2, timeout=2.5) == [("remove", str(path)), ("change", str(path))]
    finally:
        watcher.stop()


def test_fingerprint_follows_symlinks_and_sees_absence(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text("[]")
    link = tmp_path / "l.json"
    os.symlink(target, link)
    assert fingerprint(str(link)) == fingerprint(str(target))
    target.unlink()
    assert fingerprint(str(link)) is None


# --- complete writes only ---------------------------------------------------------------------------------


def test_linux_reports_writers_closes(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        assert watcher.close_events  # inotify: the guarantees below hold through close events
        assert watcher._probe  # and the kernel is asked about writers (the test owns the file)
    finally:
        watcher.stop()


@pytest.mark.parametrize("close_events", [True, False], ids=["close-events", "quiet-period-fallback"])
def test_in_place_write_hands_over_the_bytes(hooks_file: Path, recorder: Recorder, close_events: bool) -> None:
    watcher = watch([str(hooks_file)], recorder, close_events)
    try:
        with open(hooks_file, "r+b") as handle:
            handle.write(b'[{"id": "b"}]')
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        assert recorder.data == [b'[{"id": "b"}]']
    finally:
        watcher.stop()


@pytest.mark.parametrize("probe", [True, False], ids=["read-lease", "events-only"])
def test_slow_in_place_save_is_reported_once_complete(hooks_file: Path, recorder: Recorder, probe: bool) -> None:
    """Truncated, then the new text 400 ms later in the same open: the empty file in between, though
    quiet for longer than the quiet period and the safety check, is never reported; whether the kernel
    is asked about writers (a read lease) or, where it cannot be, the events alone tell."""
    watcher = watch([str(hooks_file)], recorder, probe=probe)
    try:
        for saves in range(2):  # the second time with the watcher's own reads of the first in the stream
            with open(hooks_file, "r+b") as handle:
                handle.truncate(0)
                handle.flush()
                time.sleep(1.2)  # longer than the safety interval too
                assert recorder.events == [("change", str(hooks_file))] * saves  # not the empty file
                handle.write(b'[{"id": "slow-%d"}]' % saves)
            recorder.wait_for(saves + 1)
        assert recorder.data == [b'[{"id": "slow-0"}]', b'[{"id": "slow-1"}]']
    finally:
        watcher.stop()


def test_empty_file_closed_on_purpose_is_reported(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        with open(hooks_file, "wb"):
            pass
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        assert recorder.data == [b""]
    finally:
        watcher.stop()


def test_writer_that_keeps_the_file_open_is_not_read(hooks_file: Path, recorder: Recorder) -> None:
    watcher = watch([str(hooks_file)], recorder)
    try:
        with open(hooks_file, "r+b") as handle:
            handle.write(b'[{"id": "half')
            handle.flush()
            assert recorder.wait_for(1, timeout=1.6) == []
            handle.write(b'"}]')
        assert recorder.wait_for(1) == [("change", str(hooks_file))]
        assert recorder.data == [b'[{"id": "half"}]']
    finally:
        watcher.stop()


def test_rapid_in_place_saves_hand_over_only_whole_versions(hooks_file: Path, recorder: Recorder) -> None:
    """Two-piece and truncate-then-write saves at about 100 a second: every version handed over is one
    that a writer finished."""
    versions = [b'[{"id": "v%d", "pad": "%s"}]' % (i, b"x" * (i % 7) * 40) for i in range(120)]
    watcher = watch([str(hooks_file)], recorder)
    try:
        for i, text in enumerate(versions):
            if i % 2:
                fd = os.open(hooks_file, os.O_WRONLY)
                os.write(fd, text[: len(text) // 2])
                os.write(fd, text[len(text) // 2 :])
                os.ftruncate(fd, len(text))
            else:
                fd = os.open(hooks_file, os.O_WRONLY | os.O_TRUNC)
                os.write(fd, text)
            os.close(fd)
            time.sleep(0.01)
        # The last version arrives (bounded wait; a loaded machine may take a while), then nothing after it.
        deadline = time.monotonic() + 10
        while not (recorder.data and recorder.data[-1] == versions[-1]) and time.monotonic() < deadline:
            time.sleep(0.02)
        recorder.wait_for(len(recorder.events) + 1, timeout=0.5)
        assert recorder.data, "no change reported"
        assert set(recorder.data) <= set(versions)
        assert recorder.data[-1] == versions[-1]
    finally:
        watcher.stop()


# --- only regular files, bounded ------------------------------------------------------------------------


def _not_regular(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    elif kind == "directory":
        path.mkdir()
    else:
        with open(path, "wb") as handle:
            handle.truncate(HOOKS_FILE_CAP + 1)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "socket", "directory", "over-cap"])
def test_not_a_regular_file_is_reported_unread_then_picked_up_again(
    tmp_path: Path, recorder: Recorder, kind: str
) -> None:
    path = tmp_path / "hooks.json"
    path.write_text("[]")
    watcher = watch([str(path)], recorder)
    try:
        path.unlink()
        _not_regular(kind, path)
        events = recorder.wait_for(2, timeout=1.5)
        # Seen as a change (the loader then says why it is refused), never read, and the watcher goes on.
        assert events[-1] == ("change", str(path)) and recorder.data[-1] is None
        assert watcher._thread.is_alive()
        count = len(events)
        assert recorder.wait_for(count + 1, timeout=1.2) == events  # reported once, not each second
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
        path.write_text('[{"id": "regular-again"}]')
        later = recorder.wait_for(count + 2, timeout=2.5)
        assert later[-1] == ("change", str(path)) and recorder.data[-1] == b'[{"id": "regular-again"}]'
    finally:
        watcher.stop()


def test_a_failing_callback_is_logged_and_the_change_offered_again(
    hooks_file: Path, recorder: Recorder, log_lines: io.StringIO
) -> None:
    failures = [RuntimeError("the loader broke")]

    def changed(path: str, data: bytes | None = None) -> None:
        if failures:
            raise failures.pop()
        recorder.changed(path, data)

    watcher = HooksWatcher([str(hooks_file)], changed, recorder.removed)
    watcher.start()
    try:
        hooks_file.write_text('[{"id": "b"}]')
        # The first offer fails; the next check (at the latest the safety interval) offers it again.
        assert recorder.wait_for(1, timeout=DEADLINE + 1.5) == [("change", str(hooks_file))]
        assert recorder.data == [b'[{"id": "b"}]']
    finally:
        watcher.stop()
    assert log_lines.getvalue().count("\n") == 1
    assert log_lines.getvalue().rstrip().endswith(
        f"hot reload: handling a change of {hooks_file} failed: RuntimeError: the loader broke"
    )


def test_a_change_before_the_start_is_reported_against_what_the_caller_read(
    tmp_path: Path, recorder: Recorder
) -> None:
    # The run owner's watcher starts after the master has read the files: what changed in between is
    # reported at the start, compared with the digests of the bytes the master read (hooks/load.py).
    from hookrunner.hooks.load import HookRegistry

    same, changed, gone = (tmp_path / name for name in ("same.json", "changed.json", "gone.json"))
    for path in (same, changed, gone):
        path.write_text(f'[{{"id": "{path.stem}", "execute-command": "/bin/true"}}]')
    registry = HookRegistry([str(same), str(changed), str(gone)], digests=True)
    registry.load_initial()
    assert registry.read_digests is not None and all(registry.read_digests.values())
    changed.write_text('[{"id": "changed", "execute-command": "/bin/false"}]')
    gone.unlink()
    watcher = HooksWatcher(registry.files, recorder.changed, recorder.removed)
    watcher.start(registry.read_digests)
    try:
        assert sorted(recorder.wait_for(2)) == [("change", str(changed)), ("remove", str(gone))]
        assert recorder.data == [changed.read_bytes()]
        assert recorder.wait_for(3, timeout=0.5) == recorder.events[:2]  # nothing for the file unchanged
    finally:
        watcher.stop()


def test_without_digests_the_registry_keeps_none(hooks_file: Path) -> None:
    from hookrunner.hooks.load import HookRegistry

    registry = HookRegistry([str(hooks_file)])
    registry.load_initial()
    assert registry.read_digests is None
