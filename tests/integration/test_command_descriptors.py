"""The descriptors a command gets from the real installed hookrunner: stdin on /dev/null, stdout and stderr on
one pipe, and nothing else of any of its processes, whatever the flags open there (a second worker, the
journal, the admin listener, TLS, the hooks watcher's inotify, PostgreSQL's connections), with and without
a working directory. scripts/test runs it on both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import http.client
import re
import ssl
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from integration_harness import free_port
from pg_cluster import Cluster
from replica_support import REPLICA_VARIABLE, state_url
from test_serving import Server, tls_files, wait_until

#: `ls -l`'s line for a descriptor: its number and where it points.
FD_LINE = re.compile(r" (\d+) -> (.*)$")


def listing_hooks(folder: Path) -> list[dict[str, object]]:
    """Two hooks that answer with the descriptors their command holds: one in hookrunner's own folder, one
    with a command-working-directory."""
    hook: dict[str, object] = {
        "execute-command": "/bin/ls",
        "pass-arguments-to-command": [
            {"source": "string", "name": "-l"},
            {"source": "string", "name": "/proc/self/fd/"},
        ],
        "include-command-output-in-response": True,
    }
    return [{"id": "fds", **hook}, {"id": "fds-in-folder", "command-working-directory": str(folder), **hook}]


def descriptors(listing: bytes) -> dict[int, str]:
    found = {}
    for line in listing.decode().splitlines():
        match = FD_LINE.search(line)
        if match:
            found[int(match.group(1))] = match.group(2)
    return found


def assert_only_the_three(listing: bytes) -> None:
    fds = descriptors(listing)
    # ls's own descriptor of the folder it lists is the one more it may hold.
    own = {fd for fd, target in fds.items() if fd > 2 and re.fullmatch(r"/proc/\d+/fd", target)}
    assert len(own) <= 1 and set(fds) - own == {0, 1, 2}, listing.decode()
    assert fds[0] == "/dev/null", fds
    assert fds[1] == fds[2] and fds[1].startswith("pipe:["), fds


def check(server: Server, connect: Callable[[], http.client.HTTPConnection] | None = None) -> None:
    server.ready(connect)
    answers: list[tuple[int, bytes]] = []

    def answered(hook: str) -> bool:  # a 503 until the run owner has its workers (and its database)
        status, _, body = server.request("POST", f"/hooks/{hook}", conn=connect() if connect else None)
        answers.append((status, body))
        return status != 503

    for hook in ("fds", "fds-in-folder"):
        assert wait_until(partial(answered, hook), timeout=20), server.log
        assert answers[-1][0] == 200, (answers[-1], server.log)
        assert_only_the_three(answers[-1][1])


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["-workers", "2"],
        ["-hotreload"],
        ["-state-dir", "{tmp}/state"],
        ["-admin-addr", "127.0.0.1:{admin}"],
    ],
    ids=["default", "two-workers", "hotreload", "state-dir", "admin-addr"],
)
def test_a_command_holds_only_stdin_stdout_and_stderr(
    tmp_path: Path, servers: list[Server], flags: list[str]
) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    values = {"tmp": str(tmp_path), "admin": str(free_port())}
    server = Server(tmp_path, listing_hooks(folder), *(flag.format(**values) for flag in flags))
    servers.append(server)
    check(server)


def test_a_command_holds_only_the_three_with_tls(tmp_path: Path, servers: list[Server]) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    ca, flags = tls_files(tmp_path)
    server = Server(tmp_path, listing_hooks(folder), *flags, "-workers", "2")
    servers.append(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)

    def connect() -> http.client.HTTPConnection:
        return http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10)

    check(server, connect)


def test_a_command_holds_only_the_three_with_a_state_url(
    tmp_path: Path,
    servers: list[Server],
    pg_cluster: Cluster,
    pg_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.setenv(REPLICA_VARIABLE, "r1")
    url = state_url(pg_cluster, pg_database)
    server = Server(
        tmp_path, listing_hooks(folder), "-state-url", url, "-state-replica", "r1", "-workers", "2"
    )
    servers.append(server)
    check(server)
