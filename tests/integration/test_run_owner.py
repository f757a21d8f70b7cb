"""The run owner's process (issue 32, docs/run-state.md steps 5 and 6) in the installed `hookrunner`: one per
tree, greeted by every worker, forked again by the master when it dies, gone with the tree; every run of
every worker admitted, started and waited for there, under one set of limits. scripts/test runs these on
both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import http.client
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from test_limits import RECORDER, alive, python_command, records, start
from test_serving import Server, run_owner_pids, wait_until, worker_pids

HOOK = {
    "id": "echo",
    "execute-command": "/bin/echo",
    "include-command-output-in-response": True,
    "pass-arguments-to-command": [{"source": "url", "name": "word"}],
}

OWNER_STARTED = re.compile(r"run owner started \(pid (\d+), epoch (\d+)\)")


def owners_logged(server: Server) -> list[tuple[int, int]]:
    """(pid, epoch) of every `run owner started` line so far."""
    return [(int(pid), int(epoch)) for pid, epoch in OWNER_STARTED.findall(server.log)]


def hello_logged(server: Server, worker: int, epoch: int) -> bool:
    return f"worker {worker} connected to the run owner (epoch {epoch}," in server.log


@contextmanager
def only(workers: list[int], serving: int) -> Iterator[None]:
    """Every worker but `serving` stopped (SIGSTOP) meanwhile, so that a new connection goes to that one."""
    others = [worker for worker in workers if worker != serving]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def settled_workers(server: Server, count: int) -> list[int]:
    assert wait_until(lambda: len(worker_pids(server.process.pid)) == count, timeout=20), server.log
    return sorted(worker_pids(server.process.pid))


def greeted(tmp_path: Path, servers: list[Server], count: int) -> tuple[Server, list[int]]:
    """A server with `count` workers, each of which has greeted the first owner."""
    return greeted_with(tmp_path, servers, [HOOK], count)


def greeted_with(
    tmp_path: Path, servers: list[Server], hooks: list[dict[str, object]], count: int, *flags: str
) -> tuple[Server, list[int]]:
    server = start(tmp_path, servers, hooks, "-workers", str(count), *flags)
    workers = settled_workers(server, count)
    assert wait_until(lambda: all(hello_logged(server, w, 1) for w in workers), timeout=15), server.log
    return server, workers


def pushes(server: Server, tag: str) -> list[tuple[int, bytes]]:
    return [server.request("POST", f"/hooks/echo?word={tag}{n}")[::2] for n in range(5)]


def expected(tag: str) -> list[tuple[int, bytes]]:
    return [(200, f"{tag}{n}\n".encode()) for n in range(5)]


def test_the_tree_has_one_owner_and_every_worker_says_hello(tmp_path: Path, servers: list[Server]) -> None:
    server, workers = greeted(tmp_path, servers, 3)
    assert owners_logged(server) == [(run_owner_pids(server.process.pid)[0], 1)]
    assert run_owner_pids(server.process.pid) == [owners_logged(server)[0][0]]
    assert pushes(server, "a") == expected("a")
    assert server.stop() == 0


def test_the_owner_killed_is_back_within_a_second_with_every_worker(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, workers = greeted(tmp_path, servers, 3)
    assert pushes(server, "before") == expected("before")
    ((first, _),) = owners_logged(server)
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: run_owner_pids(server.process.pid) not in ([], [first]), timeout=10), server.log
    back = time.monotonic() - killed
    assert back < 1.0, f"the owner was back after {back:.2f}s"
    (second,) = run_owner_pids(server.process.pid)
    assert wait_until(lambda: (second, 2) in owners_logged(server), timeout=10), server.log
    assert f"run owner (pid {first}, epoch 1) ended; starting another" in server.log
    # Every live worker is attached to the new owner and greets it again.
    assert wait_until(lambda: all(hello_logged(server, w, 2) for w in workers), timeout=15), server.log
    assert sorted(worker_pids(server.process.pid)) == workers  # no worker was replaced
    assert pushes(server, "after") == expected("after")
    assert server.stop() == 0
    assert not alive(second)


def test_a_worker_killed_is_let_go_and_its_replacement_attaches(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, workers = greeted(tmp_path, servers, 2)
    (owner,) = run_owner_pids(server.process.pid)
    os.kill(workers[0], signal.SIGKILL)
    assert server.wait_for_log(f"worker {workers[0]} is gone; the run owner let its connection go"), (
        server.log
    )
    assert wait_until(
        lambda: (
            workers[0] not in worker_pids(server.process.pid) and len(worker_pids(server.process.pid)) == 2
        ),
        timeout=20,
    ), server.log
    (replacement,) = set(worker_pids(server.process.pid)) - {workers[1]}
    assert wait_until(lambda: hello_logged(server, replacement, 1), timeout=15), server.log
    assert run_owner_pids(server.process.pid) == [owner]  # the owner kept running, epoch 1
    assert len(owners_logged(server)) == 1
    assert pushes(server, "w") == expected("w")
    assert server.stop() == 0


def test_reload_signals_reload_in_the_owner_without_restarting_it(tmp_path: Path, servers: list[Server]) -> None:
    # The master forwards SIGHUP and SIGUSR1 to the owner, which reloads the hooks for every worker (step 9):
    # each signal is one reload, and the owner is the same process, of the same epoch, after both.
    server = start(tmp_path, servers, [HOOK])
    (owner,) = run_owner_pids(server.process.pid)
    for signum in (signal.SIGHUP, signal.SIGUSR1):
        server.signal(signum)
    assert wait_until(lambda: server.log.count("attempting to reload hooks from") >= 2, timeout=15), (
        server.log
    )
    time.sleep(0.3)
    assert server.log.count("attempting to reload hooks from") == 2
    assert run_owner_pids(server.process.pid) == [owner] and len(owners_logged(server)) == 1
    assert server.stop() == 0


def test_sigterm_leaves_no_process_of_the_tree(tmp_path: Path, servers: list[Server]) -> None:
    server = start(tmp_path, servers, [HOOK], "-workers", "2")
    workers = settled_workers(server, 2)
    tree = [server.process.pid, *run_owner_pids(server.process.pid), *workers]
    assert len(tree) == 4
    assert server.stop() == 0
    assert wait_until(lambda: not any(alive(pid) for pid in tree), timeout=10), [p for p in tree if alive(p)]


def test_the_owner_leaves_when_the_master_is_killed(tmp_path: Path, servers: list[Server]) -> None:
    # kill -9 of the master: nobody would stop the owner, which sees its control channel's end.
    server = start(tmp_path, servers, [HOOK])
    (owner,) = run_owner_pids(server.process.pid)
    server.process.kill()
    server.process.wait(timeout=10)
    assert wait_until(lambda: not alive(owner), timeout=10)


def listening_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            return fields[9]
    raise AssertionError(f"nothing listens on port {port}")


def descriptors(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def test_the_owner_holds_neither_the_hooks_socket_nor_the_state_dir_lock(
    tmp_path: Path, servers: list[Server]
) -> None:
    state = tmp_path / "state"
    server = start(tmp_path, servers, [HOOK], "-state-dir", str(state))
    (owner,) = run_owner_pids(server.process.pid)
    hooks_socket = f"socket:[{listening_inode(server.port)}]"
    master = descriptors(server.process.pid)
    assert hooks_socket in master and any(
        str(state) in held for held in master
    )  # what the owner must not hold
    mine = descriptors(owner)
    assert hooks_socket not in mine
    # It holds the journal (it alone opens it: step 6), never the lock that the master holds for the tree.
    assert str(state / "journal.lock") not in mine, mine
    assert str(state / "journal.sqlite3") in mine, mine
    assert server.stop() == 0


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def test_the_owner_adopts_what_a_command_leaves_and_the_master_takes_it_when_the_owner_dies(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The run owner starts every command and is their child subreaper: a process a command leaves behind
    # comes to it. The master is a child subreaper too: when the owner is killed, what it held comes to
    # the master, not to init, and is reaped by it when it ends, while gunicorn still counts its workers.
    pidfile = tmp_path / "left.pid"
    leaver = {
        "id": "leave",
        **python_command(
            "import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(4); os._exit(0)\n",
            {"source": "string", "name": str(pidfile)},
        ),
    }
    server = start(tmp_path, servers, [leaver])
    (owner,) = run_owner_pids(server.process.pid)
    worker = server.worker_pid()
    assert server.request("POST", "/hooks/leave")[0] == 200
    assert wait_until(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=10)
    left = int(pidfile.read_text())
    # The owner's, not the worker's.
    assert wait_until(lambda: parent_of(left) == owner, timeout=5), parent_of(left)
    os.kill(owner, signal.SIGKILL)
    assert wait_until(lambda: parent_of(left) == server.process.pid, timeout=3), parent_of(left)
    assert wait_until(lambda: not Path(f"/proc/{left}").exists(), timeout=10)  # ended and reaped, no zombie
    assert wait_until(lambda: len(run_owner_pids(server.process.pid)) == 1, timeout=10)
    assert worker_pids(server.process.pid) == [worker]  # the worker was not replaced
    server.ready()
    assert server.stop() == 0


# ------------------------------------------------------------- step 6: every run goes through the owner

#: Appends its start and its end, with the request's `seq`, to a file, and sleeps 0.2 s between them.
TIMED = """
import sys, time
record, seq = sys.argv[1], sys.argv[2]
def write(what):
    with open(record, "a") as out:
        out.write(f"{what} {time.monotonic_ns()} {seq}\\n")
write("start")
time.sleep(0.2)
write("end")
"""


def timed_hook(hook_id: str, record: Path, **limits: object) -> dict[str, object]:
    return {
        "id": hook_id,
        **python_command(TIMED, {"source": "string", "name": str(record)}, {"source": "url", "name": "seq"}),
        "response-message": "accepted",
        **limits,
    }


def each_run(record: Path) -> dict[str, list[tuple[str, int]]]:
    """Every seq's records: [(start|end, time), ...] in the file's order."""
    found: dict[str, list[tuple[str, int]]] = {}
    for what, stamp, seq in records(record):
        found.setdefault(seq, []).append((what, stamp))
    return found


def assert_each_ran_once_and_never_two_at_once(record: Path, accepted: list[str]) -> None:
    runs = each_run(record)
    assert sorted(runs) == sorted(accepted), (sorted(runs), sorted(accepted))
    for seq, rows in runs.items():
        assert [what for what, _ in rows] == ["start", "end"], (seq, rows)  # ran once: one start, one end
    spans = sorted((rows[0][1], rows[1][1]) for rows in runs.values())
    for (_, previous_end), (next_start, _) in zip(spans, spans[1:], strict=False):
        assert next_start >= previous_end, "two runs of a max-concurrency: 1 hook overlapped"


def concurrent_pushes(server: Server, hook_id: str, count: int) -> list[tuple[str, int, bytes]]:
    def push(seq: int) -> tuple[str, int, bytes]:
        status, _, body = server.request("POST", f"/hooks/{hook_id}?seq={seq}")
        return str(seq), status, body

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(push, range(count)))


def test_three_workers_hold_one_max_concurrency_between_them(tmp_path: Path, servers: list[Server]) -> None:
    # Issue 32: with -workers 3 each worker had its own cap, and a max-concurrency: 1 hook ran 3 at once.
    record = tmp_path / "runs"
    hook = timed_hook("serial", record, **{"max-concurrency": 1, "max-queue": 60})
    server, workers = greeted_with(tmp_path, servers, [hook], 3)
    answers = concurrent_pushes(server, "serial", 60)
    accepted = [seq for seq, status, body in answers if (status, body) == (200, b"accepted")]
    assert all(status in (200, 429) for _, status, _ in answers), answers
    assert len(accepted) >= 55, answers  # the queue holds 60: only a slow start could refuse a few
    assert wait_until(lambda: len(records(record)) == 2 * len(accepted), timeout=90), len(records(record))
    time.sleep(0.5)  # nothing more comes: no run runs twice
    assert_each_ran_once_and_never_two_at_once(record, accepted)
    served_by = {int(pid) for pid in re.findall(r"worker (\d+) connected to the run owner", server.log)}
    assert served_by == set(workers)
    assert server.stop() == 0


def test_a_worker_killed_with_runs_queued_loses_none(tmp_path: Path, servers: list[Server]) -> None:
    # The queued runs are the owner's, not the worker's that took their requests: kill -9 of a worker
    # loses none of them, and none runs twice.
    record, gate = tmp_path / "runs", tmp_path / "gate"
    hook = {
        "id": "gated",
        **python_command(
            RECORDER,
            {"source": "string", "name": str(record)},
            {"source": "string", "name": str(gate)},
            {"source": "url", "name": "seq"},
        ),
        "response-message": "accepted",
        "max-concurrency": 1,
        "max-queue": 40,
    }
    server, workers = greeted_with(tmp_path, servers, [hook], 3)
    answers = concurrent_pushes(server, "gated", 30)
    accepted = [seq for seq, status, body in answers if (status, body) == (200, b"accepted")]
    assert len(accepted) == 30, answers
    assert wait_until(lambda: len(records(record)) == 1, timeout=15)  # one runs (held by the gate), 29 wait
    os.kill(workers[0], signal.SIGKILL)
    assert server.wait_for_log(f"worker {workers[0]} is gone; the run owner let its connection go", 20)
    gate.write_text("go")
    assert wait_until(lambda: len(records(record)) == 60, timeout=90), len(records(record))
    time.sleep(0.5)
    assert_each_ran_once_and_never_two_at_once(record, accepted)
    assert server.stop() == 0


def test_the_owner_killed_during_a_capture_never_gives_a_wrong_200(
    tmp_path: Path, servers: list[Server]
) -> None:
    started = tmp_path / "started"
    slow = {
        "id": "slow",
        **python_command(
            "import sys, time\nopen(sys.argv[1], 'w').write('go')\ntime.sleep(5)\nprint('slept')\n",
            {"source": "string", "name": str(started)},
        ),
        "include-command-output-in-response": True,
    }
    server, _ = greeted_with(tmp_path, servers, [slow, HOOK], 1)
    (owner,) = run_owner_pids(server.process.pid)
    outcome: list[object] = []

    def capture() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        try:
            conn.request("POST", "/hooks/slow")
            answer = conn.getresponse()
            outcome.append((answer.status, answer.getheader("Retry-After"), answer.read()))
        except (ConnectionError, http.client.HTTPException) as exc:
            outcome.append(exc)  # a reset is an honest answer too
        finally:
            conn.close()

    asking = threading.Thread(target=capture)
    asking.start()
    assert wait_until(started.exists, timeout=15)
    os.kill(owner, signal.SIGKILL)
    asking.join(timeout=30)
    assert not asking.is_alive()
    (got,) = outcome
    if isinstance(got, tuple):
        status, retry_after, body = got
        assert (status, retry_after) == (503, "1"), got
        assert b"slept" not in body
    # The next owner serves the next capture.
    assert wait_until(lambda: 2 in [epoch for _, epoch in owners_logged(server)], timeout=10)
    assert wait_until(lambda: server.request("POST", "/hooks/echo?word=again")[::2] == (200, b"again\n"), 15)
    assert server.stop() == 0


def run_samples(server: Server) -> dict[str, float]:
    """The run metrics of one scrape of /metrics (whichever worker takes it), by sample and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.startswith(("hookrunner_command_runs_total", "hookrunner_commands_")):
                found[f"{sample.name}{sorted(sample.labels.items())}"] = sample.value
    return found


def test_every_worker_shows_the_hosts_run_metrics(tmp_path: Path, servers: list[Server]) -> None:
    # The run metrics are born in the run owner; each worker's /metrics asks it for them, so whichever of
    # three workers answers, the counts are the host's: every run, not the answering worker's share.
    server = start(tmp_path, servers, [HOOK], "-workers", "3", "-metrics")
    settled_workers(server, 3)
    for n in range(12):
        assert server.request("POST", f"/hooks/echo?word=m{n}")[::2] == (200, f"m{n}\n".encode())
    expected = {
        "hookrunner_command_runs_total[('hook', 'echo'), ('status', '0')]": 12.0,
        "hookrunner_commands_running[]": 0.0,
        "hookrunner_commands_queued[]": 0.0,
    }
    scrapes = [run_samples(server) for _ in range(12)]  # new connections: the kernel spreads them
    assert all(scrape == expected for scrape in scrapes), scrapes
    assert server.stop() == 0


#: A hook whose rule is satisfied by `?go=yes` alone.
RULED = {
    "id": "ruled",
    "execute-command": "/bin/true",
    "trigger-rule": {
        "match": {"type": "value", "value": "yes", "parameter": {"source": "url", "name": "go"}}
    },
}


def requests_totals(server: Server) -> dict[tuple[str, str], float]:
    """hookrunner_requests_total of one scrape of /metrics, by (hook, outcome)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    return {
        (sample.labels["hook"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "hookrunner_requests_total"
    }


def test_every_scrape_through_any_worker_counts_every_request_sent(
    tmp_path: Path, servers: list[Server]
) -> None:
    # Issue 32 deliverable 4: with three workers, /metrics totals equal the requests sent. Each round sends
    # requests of three outcomes over connections of their own (the kernel spreads them over the workers),
    # then scrapes at once through one worker alone (the other two stopped for it): every count was sent
    # to the run owner before its request was answered, and the owner reads every worker's connection out
    # before it answers a scrape, so the totals are exact, not eventual.
    server = start(tmp_path, servers, [HOOK, RULED], "-workers", "3", "-metrics")
    workers = settled_workers(server, 3)
    sends = [
        ("/hooks/echo?word=x", 200, ("echo", "served")),
        ("/hooks/ruled?go=yes", 200, ("ruled", "served")),
        ("/hooks/ruled?go=no", 200, ("ruled", "rules_not_satisfied")),
        ("/hooks/nope", 404, ("", "not_found")),
    ]
    sent: dict[tuple[str, str], float] = {}
    with ThreadPoolExecutor(4) as pool:
        for rnd, scraper in enumerate(workers * 2):
            batch = [sends[n % len(sends)] for n in range(rnd, rnd + 24 + rnd)]
            statuses = list(pool.map(lambda s: server.request("POST", s[0])[0], batch))
            assert statuses == [status for _, status, _ in batch]
            for _, _, key in batch:
                sent[key] = sent.get(key, 0) + 1
            with only(workers, scraper):
                scraped = requests_totals(server)
            assert scraped == sent, (rnd, scraper)
    assert sum(sent.values()) == sum(24 + rnd for rnd in range(6))
    assert "were read out" not in server.log  # no scrape gave up waiting for a worker's counts
    assert server.stop() == 0


def test_a_scrape_asked_while_the_owner_was_stopped_counts_what_every_worker_sent_before_it(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The run owner stopped (SIGSTOP) while requests that run nothing are answered: their counts wait
    # unread in every worker's connection. A scrape asked then, through one worker alone, is read by the
    # owner once it is resumed, together with all those counts: it is answered only once every connection
    # is read out, so it counts every one (answered in the order the owner happens to read, it would not).
    # The owner has taken every worker's connection before it is stopped: a connection the owner has not
    # taken yet is not among those a scrape waits for.
    server, workers = greeted_with(tmp_path, servers, [RULED], 3, "-metrics")
    (owner,) = run_owner_pids(server.process.pid)
    sent: dict[tuple[str, str], float] = {}
    with ThreadPoolExecutor(4) as pool:
        for scraper in workers:
            os.kill(owner, signal.SIGSTOP)
            try:
                batch = [("/hooks/ruled?go=no", 200), ("/hooks/nope", 404)] * 15
                statuses = list(pool.map(lambda s: server.request("POST", s[0])[0], batch))
                assert statuses == [status for _, status in batch]
                sent[("ruled", "rules_not_satisfied")] = sent.get(("ruled", "rules_not_satisfied"), 0) + 15
                sent[("", "not_found")] = sent.get(("", "not_found"), 0) + 15
                others = [w for w in workers if w != scraper]
                for other in others:
                    os.kill(other, signal.SIGSTOP)
                scrape = pool.submit(requests_totals, server)
                time.sleep(0.3)  # the scrape's question is in the owner's connection with the counts
            finally:
                for stopped in [*workers, owner]:  # the workers first: the scrape's worker is waiting
                    os.kill(stopped, signal.SIGCONT)
            assert scrape.result(timeout=15) == sent, scraper
    assert server.stop() == 0


def test_a_start_that_fails_past_its_checks_is_answered_and_logged_with_no_traceback(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A command that passes every check before the start (it exists, it is executable) but that the
    kernel will not exec (ENOEXEC): the start raises in the run's greenlet, the run answers and logs Go's
    text, and nothing else reaches the log. gevent's pool printed a traceback there, and the task's repr
    with the start's arguments: the command's whole environment, the server's own variables included."""
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02 not a program")
    garbage.chmod(0o755)
    hook = {
        "id": "garbage",
        "execute-command": str(garbage),
        "include-command-output-in-response": True,
    }
    server = start(tmp_path, servers, [hook])
    status, _, body = server.request("POST", "/hooks/garbage")
    assert (status, body) == (
        500,
        b"Error occurred while executing the hook's command. Please check your logs for more details.",
    )
    assert server.wait_for_log(f"error occurred: fork/exec {garbage}: exec format error"), server.log
    assert server.stop() == 0
    assert "Traceback" not in server.log and "OSError" not in server.log, server.log[-3000:]


def test_a_command_starts_with_the_signals_webhooks_start_with_and_the_owner_shrugs_them_off(
    tmp_path: Path, servers: list[Server]
) -> None:
    """The owner ignored SIGINT, SIGQUIT, SIGUSR2 and SIGWINCH (the terminal's keys, gunicorn's own), and an
    ignored signal stays ignored through exec: every command began with them ignored, where webhook's begin
    with none (a shell script cannot even trap one). It now catches them with a handler that does nothing,
    which the exec resets; SIGTTIN and SIGTTOU stay ignored (runowner.py says why)."""
    hook = {
        "id": "signals",
        "execute-command": "/bin/grep",
        "pass-arguments-to-command": [
            {"source": "string", "name": "^SigIgn"},
            {"source": "string", "name": "/proc/self/status"},
        ],
        "include-command-output-in-response": True,
    }
    server = start(tmp_path, servers, [hook])
    (owner,) = run_owner_pids(server.process.pid)
    for sent in (signal.SIGINT, signal.SIGQUIT, signal.SIGUSR2, signal.SIGWINCH):
        os.kill(owner, sent)
    time.sleep(0.3)
    status, _, body = server.request("POST", "/hooks/signals")
    assert status == 200, body
    ignored = int(body.decode().split()[1], 16)
    assert ignored == 1 << (signal.SIGTTIN - 1) | 1 << (signal.SIGTTOU - 1), body
    assert run_owner_pids(server.process.pid) == [owner]  # none of the four ended it
    assert server.stop() == 0
    assert "Traceback" not in server.log, server.log[-3000:]
