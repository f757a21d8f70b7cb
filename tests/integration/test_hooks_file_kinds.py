"""Hooks paths that are not regular files (issue 22): a symlink to /dev/zero, a FIFO, a unix socket, a
directory, a file over the 16 MiB cap. None is read: at start-up each is a hooks file that failed to load
(as webhook treats a directory or a socket; webhook blocks on a FIFO and reads /dev/zero without end),
and at reload each gets one log line, the loaded hooks stay, and a regular file is picked up again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from integration_harness import reference_available
from test_serving import Server, wait_until

from hookrunner.ops.regularfile import HOOKS_FILE_CAP

KINDS = ["dev-zero", "fifo", "socket", "directory", "over-cap"]
#: What the log says of each, after `couldn't load hooks from file! `.
REASONS = {
    "dev-zero": "read {path}: not a regular file (a character device); only regular files are read",
    "fifo": "read {path}: not a regular file (a named pipe); only regular files are read",
    "socket": "open {path}: no such device or address",
    "directory": "read {path}: is a directory",
    "over-cap": "read {path}: file is larger than the 16 MiB hooks-file cap",
}


def make(kind: str, path: Path, keep: list[socket.socket]) -> None:
    if kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        keep.append(sock)
    elif kind == "directory":
        path.mkdir()
    else:
        with open(path, "wb") as handle:
            handle.truncate(HOOKS_FILE_CAP + 1)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    keep: list[socket.socket] = []
    yield keep
    for sock in keep:
        sock.close()


def start_with(tmp_path: Path, kind: str, keep: list[socket.socket], *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "hooks.json"
    make(kind, path, keep)
    return subprocess.run(
        [HOOKRUNNER_BIN, "-hooks", str(path), "-port", "0", *flags],
        capture_output=True, text=True, timeout=20,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_at_start_up_it_is_a_file_that_failed_to_load(
    tmp_path: Path, kind: str, sockets: list[socket.socket], servers: list[Server]
) -> None:
    # Without -verbose: the start-up error exit webhook gives a directory or a socket, at once.
    done = start_with(tmp_path, kind, sockets)
    assert done.returncode == 1, done
    assert "couldn't load any hooks from file!" in done.stdout
    # With -verbose it serves, having said why the file was not read.
    path = tmp_path / "hooks.json"
    server = Server(tmp_path, None, hooks_name="hooks.json")
    servers.append(server)
    server.ready()
    reason = REASONS[kind].format(path=path)
    assert f"couldn't load hooks from file! {reason}" in server.log


@pytest.mark.reference
@pytest.mark.parametrize("kind", ["socket", "directory"])
def test_start_up_lines_are_webhooks_where_webhook_has_them(
    tmp_path: Path, kind: str, sockets: list[socket.socket]
) -> None:
    if not reference_available():
        pytest.skip("the reference webhook is not installed")
    ours = start_with(tmp_path, kind, sockets)
    reference = subprocess.run(
        ["webhook", "-hooks", str(tmp_path / "hooks.json"), "-port", "0"], capture_output=True, text=True, timeout=20
    )
    assert (ours.returncode, ours.stderr) == (reference.returncode, reference.stderr) == (1, "")

    def untimed(text: str) -> list[str]:
        lines = [line.split(" ", 3)[-1] if line.startswith("[webhook] ") else line for line in text.splitlines()]
        return [line for line in lines if line != "os signal watcher ready"]  # webhook's goroutine, racing exit

    assert untimed(ours.stdout) == untimed(reference.stdout)


def swap_link(link: Path, target: Path) -> None:
    """Point `link` at `target` in one rename, as a ConfigMap update does."""
    temp = link.with_name(link.name + ".new")
    os.symlink(target, temp)
    os.replace(temp, link)


def steady(hook_id: str) -> str:
    return f'[{{"id": "{hook_id}", "execute-command": "/bin/true", "response-message": "{hook_id}"}}]'


@pytest.mark.parametrize("kind", KINDS)
def test_at_reload_the_loaded_hooks_stay_until_it_is_a_regular_file_again(
    tmp_path: Path, kind: str, sockets: list[socket.socket], servers: list[Server]
) -> None:
    first = tmp_path / "first.json"
    first.write_text(steady("first"))
    link = tmp_path / "hooks.json"
    os.symlink(first, link)
    server = Server(tmp_path, None, "-hotreload", hooks_name="hooks.json")
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/first")[0] == 200

    odd = tmp_path / f"odd-{kind}"
    make(kind, odd, sockets)
    swap_link(link, odd)
    reason = REASONS[kind].format(path=link)
    assert server.wait_for_log(f"couldn't load hooks from file! {reason}"), server.log
    assert server.request("POST", "/hooks/first")[0] == 200  # kept
    # SIGHUP reads it too: it neither blocks nor drops the hooks.
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: server.log.count(reason) == 2, timeout=5), server.log
    time.sleep(1.5)  # longer than the watcher's safety check: the line is not repeated
    assert server.log.count(reason) == 2, server.log
    assert server.request("POST", "/hooks/first")[0] == 200

    second = tmp_path / "second.json"
    second.write_text(steady("second"))
    swap_link(link, second)
    assert wait_until(lambda: server.request("POST", "/hooks/second")[0] == 200, timeout=5), server.log
    assert server.request("POST", "/hooks/first")[0] == 404
    rss_kib = int(next(line.split()[1] for line in Path(f"/proc/{server.worker_pid()}/status").read_text()
                      .splitlines() if line.startswith("VmRSS:")))
    assert rss_kib < 300 * 1024  # /dev/zero was never read into memory
