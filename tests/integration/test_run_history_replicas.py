"""Several replicas, one run history (issue 33): two installed `hookrunner` processes with -state-url on one
throwaway PostgreSQL (tests/pg_cluster.py) and each its -admin-addr. Runs recorded by either replica (pushed
to its hooks port, or recorded through PostgresState as a third replica would) show on both admin listeners,
each naming its replica, in the API, on the status page (Debian's Chromium) and to a follower of a running
run; a database that is away makes the API answer 503 in JSON while the listener serves its other requests,
and it recovers by itself."""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from integration_harness import free_port
from pg_cluster import Cluster
from replica_support import REPLICA_VARIABLE
from test_run_history import Admin, start, trigger
from test_run_history_browser import (
    HAVE_BROWSER,
    browser,
    no_selenium_manager,  # noqa: F401 - a fixture, used by name
    severe_console_messages,
    wait_for,
)
from test_run_history_follow import (
    close_followers,  # noqa: F401 - a fixture, used by name
    follow,
    gated,
)
from test_serving import Server, master_children, python_hook, run_owner_pids, wait_until

from hookrunner.run.history import Recorder
from hookrunner.state.model import RunSpec
from hookrunner.state.postgres import PostgresState

pytestmark = pytest.mark.usefixtures("close_followers")

GATE_LINES = (
    "import os, sys, time\n"
    "print('first line', flush=True)\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
    "print('last line')"
)


@pytest.fixture
def state_url(pg_cluster: Cluster) -> str:
    """A new database's postgresql:// URL (with the test role's password)."""
    name = re.search(r"dbname=(\S+)", pg_cluster.create_database())
    assert name is not None
    return pg_cluster.url(name.group(1))


@pytest.fixture
def third(state_url: str) -> Iterator[PostgresState]:
    """A third replica's run state on the same database, whose runs the test records by hand."""
    state = PostgresState(state_url, "replica-c")
    yield state
    state.close()


def replicas(
    tmp_path: Path, servers: list[Server], state_url: str, hooks: object
) -> list[tuple[Server, Admin]]:
    started = []
    for name in ("replica-a", "replica-b"):
        folder = tmp_path / name
        folder.mkdir()
        started.append(start(folder, servers, hooks, "-state-url", state_url, "-state-replica", name))
    return started


def runs_by_id(admin: Admin) -> dict[str, dict[str, object]]:
    return {run["id"]: run for run in admin.json("/api/v1/runs?limit=500")["runs"]}


def record_by_hand(state: PostgresState, rid: str, output: bytes, error: str | None) -> None:
    ticket = Recorder(state.record).ticket(rid, "ok", time.time())
    ticket.admitted("started")
    ticket.started(RunSpec("ok", rid, "/bin/true", ("/bin/true", rid), (), (), "/"))
    ticket.finished(output, error)


def test_runs_recorded_by_any_replica_show_on_every_admin_listener(
    tmp_path: Path, servers: list[Server], state_url: str, third: PostgresState, pg_cluster: Cluster
) -> None:
    (a, admin_a), (b, admin_b) = replicas(tmp_path, servers, state_url, [python_hook("ok", "print('hi')")])
    record_by_hand(third, "by-hand-1", b"from the third replica\n", None)
    record_by_hand(third, "by-hand-2", b"", "exit status 4")
    assert wait_until(lambda: {"by-hand-1", "by-hand-2"} <= set(runs_by_id(admin_b)), timeout=15)
    on_b = runs_by_id(admin_b)
    assert (on_b["by-hand-1"]["replica"], on_b["by-hand-1"]["outcome"]) == ("replica-c", "ok")
    assert (on_b["by-hand-2"]["replica"], on_b["by-hand-2"]["exit_code"]) == ("replica-c", 4)
    assert admin_a.json("/api/v1/runs?limit=500") == admin_b.json("/api/v1/runs?limit=500")  # same seqs too
    one = admin_a.json("/api/v1/runs/by-hand-1")
    assert (one["replica"], one["output"]) == ("replica-c", "from the third replica\n")
    # Each replica's workers report their hooks file (one each here: the same path would be one entry).
    hooks = admin_b.json("/api/v1/hooks")["hooks"]
    assert [(h["id"], h["file"]) for h in hooks] == [("ok", str(s.hooks_path)) for s in (a, b)]
    assert [h["last_run"]["id"] for h in hooks] == ["by-hand-2"] * 2
    status, headers, page = admin_b.get("/runs")
    assert status == 200 and b'<td class="replica">replica-c</td>' in page

    # The database away: the API answers 503 in JSON, at once, and the listener serves the rest meanwhile.
    with pg_cluster.crashed():
        started = time.monotonic()
        status, headers, body = admin_b.get("/api/v1/runs")
        assert status == 503 and headers["retry-after"].isdigit(), body
        assert "PostgreSQL is unavailable" in json.loads(body)["error"]
        assert admin_b.get("/")[0] == 503 and admin_b.get("/api/v1/runs/by-hand-1")[0] == 503
        assert admin_b.get("/static/admin.css")[0] == 200
        assert time.monotonic() - started < 10
    # Back by itself: each listener answers again once the database accepts connections (a read meanwhile,
    # while it recovers from the crash, may still be a 503).
    for admin in (admin_a, admin_b):
        assert wait_until(lambda admin=admin: admin.get("/api/v1/runs")[0] == 200, timeout=30)
    record_by_hand(third, "after", b"", None)
    assert wait_until(lambda: "after" in runs_by_id(admin_a), timeout=15)
    for server in (a, b):
        assert "Traceback" not in server.log
        assert server.log.count("run state: PostgreSQL is unavailable") <= 2, server.log  # once per change
        assert server.stop() == 0


def test_a_slow_database_holds_the_admin_listener_for_seconds_not_forever(
    tmp_path: Path, servers: list[Server], state_url: str, third: PostgresState
) -> None:
    # The admin listener's process is not gevent-patched: a pool of 8 threads answers, each read waits on
    # the database at most its statement timeout (5 s), and after a failure the next reads fail at once.
    (a, _), (b, admin_b) = replicas(tmp_path, servers, state_url, [python_hook("ok", "print('hi')")])
    record_by_hand(third, "before", b"", None)
    assert wait_until(lambda: "before" in runs_by_id(admin_b), timeout=15)
    answers: dict[str, tuple[int, float]] = {}

    def get(name: str, path: str) -> None:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", admin_b.port, timeout=60)
        try:
            conn.request("GET", path)
            answers[name] = (conn.getresponse().status, time.monotonic() - started)
        finally:
            conn.close()

    with psycopg.connect(state_url) as locker:
        locker.execute("LOCK TABLE hookrunner_history IN ACCESS EXCLUSIVE MODE")  # every read waits on it
        readers = [threading.Thread(target=get, args=(f"api-{n}", "/api/v1/runs")) for n in range(12)]
        for thread in readers:
            thread.start()
        time.sleep(0.5)
        get("static", "/static/admin.css")
        for thread in readers:
            thread.join(timeout=60)
    assert answers["static"][0] == 200 and answers["static"][1] < 15, answers
    assert {answers[f"api-{n}"][0] for n in range(12)} == {503}, answers
    assert max(answers[f"api-{n}"][1] for n in range(12)) < 15, answers
    assert wait_until(lambda: admin_b.get("/api/v1/runs")[0] == 200, timeout=15)
    assert "Traceback" not in b.log
    for server in (a, b):
        assert server.stop() == 0


def test_a_follower_on_one_replica_follows_a_run_recorded_by_another(
    tmp_path: Path, servers: list[Server], state_url: str, third: PostgresState
) -> None:
    (_, admin_a), (_, admin_b) = replicas(tmp_path, servers, state_url, [python_hook("ok", "print('hi')")])
    recorder = Recorder(third.record)
    ticket = recorder.ticket("live-1", "ok", time.time())
    ticket.started(RunSpec("ok", "live-1", "/bin/true", ("/bin/true",), (), (), "/"))
    ticket.output(b"first line\n")
    recorder.batcher.flush()
    assert wait_until(lambda: runs_by_id(admin_b).get("live-1", {}).get("output_size") == 11, timeout=15)
    follower = follow(admin_b.port, "live-1")
    assert wait_until(lambda: follower.output() == b"first line\n", timeout=15), follower.received
    ticket.output(b"second line\n")
    recorder.batcher.flush()
    assert wait_until(lambda: follower.output() == b"first line\nsecond line\n", timeout=15), (
        follower.received
    )
    ticket.finished(b"first line\nsecond line\nlast\n", None)
    assert follower.closed.wait(15), follower.received
    events = follower.events()
    assert follower.output() == b"first line\nsecond line\nlast\n"
    assert events[-1][0] == "end" and (events[-1][1]["outcome"], events[-1][1]["replica"]) == (
        "ok",
        "replica-c",
    )
    assert admin_a.json("/api/v1/runs/live-1")["outcome"] == "ok"


def test_a_push_to_one_replica_shows_on_the_others_api(
    tmp_path: Path, servers: list[Server], state_url: str
) -> None:
    gate = tmp_path / "gate"
    hooks = [python_hook("ok", "print('hi')"), gated("lines", GATE_LINES, gate)]
    (a, admin_a), (b, admin_b) = replicas(tmp_path, servers, state_url, hooks)
    assert trigger(a, "ok", "push-a") == 200
    assert trigger(b, "ok", "push-b") == 200
    assert trigger(a, "lines", "running-a") == 200

    def shown() -> bool:
        runs = runs_by_id(admin_b)
        return runs.get("push-a", {}).get("outcome") == "ok" and runs.get("push-b", {}).get("outcome") == "ok"

    assert wait_until(shown, timeout=20), (admin_b.json("/api/v1/runs"), a.log, b.log)
    runs = runs_by_id(admin_b)
    assert (runs["push-a"]["replica"], runs["push-b"]["replica"]) == ("replica-a", "replica-b")
    assert admin_b.json("/api/v1/runs/push-a")["output"] == "hi\n"
    follower = follow(admin_b.port, "running-a")
    assert wait_until(lambda: b"first line" in follower.output(), timeout=20), follower.received
    gate.touch()
    assert follower.closed.wait(20), follower.received
    assert follower.output() == b"first line\nlast line\n" and follower.events()[-1][1]["outcome"] == "ok"
    assert runs_by_id(admin_a)["running-a"]["replica"] == "replica-a"
    for server in (a, b):
        assert server.stop() == 0


def test_a_run_taken_over_from_a_killed_replica_is_told_by_both_records(
    tmp_path: Path, servers: list[Server], state_url: str
) -> None:
    gate = tmp_path / "gate"
    hooks = [gated("lines", GATE_LINES, gate)]
    started = []
    for name in ("replica-a", "replica-b"):
        folder = tmp_path / name
        folder.mkdir()
        flags = ("-state-url", state_url, "-state-replica", name, "-state-lease", "2s", "-state-grace", "1s")
        started.append(start(folder, servers, hooks, *flags))
    (a, _), (b, admin_b) = started
    assert trigger(a, "lines", "taken-over") == 200
    assert wait_until(
        lambda: runs_by_id(admin_b).get("taken-over", {}).get("outcome") == "running", timeout=20
    )
    for pid in [a.process.pid, *master_children(a.process.pid)]:
        os.kill(pid, signal.SIGKILL)  # the whole replica at once: nobody tells the history
    a.process.wait(timeout=10)

    def records() -> list[tuple[object, ...]]:
        runs = admin_b.json("/api/v1/runs?limit=500")["runs"]
        return [(r["replica"], r["kind"], r["outcome"]) for r in runs if r["id"] == "taken-over"]

    # Replica B takes the run over after the lease and grace (3 s) and its polling (5 s at most).
    want = [("replica-b", "replayed", "running"), ("replica-a", "immediate", "replayed")]
    assert wait_until(lambda: records() == want, timeout=30), records()
    gate.touch()
    assert wait_until(lambda: records()[0] == ("replica-b", "replayed", "ok"), timeout=20), records()
    assert records()[1] == ("replica-a", "immediate", "replayed")
    assert b.stop() == 0


@pytest.mark.skipif(not HAVE_BROWSER, reason="Debian's chromium and chromium-driver are not installed")
@pytest.mark.usefixtures("no_selenium_manager")
def test_the_status_page_of_one_replica_shows_the_others_runs(
    tmp_path: Path, servers: list[Server], state_url: str, third: PostgresState
) -> None:
    (a, _), (b, admin_b) = replicas(tmp_path, servers, state_url, [python_hook("ok", "print('hi')")])
    chrome = browser(tmp_path)
    try:
        chrome.get(f"http://127.0.0.1:{admin_b.port}/runs")
        wait_for(
            chrome, lambda d: d.execute_script("return document.documentElement.dataset.refresh") == "script"
        )
        # Recorded by a third replica and pushed to replica A while the page is open: they appear, each
        # naming its replica, without the test reloading anything.
        record_by_hand(third, "by-hand", b"", "exit status 2")
        assert trigger(a, "ok", "pushed-to-a") == 200
        replica_of = (
            "return Object.fromEntries([...document.querySelectorAll('tr.run')].map(r =>"
            " [r.dataset.run, [r.querySelector('td.replica')?.textContent, r.dataset.outcome]]));"
        )
        want = {"by-hand": ["replica-c", "failed"], "pushed-to-a": ["replica-a", "ok"]}
        wait_for(chrome, lambda d: d.execute_script(replica_of) == want, timeout=30)
        chrome.get(f"http://127.0.0.1:{admin_b.port}/runs/pushed-to-a")
        assert "replica-a" in chrome.find_element("css selector", "dd.replica").text
        assert "hi" in chrome.find_element("css selector", "pre.output").text
        assert severe_console_messages(chrome) == []
    finally:
        chrome.quit()
    for server in (a, b):
        assert server.stop() == 0


#: A command that prints the replica whose run owner started it (REPLICA_VARIABLE) and, for the push named
#: `hold`, waits for the gate file first: the hook's one place stays taken until the test lets it go.
WHO_RAN = (
    "import os, sys, time\n"
    "while sys.argv[2] == 'hold' and not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
    "print('ran', sys.argv[2], 'on', os.environ.get('" + REPLICA_VARIABLE + "', '?'))"
)


def who_ran(hook_id: str, gate: Path, **limits: object) -> dict[str, object]:
    hook = gated(hook_id, WHO_RAN, gate)
    arguments = hook["pass-arguments-to-command"]
    assert isinstance(arguments, list)
    hook["pass-arguments-to-command"] = [*arguments, {"source": "header", "name": "X-Request-Id"}]
    return {**hook, **limits}


def named_replicas(
    tmp_path: Path, servers: list[Server], state_url: str, hooks: object, *flags: str
) -> list[tuple[Server, Admin]]:
    """replica-a and replica-b with their admin listeners, each telling its commands its name."""
    started = []
    for name in ("replica-a", "replica-b"):
        folder = tmp_path / name
        folder.mkdir()
        admin_port = free_port()
        server = Server(
            folder,
            hooks,
            "-x-request-id",
            "-admin-addr",
            f"127.0.0.1:{admin_port}",
            "-state-url",
            state_url,
            "-state-replica",
            name,
            *flags,
            popen=functools.partial(subprocess.Popen, env={**os.environ, REPLICA_VARIABLE: name}),
        )
        servers.append(server)
        server.ready()
        assert server.wait_for_log(f"serving the run history on http://127.0.0.1:{admin_port}/"), server.log
        started.append((server, Admin(admin_port)))
    return started


def records_of(admin: Admin, ids: set[str]) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {rid: [] for rid in ids}
    for run in admin.json("/api/v1/runs?limit=500")["runs"]:
        if run["id"] in ids:
            found[run["id"]].append(run)
    return found


def ran_on(admin: Admin, rid: str) -> str:
    """The replica the run's command says started it (from its output)."""
    output = admin.json(f"/api/v1/runs/{rid}")["output"]
    found = re.fullmatch(rf"ran {rid} on (\S+)\n", output)
    assert found is not None, output
    return found.group(1)


def test_a_push_queued_by_one_replica_and_run_by_another_is_one_record(
    tmp_path: Path, servers: list[Server], state_url: str
) -> None:
    gate = tmp_path / "gate"
    hooks = [who_ran("one", gate, **{"max-concurrency": 1, "max-queue": 10})]
    (a, admin_a), (b, admin_b) = named_replicas(tmp_path, servers, state_url, hooks)
    assert trigger(b, "one", "hold") == 200  # replica B holds the hook's one place
    assert wait_until(lambda: runs_by_id(admin_a).get("hold", {}).get("outcome") == "running", timeout=20)
    queued = {f"q{n}" for n in range(1, 4)}
    for rid in sorted(queued):
        assert trigger(a, "one", rid) == 200  # admitted by replica A, queued
    # A's run owner stopped (SIGSTOP) while B's run ends: B claims and runs every queued run. It is stopped
    # once quiet (its records written), so not in the middle of a transaction that B would wait for.
    assert wait_until(lambda: all(runs_by_id(admin_b).get(rid) for rid in queued), timeout=20)
    time.sleep(0.5)
    stopped = run_owner_pids(a.process.pid)
    assert stopped
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        gate.touch()

        def settled() -> bool:
            found = records_of(admin_b, queued)
            return all(len(runs) == 1 and runs[0]["outcome"] == "ok" for runs in found.values())

        assert wait_until(settled, timeout=30), (records_of(admin_b, queued), b.log)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    # A, continued, learns that its runs ended elsewhere and ends its own tickets: still one record each.
    assert wait_until(lambda: admin_a.get("/api/v1/runs")[0] == 200, timeout=20)
    time.sleep(2)
    found = records_of(admin_a, queued)
    assert all(len(runs) == 1 for runs in found.values()), found
    for rid, (run,) in found.items():
        assert (run["kind"], run["outcome"], run["exit_code"]) == ("queued", "ok", 0), run
        assert (run["admitted_by"], run["replica"], ran_on(admin_a, rid)) == ("replica-a",) + (
            "replica-b",
        ) * 2
        assert run["started_at"] is not None and run["detail"] == "", run
    assert records_of(admin_b, queued) == found
    page = admin_b.get("/runs/q1")[2]
    assert b'<dd class="replica">replica-b</dd>' in page, page
    assert b'<dd class="admitted-by">replica-a</dd>' in page, page
    for server in (a, b):
        assert "Traceback" not in server.log
        assert server.stop() == 0


def test_pushes_coalesced_across_replicas_show_one_run(
    tmp_path: Path, servers: list[Server], state_url: str
) -> None:
    gate = tmp_path / "gate"
    hooks = [who_ran("one", gate, **{"max-concurrency": 1, "coalesce": True})]
    (a, admin_a), (b, admin_b) = named_replicas(tmp_path, servers, state_url, hooks)
    assert trigger(b, "one", "hold") == 200
    assert wait_until(lambda: runs_by_id(admin_a).get("hold", {}).get("outcome") == "running", timeout=20)
    pushes = (("c1", a), ("c2", b), ("c3", a))  # c1 queued, then c2 and c3 folded into its run
    for rid, server in pushes:
        assert trigger(server, "one", rid) == 200
    gate.touch()
    ids = {rid for rid, _ in pushes}

    def settled() -> bool:
        found = records_of(admin_b, ids)
        return all(len(runs) == 1 and runs[0]["outcome"] == "ok" for runs in found.values())

    assert wait_until(settled, timeout=30), (records_of(admin_b, ids), a.log, b.log)
    time.sleep(1.5)
    found = {rid: runs[0] for rid, runs in records_of(admin_a, ids).items()}
    assert [found[rid]["kind"] for rid, _ in pushes] == ["queued", "coalesced", "coalesced"], found
    assert [found[rid]["admitted_by"] for rid, _ in pushes] == ["replica-a", "replica-b", "replica-a"]
    # The newest push's run is the one run; the others say they were served by it.
    assert found["c3"]["started_at"] is not None and found["c3"]["detail"] == "", found
    assert found["c3"]["replica"] == ran_on(admin_a, "c3"), found
    for rid in ("c1", "c2"):
        assert found[rid]["started_at"] is None, found
        assert found[rid]["detail"] == "coalesced: a later request's run ran instead", found
    assert all(len(runs) == 1 for runs in records_of(admin_b, ids).values())
    for server in (a, b):
        assert "Traceback" not in server.log
        assert server.stop() == 0


def test_runs_queued_by_a_killed_replica_are_its_records_run_by_another(
    tmp_path: Path, servers: list[Server], state_url: str
) -> None:
    gate = tmp_path / "gate"
    hooks = [who_ran("one", gate, **{"max-concurrency": 1, "max-queue": 10})]
    flags = ("-state-lease", "2s", "-state-grace", "1s")
    (a, _), (b, admin_b) = named_replicas(tmp_path, servers, state_url, hooks, *flags)
    assert trigger(a, "one", "hold") == 200  # replica A runs it, and queues the next two
    assert wait_until(lambda: runs_by_id(admin_b).get("hold", {}).get("outcome") == "running", timeout=20)
    for rid in ("q1", "q2"):
        assert trigger(a, "one", rid) == 200
    for pid in [a.process.pid, *master_children(a.process.pid)]:
        os.kill(pid, signal.SIGKILL)
    a.process.wait(timeout=10)
    gate.touch()  # B's take-over of `hold` ends at once, then B runs the queued runs A admitted
    ids = {"hold", "q1", "q2"}

    def settled() -> bool:
        found = records_of(admin_b, ids)
        return len(found["hold"]) == 2 and all(runs and runs[0]["outcome"] == "ok" for runs in found.values())

    assert wait_until(settled, timeout=40), (records_of(admin_b, ids), b.log)
    time.sleep(1.5)
    found = records_of(admin_b, ids)
    # The take-over is told as a replay (two records, as on one host); the queued runs are one record each.
    assert [(r["replica"], r["kind"], r["outcome"]) for r in found["hold"]] == [
        ("replica-b", "replayed", "ok"),
        ("replica-a", "immediate", "replayed"),
    ]
    for rid in ("q1", "q2"):
        assert len(found[rid]) == 1, found
        (run,) = found[rid]
        assert (run["kind"], run["outcome"], run["replica"], run["admitted_by"]) == (
            "queued",
            "ok",
            "replica-b",
            "replica-a",
        ), run
        assert ran_on(admin_b, rid) == "replica-b"
    assert "Traceback" not in b.log
    assert b.stop() == 0
