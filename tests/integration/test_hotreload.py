"""-hotreload end to end: change the hooks file the ways people do, and the served hooks follow within 1 s."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from test_serving import Server, wait_until

#: The promise: within one second of a change, requests see the new hooks.
DEADLINE = 1.0


def hook(hook_id: str) -> dict[str, object]:
    return {"id": hook_id, "execute-command": "/bin/echo", "response-message": f"I am {hook_id}"}


def status(server: Server, hook_id: str) -> int:
    try:
        return server.request("POST", f"/hooks/{hook_id}")[0]
    except OSError:
        return 0


def served_within(server: Server, hook_id: str, expected: int, started: float) -> float:
    """Poll until `hook_id` answers `expected`; return how long after `started` that happened."""
    assert wait_until(lambda: status(server, hook_id) == expected, timeout=5, interval=0.02), server.log
    return time.monotonic() - started


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str,
          hooks_name: str = "hooks.json") -> Server:
    server = Server(tmp_path, hooks, "-hotreload", *flags, hooks_name=hooks_name)
    servers.append(server)
    server.ready()
    return server


def test_in_place_write(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [hook("one")])
    assert f"setting up file watcher for {server.hooks_path}" in server.log
    started = time.monotonic()
    with open(server.hooks_path, "r+") as handle:
        handle.seek(0)
        handle.write(json.dumps([hook("one"), hook("two")]))
        handle.truncate()
    assert served_within(server, "two", 200, started) < DEADLINE
    assert status(server, "one") == 200
    assert f"hooks file {server.hooks_path} modified" in server.log


def test_atomic_rename_over_twice(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [hook("one")])
    for name in ("two", "three"):
        temp = tmp_path / f".hooks.json.{name}"
        temp.write_text(json.dumps([hook(name)]))
        started = time.monotonic()
        os.replace(temp, server.hooks_path)
        assert served_within(server, name, 200, started) < DEADLINE
    assert status(server, "one") == 404
    assert status(server, "two") == 404


def test_delete_removes_hooks_and_recreate_restores_them(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [hook("one")])
    started = time.monotonic()
    server.hooks_path.unlink()
    assert served_within(server, "one", 404, started) < DEADLINE
    started = time.monotonic()
    server.write_hooks([hook("one"), hook("again")])
    assert served_within(server, "again", 200, started) < DEADLINE
    assert status(server, "one") == 200


def test_broken_edit_keeps_the_previous_hooks(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [hook("one")])
    server.write_hooks('[{"id": "half-writ')
    assert server.wait_for_log("couldn't load hooks from file!", timeout=3)
    assert status(server, "one") == 200
    started = time.monotonic()
    server.write_hooks([hook("fixed")])
    assert served_within(server, "fixed", 200, started) < DEADLINE


def test_duplicate_id_across_files_reverts_the_edit(tmp_path: Path, servers: list[Server]) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps([hook("taken")]))
    server = start(tmp_path, servers, [hook("one")], "-hooks", str(other))
    server.write_hooks([hook("one"), hook("taken"), hook("new")])
    assert server.wait_for_log("reverting hooks back to the previous configuration", timeout=3)
    assert status(server, "new") == 404
    assert status(server, "one") == 200
    assert status(server, "taken") == 200


def test_kubernetes_configmap_update(tmp_path: Path, servers: list[Server]) -> None:
    # The volume layout the kubelet creates, and its atomic update by renaming a `..data_tmp` symlink.
    volume = tmp_path / "config"
    volume.mkdir()
    (volume / "..2026_11_22_10_00_00.123").mkdir()
    (volume / "..2026_11_22_10_00_00.123" / "hooks.json").write_text(json.dumps([hook("v1")]))
    os.symlink("..2026_11_22_10_00_00.123", volume / "..data")
    os.symlink("..data/hooks.json", volume / "hooks.json")
    server = start(volume, servers, None)
    assert status(server, "v1") == 200

    (volume / "..2026_11_22_10_05_00.456").mkdir()
    (volume / "..2026_11_22_10_05_00.456" / "hooks.json").write_text(json.dumps([hook("v2")]))
    started = time.monotonic()
    os.symlink("..2026_11_22_10_05_00.456", volume / "..data_tmp")
    os.rename(volume / "..data_tmp", volume / "..data")
    (volume / "..2026_11_22_10_00_00.123" / "hooks.json").unlink()
    (volume / "..2026_11_22_10_00_00.123").rmdir()
    assert served_within(server, "v2", 200, started) < DEADLINE
    assert status(server, "v1") == 404


def test_file_missing_at_start_is_served_once_created(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, None, "-nopanic", hooks_name="later.json")
    assert status(server, "late") == 404
    started = time.monotonic()
    server.write_hooks([hook("late")])
    assert served_within(server, "late", 200, started) < DEADLINE
