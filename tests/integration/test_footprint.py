"""The installed command's footprint at rest (issues 23 and 32): each optional library is loaded only with the
flag or the hooks that use it, the master builds the app before it forks the run owner and the worker
(which share its pages), the tree's unique memory meets issue 32's target, its RSS sum stays under a
generous bound, and the worker comes back near its rest after a load. scripts/footprint gives the
figures; the unique memory is measured here with its own code.

Which modules load is read from Python's own import log (PYTHONPROFILEIMPORTTIME, one line per module on
stderr, from every process of the tree), so the real command is measured, not a model of it.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import shlex
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest
import trustme
from command_under_test import HOOKRUNNER_BIN
from integration_harness import HOOKRUNNER_TEST_FLAGS
from test_serving import run_owner_pids, worker_pids

PLAIN_HOOK = """
- id: plain
  execute-command: /bin/true
  response-message: started
  trigger-rule:
    match: {type: value, value: push, parameter: {source: header, name: X-Event}}
"""

REGEX_HOOK = """
- id: pattern
  execute-command: /bin/true
  response-message: matched
  trigger-rule:
    match: {type: regex, regex: "^refs/heads/(main|release)$", parameter: {source: url, name: ref}}
"""

#: Modules that only a flag or a kind of hook may bring; with none of them, none may be loaded.
OPTIONAL = {
    "watchdog": "-hotreload",
    "hookrunner.ops.watcher": "-hotreload",
    "prometheus_client": "-metrics",
    "re2": "a regex rule",
    "hookrunner.hooks.template": "-template",
    "sqlite3": "-state-dir",
    "hookrunner.serve.admin": "-admin-addr",
    "hookrunner.state.historystore": "-admin-addr",
    "multiprocessing.connection": "-admin-addr",
    # The PostgreSQL run state (state/opener.py imports it for a postgresql:// URL only); the installed
    # artefact carries psycopg, so its absence here is the code's doing, not the install's.
    "psycopg": "a postgresql:// run state",
    "hookrunner.state.postgres": "a postgresql:// run state",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Running:
    """The installed hookrunner, started with its import log on, answering on a loopback port."""

    def __init__(self, tmp_path: Path, hooks: str, *flags: str, ca: trustme.CA | None = None) -> None:
        self.scheme, self.context = "http", None
        if ca is not None:
            self.scheme, self.context = "https", ssl.create_default_context()
            ca.configure_trust(self.context)
        self.hooks = tmp_path / "hooks.yaml"
        self.hooks.write_text(hooks)
        self.stderr = tmp_path / "stderr.log"
        self.port = free_port()
        env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
        argv = [
            HOOKRUNNER_BIN,
            "-hooks",
            str(self.hooks),
            "-ip",
            "127.0.0.1",
            "-port",
            str(self.port),
            *flags,
        ]
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True
            )
        deadline = time.monotonic() + 30
        while self.get("/")[0] != 200:
            assert self.proc.poll() is None, self.stderr.read_text()
            assert time.monotonic() < deadline, "no 200 on / within 30 s"
            time.sleep(0.02)

    def get(
        self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        url = f"{self.scheme}://127.0.0.1:{self.port}{path}"
        request = urllib.request.Request(url, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=5, context=self.context) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError:
            return 0, ""

    def imported(self) -> set[str]:
        """Every module any process of the tree has imported so far."""
        names = set()
        for line in self.stderr.read_text(errors="replace").splitlines():
            if line.startswith("import time:") and "|" in line:
                names.add(line.rsplit("|", 1)[1].strip())
        return names

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def workers(self) -> list[int]:
        return worker_pids(self.proc.pid)

    def owner(self) -> int:
        (owner,) = run_owner_pids(self.proc.pid)
        return owner

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for server in started:
        server.stop()


def start(
    tmp_path: Path, running: list[Running], hooks: str, *flags: str, ca: trustme.CA | None = None
) -> Running:
    server = Running(tmp_path, hooks, *flags, ca=ca)
    running.append(server)
    return server


def test_default_flags_load_no_optional_library(tmp_path: Path, running: list[Running]) -> None:
    server = start(tmp_path, running, PLAIN_HOOK)
    assert server.get("/hooks/plain", b"{}", {"X-Event": "push", "Content-Type": "application/json"}) == (
        200,
        "started",
    )
    imported = server.imported()
    # The log does list what the worker loads (so an absence below means something).
    assert {"flask", "gevent", "hookrunner.serve.app", "hookrunner.run.executor"} <= imported
    loaded = {name: flag for name, flag in OPTIONAL.items() if name in imported}
    assert loaded == {}
    # gunicorn's imports of importlib.metadata and html stay deferred (cli.defer_worker_modules), and
    # nothing at rest uses them. (A bare `pytest` runs the editable dev install, whose own import finder
    # loads importlib.metadata at start-up; the installed wheel, which scripts/test runs, has no finder.)
    if not any(name.startswith("__editable__") for name in imported):
        assert "importlib.metadata._meta" not in imported
    assert "html.entities" not in imported


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
def test_the_worker_loads_no_development_server(
    tmp_path: Path, running: list[Running], worker_class: str
) -> None:
    # werkzeug imports werkzeug.serving as it is imported, and Flask reads two names of it; the worker
    # gets a stand-in module (serve/devserver.py) that loads the real one only if anything else is read.
    server = start(tmp_path, running, PLAIN_HOOK, "-worker-class", worker_class)
    push = {"X-Event": "push", "Content-Type": "application/json"}
    assert server.get("/hooks/plain", b"{}", push) == (200, "started")
    assert server.get("/hooks/plain", b"{}", {"X-Event": "pull"}) == (200, "Hook rules were not satisfied.")
    assert server.get("/hooks/none", b"{}", push) == (404, "Hook not found.")
    imported = server.imported()
    assert {"flask", "werkzeug", "werkzeug.serving"} <= imported  # the stand-in, as the log names it
    # What the real module imports and nothing else of the tree does at rest (with -metrics,
    # prometheus-client imports it too): its HTTP server.
    assert "http.server" not in imported
    # The admin listener's connections subclass its request handler: there the log does show it.
    (tmp_path / "admin").mkdir()
    admin = start(
        tmp_path / "admin",
        running,
        PLAIN_HOOK,
        "-worker-class",
        worker_class,
        "-admin-addr",
        f"127.0.0.1:{free_port()}",
    )
    assert "http.server" in admin.imported()


def test_the_version_is_the_installed_one(tmp_path: Path) -> None:
    python = Path(HOOKRUNNER_BIN).parent / "python"
    metadata = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('hookrunner'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    done = subprocess.run(
        [HOOKRUNNER_BIN, "-version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith(f"hookrunner version {metadata} ")


def test_the_version_loads_no_optional_library() -> None:
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run(
        [HOOKRUNNER_BIN, "-version"], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "hookrunner.cli" in imported  # the log lists the command's own imports
    assert {name: flag for name, flag in OPTIONAL.items() if name in imported} == {}


@pytest.mark.parametrize(
    ("hooks", "flags", "expected"),
    [
        (PLAIN_HOOK, ["-hotreload"], {"watchdog", "hookrunner.ops.watcher"}),
        (PLAIN_HOOK, ["-metrics"], {"prometheus_client"}),
        (REGEX_HOOK, [], {"re2"}),
        (PLAIN_HOOK, ["-template"], {"hookrunner.hooks.template"}),
        (PLAIN_HOOK, ["-state-dir", "{tmp}/state"], {"sqlite3"}),
        (
            PLAIN_HOOK,
            ["-admin-addr", "127.0.0.1:{port}"],
            # the run history is kept in SQLite (in memory without -state-dir)
            {
                "hookrunner.serve.admin",
                "hookrunner.state.historystore",
                "multiprocessing.connection",
                "sqlite3",
            },
        ),
    ],
    ids=["hotreload", "metrics", "regex", "template", "state-dir", "admin-addr"],
)
def test_each_optional_library_loads_with_its_flag_only(
    tmp_path: Path, running: list[Running], hooks: str, flags: list[str], expected: set[str]
) -> None:
    flags = [flag.format(tmp=tmp_path, port=free_port()) for flag in flags]
    server = start(tmp_path, running, hooks, *flags)
    # The worker, forked from the master that built the app, may answer before the run owner has set up
    # (its watcher, its journal): what the owner imports is waited for.
    deadline = time.monotonic() + 10
    while not expected <= (imported := server.imported()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert expected <= imported
    others = {name for name in OPTIONAL if name in imported} - expected
    assert others == set()


def test_a_regex_brought_by_a_reload_loads_re2_in_the_worker(tmp_path: Path, running: list[Running]) -> None:
    server = start(tmp_path, running, PLAIN_HOOK, "-hotreload")
    assert "re2" not in server.imported()
    server.hooks.write_text(PLAIN_HOOK + REGEX_HOOK)
    deadline = time.monotonic() + 10
    while server.get("/hooks/pattern?ref=refs/heads/main", b"")[0] == 404:
        assert time.monotonic() < deadline, "the reloaded hook was not served within 10 s"
        time.sleep(0.05)
    assert server.get("/hooks/pattern?ref=refs/heads/main", b"") == (200, "matched")
    assert server.get("/hooks/pattern?ref=refs/heads/feature", b"") == (200, "Hook rules were not satisfied.")
    assert "re2" in server.imported()


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


#: C extensions and libraries of the worker's code: gevent's greenlets, Jinja's markupsafe (through Flask)
#: and OpenSSL (through hashlib, which Flask's modules import).
WORKER_LIBRARIES = ("greenlet", "markupsafe", "libssl.so", "libcrypto.so", "/_hashlib.")


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
def test_the_master_builds_the_app_before_forking_the_owner_and_the_worker(
    tmp_path: Path, running: list[Running], worker_class: str
) -> None:
    # Until issue 32's deliverable 3 the worker built the app after its fork, so that the master held
    # none of it and a per-process RSS sum counted it once. Issue 32 reads the tree's memory as its
    # unique resident memory (what a memory cgroup charges), and there the opposite pays: built once in
    # the master before the run owner's fork and the worker's, Flask, gevent and OpenSSL are one copy
    # for the three (docs/performance.md, memory at rest). The owner is forked after the build, so it
    # holds no copy of its own either.
    server = start(tmp_path, running, PLAIN_HOOK, "-worker-class", worker_class)
    (worker,) = server.workers()
    # (gevent is the run owner's loop whatever the workers' class, so the threaded worker maps it too.)
    for pid in (server.proc.pid, server.owner(), worker):
        maps = _mapped(pid)
        for library in WORKER_LIBRARIES:
            assert library in maps, (pid, library)


def test_with_secure_the_master_loads_openssl_for_its_context(tmp_path: Path, running: list[Running]) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    flags = ["-secure", "-cert", str(tmp_path / "cert.pem"), "-key", str(tmp_path / "key.pem")]
    server = start(tmp_path, running, PLAIN_HOOK, *flags, ca=ca)
    assert server.get("/hooks/plain", b"{}", {"X-Event": "push", "Content-Type": "application/json"}) == (
        200,
        "started",
    )
    master = _mapped(server.proc.pid)
    assert "libssl.so" in master and "/_ssl." in master


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            return int(line.split()[1])
    raise AssertionError(f"no Rss in /proc/{pid}/smaps_rollup")


def test_the_trees_rss_sum_at_rest_stays_under_a_generous_bound(
    tmp_path: Path, running: list[Running]
) -> None:
    # A regression guard, not the target (the target is the unique memory, below). The per-process RSS
    # sum counts each page the master shares with the run owner and the worker once per process, so the
    # app built in the master (issue 32 deliverable 3) raised it: scripts/footprint, medians of 3 and 5
    # starts, 2026-11-28, 83.8 -> 109.0-110.1 MiB (master 41.9, run owner 33.4, worker 33.7) with the
    # default worker, 76.9 -> 99.8-102.0 with gthread, while the unique memory fell 59.4 -> 53.2-53.4 and
    # 54.4 -> 49.2-50.0. The
    # bound was 90 (84.1 plus a 6 MiB margin for machines whose libraries differ); it is now 110.1 plus
    # the same margin. By this sum issue 32's 60 MB is not met (docs/performance.md).
    server = start(tmp_path, running, Path(__file__).parents[2].joinpath("etc/hooks.yaml").read_text())
    time.sleep(0.5)
    pids = [server.proc.pid, *server.children()]
    total = sum(_rss_kib(pid) for pid in pids) / 1024
    assert len(pids) == 3  # the master, the run owner and the worker
    assert total < 116, f"{total:.1f} MiB over {len(pids)} processes"


def _footprint() -> Any:
    """scripts/footprint as a module: the unique memory is measured here with its code."""
    path = Path(__file__).parents[2] / "scripts" / "footprint"
    loader = SourceFileLoader("footprint", str(path))
    spec = importlib.util.spec_from_loader("footprint", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


#: Issue 32, deliverable 3, read as the tree's unique resident memory (each physical page once, what a
#: memory cgroup charges; docs/operations.md): 60 MB with one worker, 40 MB for each extra one, in MiB.
ONE_WORKER_MIB = 60e6 / (1 << 20)
EXTRA_WORKER_MIB = 40e6 / (1 << 20)


def test_the_trees_unique_memory_meets_issue_32s_target(tmp_path: Path) -> None:
    # As scripts/footprint measures "at rest": the hooks it uses, a fresh start that no request has
    # reached, every process's RSS unchanged for 0.5 s, then the union of the page frames that the tree's
    # processes map (/proc/<pid>/pagemap). Measured with the design of issue 32 deliverable 3,
    # 2026-11-28: 53.2-53.4 MiB with one gevent worker, 49.2-50.0 with gthread; +5.3 and +5.1 MiB for a
    # second and a third worker (before: 59.4 and 54.4; +1.1 and +5.6). This fails on the build before.
    footprint = _footprint()
    hooks = tmp_path / "hooks.yaml"
    hooks.write_text(Path(__file__).parents[2].joinpath("etc/hooks.yaml").read_text() + footprint.LOAD_HOOK)
    tree: dict[int, float] = {}
    for workers in (1, 2, 3):
        command = shlex.join([HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS, "-workers", str(workers)])
        server = footprint.Server(f"workers={workers}", command, hooks)
        server.start()
        try:
            server.wait_listening()
            shot = footprint.settled(server.proc.pid)
        finally:
            server.stop()
        assert len(shot["processes"]) == 2 + workers, shot["processes"]  # the master, the run owner, workers
        if shot["unique_mib"] is None:
            pytest.fail(
                "the page frame numbers of /proc/<pid>/pagemap read as 0: the unique memory needs root "
                "(CI runs the tests as root); this test cannot measure it as this user"
            )
        tree[workers] = shot["unique_mib"]["total"]
    assert tree[1] <= ONE_WORKER_MIB, f"{tree[1]:.1f} MiB unique with one worker"
    extra = [tree[2] - tree[1], tree[3] - tree[2]]
    assert max(extra) <= EXTRA_WORKER_MIB, f"each extra worker: {extra} MiB; trees {tree}"


LOAD_HOOK = """
- id: load
  execute-command: /bin/true
  response-message: started
"""


def _settled_rss_kib(pid: int, quiet: float = 0.5, limit: float = 15.0) -> int:
    """The RSS of `pid` once it has not changed for `quiet` seconds (scripts/footprint's rest)."""
    deadline = time.monotonic() + limit
    last, since = _rss_kib(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _rss_kib(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def _push(port: int, count: int, answers: list[tuple[int, bytes]]) -> None:
    """`count` background pushes on one kept-alive connection, as a webhook sender (or hey) makes them."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(count):
            connection.request("POST", "/hooks/load", b"{}", {"Content-Type": "application/json"})
            response = connection.getresponse()
            answers.append((response.status, response.read()))
    finally:
        connection.close()


#: issue 23's target: the worker back within 10 MB of its rest after a load (scripts/footprint: 2 s after
#: `hey -n 4000 -c 16`). Measured 2 s after this load: 2.3-2.4 MiB over rest; 23 before issue 23's fixes.
AFTER_LOAD_MIB = 10


@pytest.mark.skipif(
    "gthread" in HOOKRUNNER_TEST_FLAGS,
    reason="the gevent worker's target: the threaded worker answers a push before its run starts, and keeps "
    "a command thread per run for 10 s after it; 2 s after this load it was 5-6 MiB over rest in some "
    "runs and 108 in another, with a backlog of runs (docs/performance.md)",
)
def test_the_worker_comes_back_near_its_rest_after_a_load(tmp_path: Path, running: list[Running]) -> None:
    server = start(tmp_path, running, LOAD_HOOK, *HOOKRUNNER_TEST_FLAGS)
    (worker,) = server.workers()
    rest = _settled_rss_kib(worker)
    answers: list[tuple[int, bytes]] = []
    clients = [threading.Thread(target=_push, args=(server.port, 250, answers)) for _ in range(16)]
    for client in clients:
        client.start()
    peak = rest
    while any(client.is_alive() for client in clients):
        peak = max(peak, _rss_kib(worker))
        time.sleep(0.1)
    assert answers == [(200, b"started")] * 4000
    deadline = time.monotonic() + 5
    while (_rss_kib(worker) - rest) / 1024 > AFTER_LOAD_MIB and time.monotonic() < deadline:
        time.sleep(0.2)
    over = (_rss_kib(worker) - rest) / 1024
    assert over <= AFTER_LOAD_MIB, (
        f"{over:.1f} MiB over rest ({rest / 1024:.1f}), peak {(peak - rest) / 1024:+.1f}"
    )
