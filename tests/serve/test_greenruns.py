"""Runs as greenlets on a gevent loop (the run owner's: serve/greenruns.py) against runs on command threads
(the threaded worker's, run/spawn.py's default): the same argv, environment, working directory, process
group and session, the same timeouts ending every descendant, the same error texts; and on the loop, a
waiting run never blocks the other greenlets."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gevent
import pytest

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Hook
from hookrunner.hooks.request import Request
from hookrunner.run import executor, startwait
from hookrunner.run.executor import CommandResult, CommandRunner
from hookrunner.run.processes import identify
from hookrunner.run.spawn import own_session
from hookrunner.serve import greenruns
from hookrunner.serve.greenruns import GreenWaits

WAYS = ("threads", "greenlets")


def runner_for(way: str, **kwargs: float) -> CommandRunner:
    runner = CommandRunner(**kwargs)  # type: ignore[arg-type]
    if way == "greenlets":
        runner.use(GreenWaits())
    return runner


def finish(way: str, future: Future[CommandResult], limit: float = 20.0) -> CommandResult:
    """The run's result; on the loop, the hub runs (this greenlet sleeps) until it is done."""
    if way == "greenlets":
        deadline = time.monotonic() + limit
        while not future.done() and time.monotonic() < deadline:
            gevent.sleep(0.005)
    return future.result(timeout=limit)


@contextmanager
def ticking() -> Iterator[list[float]]:
    """A greenlet of the loop that notes the time every 10 ms while the block runs: gaps show the loop held."""
    ticks: list[float] = []

    def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    tick = gevent.spawn(ticker)
    try:
        yield ticks
    finally:
        tick.kill()


def run(way: str, hook: Hook, runner: CommandRunner | None = None) -> CommandResult:
    runner = runner or runner_for(way)
    return finish(
        way,
        runner.submit(
            hook, Request(id="r1", method="POST", remote_addr="127.0.0.1:1", payload={"ref": "main"})
        ),
    )


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    script = tmp_path / "probe"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import os, sys
            print("argv:", sys.argv)
            print("cwd:", os.getcwd())
            print("env:", sorted(f"{{k}}={{v}}" for k, v in os.environ.items() if k.startswith("HOOK_")))
            me = os.getpid()
            print("group leader:", os.getpgid(0) == me, "session leader:", os.getsid(0) == me)
            print("stdin:", os.readlink("/proc/self/fd/0"))
            print("to stderr", file=sys.stderr, flush=True)
            """
        )
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("way", WAYS)
def test_argv_env_cwd_group_and_streams_are_the_same_either_way(
    way: str, probe: Path, tmp_path: Path
) -> None:
    hook = Hook(
        id="h",
        execute_command=str(probe),
        pass_arguments=(Argument("payload", "ref"), Argument("string", "two words")),
        pass_environment=(Argument("payload", "ref"),),
        command_working_directory=str(tmp_path),
    )
    result = run(way, hook)
    assert result.ok, result
    assert result.output.decode().splitlines() == [
        f"argv: ['{probe}', 'main', 'two words']",
        f"cwd: {tmp_path}",
        "env: ['HOOK_ref=main']",
        # A session of its own only while this process has a terminal (spawn.own_session).
        f"group leader: True session leader: {own_session()}",
        "stdin: /dev/null",
        "to stderr",
    ]


@pytest.mark.parametrize("way", WAYS)
def test_a_missing_command_and_an_unstartable_one_give_todays_error_texts(way: str, tmp_path: Path) -> None:
    missing = run(way, Hook(id="h", execute_command="/nonexistent/cmd"))
    expected = 'exec: "/nonexistent/cmd": stat /nonexistent/cmd: no such file or directory'
    assert (missing.output, missing.error) == (b"", expected)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02 not a program")
    garbage.chmod(0o755)
    broken = run(way, Hook(id="h", execute_command=str(garbage)))
    assert (broken.output, broken.error) == (b"", f"fork/exec {garbage}: exec format error")


@pytest.mark.parametrize("way", WAYS)
def test_exit_status_and_signal_texts(way: str, tmp_path: Path) -> None:
    script = tmp_path / "die"
    script.write_text('#!/bin/sh\necho partial\n[ "$1" = kill ] && kill -9 $$\nexit 3\n')
    script.chmod(0o755)
    failed = run(way, Hook(id="h", execute_command=str(script)))
    assert (failed.output, failed.error) == (b"partial\n", "exit status 3")
    killed = run(way, Hook(id="h", execute_command=str(script), pass_arguments=(Argument("string", "kill"),)))
    assert (killed.output, killed.error) == (b"partial\n", "signal: killed")


@pytest.mark.parametrize("way", WAYS)
def test_a_timeout_ends_the_leader_and_every_descendant(way: str, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "stubborn"
    # The leader ignores TERM; a child in its group sleeps, a grandchild leaves the session (setsid).
    script.write_text(
        f"#!/bin/sh\ntrap '' TERM\nsleep 30 &\necho $! >> {pids}\n"
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 30' &\necho started\nwait\n"
    )
    script.chmod(0o755)
    runner = runner_for(way, kill_grace=0.3)
    started = time.monotonic()
    result = run(way, Hook(id="h", execute_command=str(script), command_timeout=0.5), runner)
    assert time.monotonic() - started < 5
    assert (result.output, result.error) == (b"started\n", "command timed out after 0.5s (signal: killed)")
    deadline = time.monotonic() + 3
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    while any(identify(p) is not None for p in left) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [p for p in left if identify(p) is not None] == []
    assert runner.running == 0


def test_on_the_loop_a_waiting_run_lets_the_other_greenlets_run(tmp_path: Path) -> None:
    runner = runner_for("greenlets")
    with ticking() as ticks:
        hook = Hook(id="h", execute_command="/bin/sleep", pass_arguments=(Argument("string", "0.5"),))
        started = time.monotonic()
        result = run("greenlets", hook, runner)
        took = time.monotonic() - started
    assert result.ok and took >= 0.5
    during = [t for t in ticks if started <= t <= started + took]
    assert len(during) >= 3, len(during)  # ~50 at 10 ms; none if the run had blocked the loop
    assert max(b - a for a, b in zip(during, during[1:], strict=False)) < 0.45  # the run takes 0.5 s


def test_on_the_loop_shutdown_waits_for_runs_without_blocking_them(tmp_path: Path) -> None:
    marker = tmp_path / "done"
    script = tmp_path / "slow"
    script.write_text(f"#!/bin/sh\nsleep 0.3\ntouch {marker}\n")
    script.chmod(0o755)
    runner = runner_for("greenlets")
    runner.start(
        Hook(id="h", execute_command=str(script)), Request(id="r1", method="POST", remote_addr="127.0.0.1:1")
    )
    started = time.monotonic()
    runner.shutdown(grace=5)
    assert marker.exists()
    assert time.monotonic() - started < 3  # it ended with the run, not at the grace
    forever = tmp_path / "forever"
    forever.write_text("#!/bin/sh\nsleep 30 &\nwait\n")
    forever.chmod(0o755)
    future = runner.submit(
        Hook(id="h", execute_command=str(forever)), Request(id="r2", method="POST", remote_addr="127.0.0.1:1")
    )
    deadline = time.monotonic() + 5
    while runner.running == 0 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    started = time.monotonic()
    runner.shutdown(grace=0.2)
    result = finish("greenlets", future)
    assert time.monotonic() - started < 5
    assert result.error == "signal: killed"
    assert runner.running == 0


def test_no_thread_is_started_per_run_on_the_loop(tmp_path: Path) -> None:
    runner = runner_for("greenlets")
    before = {t.ident for t in threading.enumerate()}
    for _ in range(5):
        assert run("greenlets", Hook(id="h", execute_command="/bin/true"), runner).ok
    names = sorted(t.name for t in threading.enumerate() if t.ident not in before)
    assert all(not name.startswith("command") for name in names), names


def test_on_the_loop_a_push_is_answered_before_its_start_only_when_none_is_ahead(tmp_path: Path) -> None:
    """STARTS_AHEAD: a push is answered at once when no run answered before it is still starting; otherwise
    it waits for its own start, so at most one answered run has not started (no backlog of them)."""
    runner = runner_for("greenlets")
    runner.start_wait = 30  # as long as a start takes on a loaded machine
    assert startwait.STARTS_AHEAD == 1
    hook = Hook(id="h", execute_command="/bin/sleep", pass_arguments=(Argument("string", "0.5"),))
    runner.start(hook, Request(id="r0", method="POST", remote_addr="127.0.0.1:1"))
    # Nothing was ahead: answered without waiting (the loop has not even run the start yet).
    assert (runner.running, runner.ahead) == (0, 1)
    for number in range(1, 4):
        runner.start(hook, Request(id=f"r{number}", method="POST", remote_addr="127.0.0.1:1"))
        # One was ahead: this one waited for its own start. Every answered run has started but one at most.
        seen = (runner.running, runner.ahead)
        assert runner.ahead <= 1 and runner.running + runner.ahead == number + 1, seen
    deadline = time.monotonic() + 10
    while runner.ahead and time.monotonic() < deadline:
        gevent.sleep(0.01)
    assert runner.ahead == 0 and runner.running == 4  # the one ahead started too
    missing = Hook(id="m", execute_command="/nonexistent/cmd")
    for name in ("m1", "m2"):  # each returns: it never starts
        runner.start(missing, Request(id=name, method="POST", remote_addr="127.0.0.1:1"))
    assert runner.ahead <= 1
    runner.shutdown(grace=5)
    assert (runner.running, runner.ahead) == (0, 0)


#: Where a start runs (whether commands get a session of their own), and how it is held up 0.5 s: on the
#: loop, its greenlet held up before the start with the loop free; on a native thread, the start itself
#: blocking, as a start stuck behind the machine's load would be.
HELD_UP: dict[str, tuple[bool, Callable[[float], object]]] = {
    "late on the loop": (False, gevent.sleep),
    "slow on a thread": (True, time.sleep),
}


@pytest.mark.parametrize("how", list(HELD_UP))
def test_on_the_loop_a_background_run_whose_start_is_held_up_is_answered_after_start_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A lone push does not wait for its start; one behind it waits for its own, and a start that comes
    later than START_WAIT does not hold that push's answer longer: it is answered then, and the processes
    still start. So where the start's greenlet is held up while the loop goes on, and where starts run on a
    native thread (while commands get a session of their own: a terminal) and the start itself is slow.
    (On the loop itself a start holds the loop while it lasts, this wait included: the next test; the
    worker, which answers the push, waits its own START_WAIT once the owner has admitted the run:
    run/ownerclient.py, docs/run-state.md "The start on the loop".)"""
    on_thread, hold_up = HELD_UP[how]
    monkeypatch.setattr(greenruns, "own_session", lambda: on_thread)  # the choice, with a terminal or not
    real = executor.start_process

    def held_up_start(*args: Any) -> Any:
        hold_up(0.5)
        return real(*args)

    monkeypatch.setattr(executor, "start_process", held_up_start)
    runner = runner_for("greenlets")
    assert runner.start_wait == executor.START_WAIT < 0.25
    hook = Hook(id="h", execute_command="/bin/sleep", pass_arguments=(Argument("string", "0.3"),))
    began = time.monotonic()
    runner.start(hook, Request(id="r1", method="POST", remote_addr="127.0.0.1:1"))
    first = time.monotonic() - began
    runner.start(hook, Request(id="r2", method="POST", remote_addr="127.0.0.1:1"))
    second = time.monotonic() - began - first
    assert first < executor.START_WAIT <= second < 0.4, (first, second)  # waited, but not for the start
    assert runner.running == 0 and runner.ahead == 2  # both answered before their start
    deadline = time.monotonic() + 10
    while runner.running < 2 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    assert (runner.running, runner.ahead) == (2, 0)  # started all the same
    runner.shutdown(grace=5)
    assert runner.running == 0


def test_on_the_loop_a_start_runs_on_the_loops_thread_and_holds_the_loop_while_it_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where commands get no session of their own (no terminal), a run's start is not handed to a native
    thread: it runs in the run's greenlet on the loop's own thread, which waits for it (docs/run-state.md,
    "The start on the loop"); a start slower than START_WAIT (here 0.3 s) holds every greenlet of the loop,
    a push's answer included, as long."""
    monkeypatch.setattr(greenruns, "own_session", lambda: False)
    real = executor.start_process
    spans: list[tuple[float, float, int]] = []

    def slow_start(*args: Any) -> Any:
        began = time.monotonic()
        time.sleep(0.3)  # a blocking start, as an exec that waits for a core is
        process = real(*args)
        spans.append((began, time.monotonic(), threading.get_ident()))
        return process

    monkeypatch.setattr(executor, "start_process", slow_start)
    runner = runner_for("greenlets")
    with ticking() as ticks:
        gevent.sleep(0.05)
        hook = Hook(id="h", execute_command="/bin/true")
        assert finish("greenlets", runner.submit(hook, Request(id="r1", method="POST", remote_addr="::1"))).ok
    ((began, ended, thread),) = spans
    assert thread == threading.get_ident()  # the loop's thread: no hand-off
    assert [t for t in ticks if began < t < ended] == [], (began, ended, ticks)  # the loop waited for it
    assert any(t > ended for t in ticks)  # and went on after


def test_on_the_loop_a_run_waiting_under_the_global_cap_is_answered_at_once(tmp_path: Path) -> None:
    runner = runner_for("greenlets", max_concurrent=1)
    hook = Hook(id="h", execute_command="/bin/sleep", pass_arguments=(Argument("string", "0.5"),))
    runner.start(hook, Request(id="r1", method="POST", remote_addr="127.0.0.1:1"))
    started = time.monotonic()
    runner.start(hook, Request(id="r2", method="POST", remote_addr="127.0.0.1:1"))  # waits in the cap's line
    assert time.monotonic() - started < 0.3
    deadline = time.monotonic() + 10
    while runner.running == 0 and time.monotonic() < deadline:  # r1 was answered at once: none was ahead
        gevent.sleep(0.01)
    assert (runner.running, runner.queued) == (1, 1)
    runner.shutdown(grace=5)
    assert (runner.running, runner.queued) == (0, 0)


def test_a_start_runs_on_the_loop_unless_commands_get_a_session_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the loop's own thread where each command gets a process group alone (no terminal); on a native
    thread where each gets a session too, whose child leaves this process's scheduling group before its
    exec (docs/run-state.md, "The start on the loop")."""
    waits = GreenWaits()
    loop = threading.get_ident()
    monkeypatch.setattr(greenruns, "own_session", lambda: False)
    assert waits.start(threading.get_ident) == loop
    monkeypatch.setattr(greenruns, "own_session", lambda: True)
    assert waits.start(threading.get_ident) != loop


def test_offloaded_work_runs_on_native_threads_while_the_loop_goes_on() -> None:
    """Work handed off (GreenWaits.offload) blocks a native thread, never the loop: the work below waits
    for an event that only a greenlet on the loop sets, so it returns True only if the loop ran meanwhile."""
    waits = GreenWaits()
    release = threading.Event()
    loop_thread = threading.get_ident()

    def blocking(number: int) -> tuple[int, bool, int]:
        return number, release.wait(20), threading.get_ident()

    def releaser() -> None:
        gevent.sleep(0.01)
        release.set()

    gevent.spawn(releaser)
    tasks = [gevent.spawn(waits.offload, blocking, number) for number in range(3)]
    gevent.joinall(tasks, timeout=30, raise_error=True)
    results = [task.value for task in tasks]
    assert [number for number, _, _ in results] == [0, 1, 2]
    assert all(released for _, released, _ in results), results
    assert loop_thread not in {ident for _, _, ident in results}


def test_offloaded_work_raises_in_the_greenlet_that_waits_for_it() -> None:
    waits = GreenWaits()

    def fails(path: str) -> None:
        raise OSError(13, "Permission denied", path)

    with pytest.raises(OSError) as raised:
        waits.offload(fails, "/nowhere")
    assert (raised.value.errno, raised.value.filename) == (13, "/nowhere")
    assert waits.offload(lambda: "after") == "after"  # the thread that raised serves on


def test_offloaded_work_beyond_the_thread_limit_waits_for_a_thread() -> None:
    """More blocked tasks than OFFLOAD_THREADS: no more threads than that are started, and the tasks past
    the limit run once one is free."""
    from hookrunner.serve import greenruns

    waits = GreenWaits()
    release = threading.Event()
    started: list[int] = []
    lock = threading.Lock()

    def blocking() -> int:
        with lock:
            started.append(threading.get_ident())
        release.wait(20)
        return threading.get_ident()

    def releaser() -> None:
        while len(started) < greenruns.OFFLOAD_THREADS:
            gevent.sleep(0.005)
        release.set()

    count = greenruns.OFFLOAD_THREADS + 2
    gevent.spawn(releaser)
    tasks = [gevent.spawn(waits.offload, blocking) for _ in range(count)]
    gevent.joinall(tasks, timeout=30, raise_error=True)
    assert len(started) == count
    assert len({task.value for task in tasks}) <= greenruns.OFFLOAD_THREADS


def test_failed_offloaded_work_leaks_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """An error of offloaded work (an OSError) is the waiting greenlet's alone: gevent's own pool also
    printed its traceback to stderr, which a server must not."""
    waits = GreenWaits()

    def fails() -> None:
        raise FileNotFoundError(2, "No such file or directory", "/bad/interpreter")

    with pytest.raises(FileNotFoundError):
        waits.offload(fails)
    assert capfd.readouterr().err == ""


def test_offloaded_work_in_a_flood_lets_the_other_greenlets_run() -> None:
    """Greenlets that hand over task after task, each done at once, never hold the loop: a ticker on the
    loop keeps its turns throughout."""
    waits = GreenWaits()
    ticks: list[float] = []

    def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)

    def flood() -> int:
        return sum(waits.offload(int, "1") for _ in range(300))

    tick = gevent.spawn(ticker)
    try:
        gevent.sleep(0.02)
        started = time.monotonic()
        floods = [gevent.spawn(flood) for _ in range(16)]
        gevent.joinall(floods, timeout=60, raise_error=True)
        took = time.monotonic() - started
    finally:
        tick.kill()
    assert [f.value for f in floods] == [300] * 16
    during = [t for t in ticks if started <= t <= started + took]
    assert len(during) >= 2, (len(during), took)
    assert max(b - a for a, b in zip([started, *during], [*during, started + took], strict=False)) < 0.5


def test_a_forked_child_gets_offload_threads_of_its_own() -> None:
    """The parent's offload threads are not in a forked child (the run owner is forked from the master): the
    child's first offloaded task starts its own rather than waiting forever on the parent's queue."""
    waits = GreenWaits()
    assert waits.offload(int, "7") == 7  # the parent's pool, with a thread
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            gevent.reinit()
            with gevent.Timeout(10):
                status = 0 if waits.offload(int, "8") == 8 else 1
        finally:
            os._exit(status)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the child's offloaded task never ran")
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_second_loop_on_another_thread_has_offload_threads_of_its_own() -> None:
    """As gevent keeps a pool a hub: a loop on another thread offloads to threads of its own, and the first
    loop's pool goes on serving its own loop."""
    from hookrunner.serve import greenruns

    waits = GreenWaits()
    assert waits.offload(int, "1") == 1
    mine = greenruns._pools[id(gevent.get_hub())]
    results: list[object] = []

    def other_loop() -> None:
        hub = gevent.get_hub()
        try:
            results.append(GreenWaits().offload(int, "2"))
            results.append(greenruns._pools[id(hub)] is not mine)
        finally:
            hub.destroy(destroy_loop=True)

    thread = threading.Thread(target=other_loop)
    thread.start()
    thread.join(20)
    assert results == [2, True]
    assert greenruns._pools[id(gevent.get_hub())] is mine
    assert waits.offload(int, "3") == 3
