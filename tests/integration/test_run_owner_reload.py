"""Issue 32's hot reload with several workers (docs/run-state.md, landing plan step 9) in the installed
`hookrunner`: the run owner reads the hooks files once and every worker serves the new hooks before the
reload is logged, or catches up before its next request, a worker stopped meanwhile included; a broken
file keeps the old hooks in every worker, logged once; the reload metrics are the host's. Each push's
worker is read from the kernel (test_run_owner_guarantees.py's `push`). scripts/test runs these on both
worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import http.client
import os
import signal
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_observability import samples
from test_run_owner import greeted_with, only
from test_run_owner_guarantees import holder
from test_serving import Server, wait_until

#: Enough hooks that a worker's read of the file takes a while (tens to hundreds of milliseconds): a
#: worker that reloads on its own still serves the old hooks well after another has logged the reload.
FILLER = [{"id": f"filler-{n}", "execute-command": "/bin/true"} for n in range(3000)]


def hooks(kept_answer: str, *, added: bool) -> list[dict[str, object]]:
    """`kept`, answering `kept_answer`, then the filler, then (with `added`) the hook the reload adds."""
    kept = {"id": "kept", "execute-command": "/bin/true", "response-message": kept_answer}
    fresh = [{"id": "added", "execute-command": "/bin/true", "response-message": "added"}] if added else []
    return [kept, *FILLER, *fresh]


OLD = hooks("old", added=False)
NEW = hooks("new", added=True)
#: What each path answers under the old hooks and under the new ones.
PATHS = ("/hooks/kept", "/hooks/added")
OLD_ANSWERS = {"/hooks/kept": (200, b"old"), "/hooks/added": (404, b"Hook not found.")}
NEW_ANSWERS = {"/hooks/kept": (200, b"new"), "/hooks/added": (200, b"added")}
#: The reload's last line: once it is logged, no worker may serve the old hooks.
RELOADED = "\tloaded: added"


def answered(server: Server, path: str) -> tuple[int, str, int, bytes]:
    """POST `path` on a new connection at once, then find the worker that answered it while the connection
    is still open (kept alive): (worker, path, status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.request("POST", path)
        answer = conn.getresponse()
        status, body = answer.status, answer.read()
        assert conn.sock is not None
        client_port = int(conn.sock.getsockname()[1])
        found: list[int] = []

        def held() -> bool:
            worker = holder(server, client_port)
            if worker is not None:
                found.append(worker)
            return bool(found)

        assert wait_until(held, timeout=5, interval=0.01), f"no worker holds port {client_port}"
        return found[0], path, status, body
    finally:
        conn.close()


def spread(server: Server, count: int) -> list[tuple[int, str, int, bytes]]:
    """`count` pushes over new connections, 16 at a time: (worker, path, status, body) each."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda n: answered(server, PATHS[n % 2]), range(count)))


def wrong(answers: list[tuple[int, str, int, bytes]], expected: dict[str, tuple[int, bytes]]) -> list[object]:
    return [answer for answer in answers if (answer[2], answer[3]) != expected[answer[1]]]


@pytest.mark.parametrize("trigger", ["SIGHUP", "SIGUSR1", "hotreload"])
def test_after_the_reload_is_logged_every_worker_serves_only_the_new_hooks(
    tmp_path: Path, servers: list[Server], trigger: str
) -> None:
    """-workers 3, a reload that adds a hook and changes another's answer: right after its last line is
    logged, 200 pushes spread over the three workers all get the new hooks (each worker reloading on its
    own, 14-16 of 200 got 404 with two workers), and the reload is logged once, not once per worker."""
    flags = ["-hotreload"] if trigger == "hotreload" else []
    server, workers = greeted_with(tmp_path, servers, OLD, 3, *flags)
    assert wrong(spread(server, 12), OLD_ANSWERS) == []
    server.write_hooks(NEW)
    if trigger != "hotreload":
        server.signal(getattr(signal, trigger))
    assert wait_until(lambda: RELOADED in server.log, timeout=20, interval=0.005), server.log
    answers = spread(server, 200)
    assert wrong(answers, NEW_ANSWERS) == []
    assert set(Counter(worker for worker, *_ in answers)) == set(workers)  # every worker answered some
    log = server.log
    assert log.count(f"attempting to reload hooks from {server.hooks_path}") == 1, log
    assert log.count(RELOADED) == 1
    assert server.stop() == 0


def test_a_worker_stopped_during_the_reload_serves_the_new_hooks_from_its_first_request(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A worker SIGSTOPped before the reload and resumed after its line is logged: the request it reads
    first (sent on its kept-alive connection while it was stopped) gets the new hooks. The owner logs the
    reload once the other workers serve it and the stopped one has had a second."""
    server, workers = greeted_with(tmp_path, servers, OLD, 3)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.connect()
        assert conn.sock is not None
        client_port = int(conn.sock.getsockname()[1])
        conn.request("POST", "/hooks/kept")
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"old")
        stopped = holder(server, client_port)
        assert stopped in workers
        os.kill(stopped, signal.SIGSTOP)
        try:
            server.write_hooks(NEW)
            server.signal(signal.SIGHUP)
            assert wait_until(lambda: RELOADED in server.log, timeout=20, interval=0.005), server.log
            conn.request("POST", "/hooks/added")  # waits in the stopped worker's socket
        finally:
            os.kill(stopped, signal.SIGCONT)
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"added")
        conn.request("POST", "/hooks/kept")
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"new")
    finally:
        conn.close()
    answers = spread(server, 60)
    assert wrong(answers, NEW_ANSWERS) == []
    assert server.log.count(RELOADED) == 1
    # The owner did not wait for the stopped worker: it logged the reload after a second without it.
    assert f"worker(s) {stopped} not serving hooks generation 1" in server.log
    assert server.stop() == 0


def test_a_broken_file_keeps_the_old_hooks_in_every_worker_and_the_reloads_are_the_hosts(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A broken hooks file during a -workers 3 reload: every worker keeps the old hooks, the failure is
    logged once; then a good reload. Scraped through each worker alone (the other two stopped), the reload
    counters equal the reloads done (1 failure, 1 success) and the hooks loaded are the host's."""
    server, workers = greeted_with(tmp_path, servers, OLD, 3, "-metrics")
    server.write_hooks("[{ this is not a hooks file")
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: "couldn't load hooks from file!" in server.log, timeout=20), server.log
    answers = spread(server, 60)
    assert wrong(answers, OLD_ANSWERS) == []
    assert set(Counter(worker for worker, *_ in answers)) == set(workers)
    assert server.log.count("couldn't load hooks from file!") == 1, server.log
    server.write_hooks(NEW)
    server.signal(signal.SIGUSR1)
    assert wait_until(lambda: RELOADED in server.log, timeout=20), server.log
    assert wrong(spread(server, 30), NEW_ANSWERS) == []
    for scraper in workers:
        with only(workers, scraper):
            got = samples(server)
        reloads = {k[1][0][1]: v for k, v in got.items() if k[0] == "hookrunner_reloads_total"}
        assert reloads == {"success": 1, "failure": 1}, (scraper, reloads)
        assert got[("hookrunner_hooks_loaded", ())] == len(NEW), scraper
    assert server.stop() == 0
