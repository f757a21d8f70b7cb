"""A hooks file of 10,000 hooks (issue 34), as JSON and as YAML: the installed command starts with it and
hot-reloads a one-line change, each well within a generous bound, and its memory stays within a generous
bound too.
scripts/big-hooks measures the figures side by side with webhook (docs/limits.md, "Large hooks files");
these tests only hold the shape, with room for a busy machine."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from integration_harness import free_port, implementation_argv, stop_process

HOOKS = 10_000
#: Generous: on an idle machine start and reload take well under 1 s here; main took 8-10 s to start.
BOUND = 5.0
#: The whole process tree's resident memory once the reload is served: the sum of its processes' RSS.
#: Raised from 150 when the master began to build the app before its forks (issue 32 deliverable 3): the
#: run owner and the worker now map the master's copy of Flask, gevent and OpenSSL, and the sum counts
#: those pages once per process. JSON, 2026-11-28, main 131.9 -> 154.2-154.5 MiB (this test's least
#: reading, two runs each), while the tree's unique memory (scripts/footprint's) went 106.7 -> 104.7.
MEMORY_BOUND_MIB = 175


def hook(index: int, hook_id: str | None = None) -> dict[str, object]:
    return {
        "id": hook_id or f"deploy-{index:05d}",
        "execute-command": "/bin/true",
        "response-message": f"deploying {index}",
        "pass-arguments-to-command": [{"source": "payload", "name": "ref"}],
        "trigger-rule": {
            "match": {
                "type": "value",
                "value": f"refs/heads/b{index}",
                "parameter": {"source": "payload", "name": "ref"},
            }
        },
    }


def hooks_text(last_id: str | None = None, kind: str = "json") -> str:
    hooks = [hook(index) for index in range(HOOKS)]
    hooks[-1] = hook(HOOKS - 1, last_id)
    if kind == "yaml":
        return str(yaml.safe_dump(hooks, sort_keys=False, width=1000))
    return "[\n" + ",\n".join(json.dumps(item) for item in hooks) + "\n]\n"


def answer(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def seconds_until(check: str, proc: subprocess.Popen[bytes], since: float, status: int = 200) -> float:
    """Poll `check` until it answers `status`; the seconds since `since`, or a failure after 60 s."""
    while time.monotonic() - since < 60:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        if answer(check)[0] == status:
            return time.monotonic() - since
        time.sleep(0.01)
    pytest.fail(f"{check} did not answer {status} within 60 s")


def tree_rss_mib(root: int) -> float:
    """The RSS of a process and its descendants; one that ends meanwhile (a hook's command) counts 0."""
    pids, todo, rss = [], [root], 0
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [
                    int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
        except OSError:
            continue
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        rss += sum(int(line.split()[1]) for line in lines if line.startswith("Rss:"))
    return rss / 1024


class BigServer:
    def __init__(self, impl: str, folder: Path, kind: str = "json") -> None:
        self.path = folder / f"hooks-{impl}.{kind}"
        self.path.write_text(hooks_text(kind=kind))
        port = free_port()
        self.base = f"http://127.0.0.1:{port}/hooks/"
        argv = [
            *implementation_argv(impl),
            "-hooks",
            str(self.path),
            "-ip",
            "127.0.0.1",
            "-port",
            str(port),
            "-hotreload",
        ]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )


@pytest.fixture
def servers() -> Iterator[list[BigServer]]:
    started: list[BigServer] = []
    yield started
    for server in started:
        stop_process(server.proc, grace=30)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["json", "yaml"])
def test_ten_thousand_hooks_start_and_hot_reload(tmp_path: Path, servers: list[BigServer], kind: str) -> None:
    server = BigServer("hookrunner", tmp_path, kind)
    servers.append(server)
    start = seconds_until(server.base + f"deploy-{HOOKS - 1:05d}", server.proc, server.started)
    assert start < BOUND
    # Each hook is served with its own rule: one from the middle runs, a neighbour's ref does not match.
    push = json.dumps({"ref": "refs/heads/b5000"}).encode()
    assert answer(server.base + "deploy-05000", push) == (200, b"deploying 5000")
    assert answer(server.base + "deploy-05001", push) == (200, b"Hook rules were not satisfied.")
    time.sleep(0.5)  # the watcher is set up before serving; let a slow machine's first events pass
    text = hooks_text(last_id="fresh", kind=kind)  # made first: dumping 10,000 hooks as YAML takes seconds
    written = time.monotonic()
    with open(server.path, "w") as handle:  # in place, one line changed: the last hook's id
        handle.write(text)
    reload = seconds_until(server.base + "fresh", server.proc, written)
    assert reload < BOUND
    assert answer(server.base + f"deploy-{HOOKS - 1:05d}")[0] == 404
    assert answer(server.base + "deploy-05000", push) == (200, b"deploying 5000")
    # Generous too: ~80 MiB here after the reload, against webhook's 34-117 MiB; main held 345-462 MiB (JSON),
    # and a YAML file 248 MiB while libyaml's node tree was composed whole.
    # The least of five readings 0.2 s apart: one reading right after the push was now and then 175-191 MiB
    # where a second one moments later was 126-139, a transient (most likely the push's /bin/true, forked
    # from the run owner, which holds the 10,000 hooks too, mapping all of its memory until its exec; not
    # proven). Memory the server keeps is in every reading.
    readings = []
    for _ in range(5):
        readings.append(tree_rss_mib(server.proc.pid))
        time.sleep(0.2)
    assert min(readings) < MEMORY_BOUND_MIB, readings
