"""The run owner (run/owner.py) with workers' clients (run/ownerclient.py) in one process, on threads, over
real SOCK_SEQPACKET pairs and with real commands: one set of limits across every worker, output carried
whole, and a worker that dies, stops reading or sends garbage costs only itself."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from owner_support import (
    Host,
    LaunchingWaits,
    hook,
    host,
    limits,
    most_at_once,
    request,
    runs_of,
    script,
    wait_until,
)

from hookrunner.hooks.argument import Argument
from hookrunner.run import wire
from hookrunner.run.executor import CommandResult
from hookrunner.run.prepare import prepare
from hookrunner.run.runorder import run_messages
from hookrunner.state.journal import Journal, JournalUnwritable
from hookrunner.state.slots import Busy


@pytest.fixture
def three() -> Iterator[Host]:
    with host(3) as made:
        yield made


def timed_script(tmp_path: Path, seconds: float = 0.1) -> tuple[Path, Path]:
    """A command that logs its start and end (with its argument) and sleeps between them."""
    log = tmp_path / "runs.log"
    command = script(
        tmp_path / "timed",
        f'echo "start $1 $(date +%s%N)" >> {log}\nsleep {seconds}\necho "end $1 $(date +%s%N)" >> {log}\n',
    )
    return command, log


def gated_script(tmp_path: Path) -> tuple[Path, Path]:
    """A command that prints its argument and, for the argument `block`, waits until the file `go` exists."""
    gate = tmp_path / "go"
    command = script(
        tmp_path / "gated",
        f'echo "$1" >> {tmp_path}/ran\n'
        f'if [ "$1" = block ]; then while [ ! -e {gate} ]; do sleep 0.01; done; fi\necho "out $1"\n',
    )
    return command, gate


def submit_all(host: Host, submits: list[tuple[int, object, object]]) -> list[Future[CommandResult]]:
    """Each (client index, hook, request) submitted at once, from threads of its own."""
    with ThreadPoolExecutor(len(submits)) as pool:
        asked = [pool.submit(host.clients[c].submit, h, r) for c, h, r in submits]  # type: ignore[arg-type]
        return [a.result(timeout=30) for a in asked]


def test_max_concurrency_one_holds_across_three_workers(three: Host, tmp_path: Path) -> None:
    command, log = timed_script(tmp_path)
    serial = hook(command, limits=limits(max_concurrency=1, max_queue=100))
    futures = submit_all(three, [(n % 3, serial, request(f"r{n}", n=str(n))) for n in range(30)])
    results = [f.result(timeout=30) for f in futures]
    assert all(result.ok for result in results)
    runs = runs_of(log)
    assert sorted(n for n, _, _ in runs) == sorted(str(n) for n in range(30))  # each ran once
    assert most_at_once(runs) == 1
    assert three.owner.runner.running == 0 and three.owner.runner.queued == 0


def test_the_global_cap_holds_across_workers_and_hooks(tmp_path: Path) -> None:
    command, log = timed_script(tmp_path, 0.2)
    with host(3, max_concurrent=2) as made:
        hooks = [hook(command, f"h{n}") for n in range(3)]
        futures = submit_all(made, [(n % 3, hooks[n % 3], request(f"r{n}", n=str(n))) for n in range(12)])
        assert all(f.result(timeout=30).ok for f in futures)
    runs = runs_of(log)
    assert len(runs) == 12
    assert most_at_once(runs) == 2


def test_requests_of_two_workers_coalesce_into_one_run_and_both_get_its_exit(
    three: Host, tmp_path: Path
) -> None:
    command, gate = gated_script(tmp_path)
    folded = hook(command, capture_output=True, limits=limits(max_concurrency=1, max_queue=1, coalesce=True))
    first = three.clients[0].submit(folded, request("b", n="block"))
    assert wait_until(lambda: (tmp_path / "ran").exists())  # the blocker runs: the next wait
    queued = three.clients[1].submit(folded, request("q", n="one"))
    coalesced = three.clients[2].submit(folded, request("c", n="two"))
    assert three.clients[1].queued == 1 and three.clients[2].queued == 1
    gate.touch()
    assert first.result(timeout=10).output == b"out block\n"
    assert queued.result(timeout=10) == coalesced.result(timeout=10) == CommandResult(b"out two\n")
    assert (tmp_path / "ran").read_text() == "block\ntwo\n"  # one run for both


def test_a_mebibyte_of_captured_output_arrives_byte_exact(three: Host, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096
    (tmp_path / "blob").write_bytes(data)
    command = script(tmp_path / "cat", f"cat {tmp_path}/blob\n")
    result = three.clients[1].run(hook(command, capture_output=True), request("r", n="x"))
    assert result == CommandResult(data)


def test_a_run_larger_than_a_packet_arrives_whole(three: Host, tmp_path: Path) -> None:
    """Argv and a file past 128 KiB: the run's body travels in parts."""
    command = script(tmp_path / "sum", 'printf "%s" "$1$2" | wc -c\nwc -c < "$HOOK_BLOB"\n')
    arguments = (Argument("payload", "n"), Argument("payload", "m"))  # each under the kernel's 128 KiB
    big = hook(
        command, capture_output=True, pass_arguments=arguments, pass_file=(Argument("payload", "blob"),)
    )
    result = three.clients[0].run(big, request("r", n="a" * 100_000, m="c" * 100_000, blob="b" * 300_000))
    assert result.output.split() == [b"200000", b"300000"]


def test_a_stream_run_tells_its_chunks_before_it_ends(three: Host, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    command = script(
        tmp_path / "talk", f"echo first\nwhile [ ! -e {gate} ]; do sleep 0.01; done\necho second\n"
    )
    chunks: list[bytes] = []
    future = three.clients[2].submit(
        hook(command, stream_output=True), request("s", n="x"), on_output=chunks.append
    )
    assert wait_until(lambda: b"first\n" in b"".join(chunks))
    assert not future.done()
    gate.touch()
    assert future.result(timeout=10) == CommandResult(b"first\nsecond\n")
    assert b"".join(chunks) == b"first\nsecond\n"


def test_a_hook_at_its_limit_with_a_full_queue_is_busy_with_its_retry_after(
    three: Host, tmp_path: Path
) -> None:
    command, gate = gated_script(tmp_path)
    one = hook(command, limits=limits(max_concurrency=1, retry_after=7))
    running = three.clients[0].submit(one, request("b", n="block"))
    with pytest.raises(Busy) as busy:
        three.clients[1].submit(one, request("x", n="x"))
    assert busy.value.retry_after == 7
    gate.touch()
    assert running.result(timeout=10).ok


def test_a_journal_that_cannot_record_refuses_the_run(three: Host, tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), "boot")
    three.owner.runner.journal = journal
    db = journal._db
    db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")  # full
    command = script(tmp_path / "ok", f"touch {tmp_path}/ran\n")
    big = hook(command, pass_file=(Argument("payload", "blob"),))
    try:
        with pytest.raises(JournalUnwritable) as refused:
            three.clients[0].submit(big, request("j", n="x", blob="z" * 100_000))
        assert str(refused.value) == f"run journal {journal.path} cannot be written"
        assert refused.value.retry_after == 5
        assert not wait_until(lambda: (tmp_path / "ran").exists(), timeout=0.5)  # never run
    finally:
        three.owner.runner.journal = None
        journal.close()


def test_a_worker_gone_with_runs_queued_leaves_them_to_run_once(three: Host, tmp_path: Path) -> None:
    command, gate = gated_script(tmp_path)
    one = hook(command, limits=limits(max_concurrency=1, max_queue=10))
    blocker = three.clients[1].submit(one, request("b", n="block"))
    for n in range(3):
        three.clients[0].submit(one, request(f"q{n}", n=f"q{n}"))
    three.clients[0].close()  # the worker dies with three runs queued
    assert wait_until(lambda: 101 not in three.owner.workers)
    gate.touch()
    assert blocker.result(timeout=10).ok
    assert (
        three.clients[2].run(hook(command, capture_output=True), request("after", n="after")).output
        == b"out after\n"
    )
    assert wait_until(lambda: (tmp_path / "ran").read_text().count("\n") == 5)
    assert sorted((tmp_path / "ran").read_text().split()) == ["after", "block", "q0", "q1", "q2"]


def test_a_worker_that_stops_reading_is_cut_off_and_the_others_are_served(
    tmp_path: Path, log_lines: io.StringIO
) -> None:
    """A finished capture's output (not counted against the bound: the run holds it anyway) waits for a stuck
    worker past the stall: it is cut off, and a worker that reads gets the same 4 MiB whole meanwhile. (A
    stuck worker's stream holds no more than its window: tests/run/test_owner_credit.py.)"""
    data = b"y" * (4 * 1024 * 1024)
    (tmp_path / "blob").write_bytes(data)
    loud = hook(script(tmp_path / "loud", f"cat {tmp_path}/blob\n"), capture_output=True)
    with host(1, outbox_bound=1024 * 1024, outbox_stall=1.0) as made:
        stuck = made.raw_worker(201)  # reads nothing after this
        spec = prepare(loud, request("loud", n="x"))
        for message in run_messages(1, loud, spec, None, capture=True, stream=False):
            wire.send(stuck, message)
        result = made.clients[0].run(loud, request("fine", n="x"))
        assert result == CommandResult(data)
        assert wait_until(lambda: 201 not in made.owner.workers)
        assert "run owner: worker 201 has taken no answer for 1s" in log_lines.getvalue()
        assert 101 in made.owner.workers
        # What the stuck worker's socket took before the cut: the hello, the answer and some of the output,
        # then its end.
        kinds = []
        while True:
            try:
                kinds.append(wire.receive(stuck)[0].kind)
            except wire.PeerGone:
                break
        assert kinds[0] == "hello" and "admitted" in kinds and "exit" not in kinds


def test_the_owner_letting_a_worker_go_fails_its_waiting_runs_at_once(three: Host, tmp_path: Path) -> None:
    from hookrunner.run.ownerclient import OwnerUnavailable

    command, gate = gated_script(tmp_path)
    client = three.clients[0]
    client.hello_wait = 0.2
    waiting = client.submit(hook(command, capture_output=True), request("b", n="block"))
    three.owner.detach(101)
    with pytest.raises(OwnerUnavailable):
        waiting.result(timeout=5)
    with pytest.raises(OwnerUnavailable):
        client.submit(hook(command), request("n", n="new"))
    gate.touch()
    assert (
        three.clients[1].run(hook(command, capture_output=True), request("o", n="other")).output
        == b"out other\n"
    )


@pytest.mark.parametrize(
    "packet",
    [
        b"not a message",
        b"[1, 2]\n",
        b'{"kind": "run", "id": 5}\n',
        b'{"kind": "run", "id": 6, "spec": 2, "files": [["X", -1]], "hook": "h"}\n{}',
        b'{"kind": "part"}\n',
        b'{"kind": "nonsense", "id": 7}\n',
        b"\xff" * (wire.MAX_PACKET + 1),
    ],
)
def test_a_malformed_packet_is_refused_and_the_owner_serves_on(
    three: Host, tmp_path: Path, log_lines: io.StringIO, packet: bytes
) -> None:
    raw = three.raw_worker(301)
    assert wire.receive(raw)[0].kind == "hello"
    try:
        raw.send(packet)
    except OSError:  # larger than the socket takes: the kernel refuses it, which is as good
        pass
    command = script(tmp_path / "ok", "echo ok\n")
    ok = hook(command, capture_output=True)
    spec = prepare(ok, request("r", n="x"))
    for message in run_messages(9, ok, spec, None, capture=True, stream=False, tell_start=True):
        wire.send(raw, message)
    answers = []
    while not answers or answers[-1].kind != "exit":
        answers.append(wire.receive(raw)[0])
    if b'"id": 5' in packet or b'"id": 6' in packet:
        assert answers[0].kind == "refused"
        answers.pop(0)
    assert sorted(m.kind for m in answers[:-1]) == ["admitted", "started"]  # in either order: two threads
    assert answers[-1].data == b"ok\n"
    assert 301 in three.owner.workers
    assert "Traceback" not in log_lines.getvalue()
    assert three.clients[0].run(ok, request("s", n="x")).output == b"ok\n"


def test_started_first_returns_once_the_run_has_started(three: Host, tmp_path: Path) -> None:
    """On the gevent worker's waits: past the one run answered ahead of its start, start() returns once
    the owner has told it of the run's start."""
    gate = tmp_path / "go"
    command = script(
        tmp_path / "wait", f'echo "$1" >> {tmp_path}/ran\nwhile [ ! -e {gate} ]; do sleep 0.01; done\n'
    )
    client = three.clients[0]
    client.use(LaunchingWaits())
    client.start_wait = 5.0
    blocked = hook(command, limits=limits(max_concurrency=2))
    client.start(blocked, request("a", n="a"))  # the one answered ahead of its start
    began = time.monotonic()
    client.start(blocked, request("b", n="b"))  # waits for its start: told, not the 5 s start_wait
    assert time.monotonic() - began < 4.0
    assert client.ahead <= 1
    assert wait_until(lambda: client.running == 2)
    gate.touch()
    assert wait_until(lambda: client.running == 0)


def test_runs_of_many_threads_each_get_their_own_exit(three: Host, tmp_path: Path) -> None:
    command = script(tmp_path / "echo", 'echo "$1"\n')
    echo = hook(command, capture_output=True)
    results: dict[str, bytes] = {}
    lock = threading.Lock()

    def one(n: int) -> None:
        out = three.clients[n % 3].run(echo, request(f"r{n}", n=str(n))).output
        with lock:
            results[str(n)] = out

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(60)))
    assert results == {str(n): f"{n}\n".encode() for n in range(60)}


def test_run_answers_with_the_output_even_for_a_hook_that_does_not_capture(
    three: Host, tmp_path: Path
) -> None:
    command = script(tmp_path / "echo", 'echo "$1"\n')
    assert three.clients[0].run(hook(command), request("r", n="said")) == CommandResult(b"said\n")


def test_a_run_that_does_not_ask_for_its_start_gets_only_its_answer_and_exit(
    three: Host, tmp_path: Path
) -> None:
    """A capture run's request waits for the exit: a `started` would be one more wake-up of the worker."""
    raw = three.raw_worker(401)
    assert wire.receive(raw)[0].kind == "hello"
    ok = hook(script(tmp_path / "ok", "echo ok\n"), capture_output=True)
    for message in run_messages(3, ok, prepare(ok, request("r", n="x")), None, capture=True, stream=False):
        wire.send(raw, message)
    assert sorted(wire.receive(raw)[0].kind for _ in range(2)) == ["admitted", "exit"]  # either order
    raw.setblocking(False)
    with pytest.raises(BlockingIOError):
        raw.recv(wire.MAX_PACKET)


def test_a_worker_asks_the_owner_for_its_run_metrics_and_readiness(three: Host, tmp_path: Path) -> None:
    # Without an exposition (no -metrics) the answer is empty; with one, it is the owner's text, whole even
    # past a packet (it comes in parts).
    assert three.clients[0].run_metrics() == b""
    text = b"# TYPE hookrunner_commands_running gauge\n" * 8000 + b"# EOF\n"
    assert len(text) > wire.MAX_PACKET
    three.owner.exposition = lambda: text
    assert [client.run_metrics() for client in three.clients] == [text] * 3
    assert three.clients[1].accepts_runs()
    journal = Journal(str(tmp_path), "boot")
    three.owner.runner.journal = journal
    try:
        assert three.clients[1].accepts_runs()
        journal.writable = lambda: False  # type: ignore[method-assign]  # as with a full disk
        assert not three.clients[1].accepts_runs()
    finally:
        three.owner.runner.journal = None
        journal.close()
