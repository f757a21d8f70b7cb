"""Per-hook limits: start, queue, coalesce into the newest request, reject when full; a global cap."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Limits
from hookrunner.run.scheduler import Busy, Scheduler


class Gate:
    """Work that blocks until released, recording which request it ran for."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.ran: list[str] = []
        self.lock = threading.Lock()

    def work(self, name: str) -> Callable[[], str]:
        def run() -> str:
            self.release.wait(5)
            with self.lock:
                self.ran.append(name)
            return name

        return run


def wait_for(predicate: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_unlimited_starts_everything() -> None:
    scheduler: Scheduler[str] = Scheduler()
    gate = Gate()
    futures = [scheduler.submit("h", Limits(), gate.work(str(i)))[0] for i in range(5)]
    wait_for(lambda: scheduler.running == 5)
    gate.release.set()
    assert sorted(f.result(5) for f in futures) == ["0", "1", "2", "3", "4"]


def test_queue_then_reject() -> None:
    scheduler: Scheduler[str] = Scheduler()
    gate = Gate()
    limits = Limits(max_concurrency=1, max_queue=2, retry_after=7)
    first, how1 = scheduler.submit("h", limits, gate.work("a"))
    second, how2 = scheduler.submit("h", limits, gate.work("b"))
    third, how3 = scheduler.submit("h", limits, gate.work("c"))
    assert (how1, how2, how3) == ("started", "queued", "queued")
    assert scheduler.queued == 2
    with pytest.raises(Busy) as busy:
        scheduler.submit("h", limits, gate.work("d"))
    assert busy.value.retry_after == 7
    # another hook has its own gate
    other, how = scheduler.submit("other", limits, gate.work("x"))
    assert how == "started"
    gate.release.set()
    assert [first.result(5), second.result(5), third.result(5), other.result(5)] == ["a", "b", "c", "x"]
    assert gate.ran.index("b") < gate.ran.index("c")  # the queue is FIFO


def test_reject_at_once_without_a_queue() -> None:
    scheduler: Scheduler[str] = Scheduler()
    gate = Gate()
    scheduler.submit("h", Limits(max_concurrency=1), gate.work("a"))
    with pytest.raises(Busy):
        scheduler.submit("h", Limits(max_concurrency=1), gate.work("b"))
    gate.release.set()


def test_coalesce_runs_once_more_with_the_newest_request() -> None:
    scheduler: Scheduler[str] = Scheduler()
    gate = Gate()
    limits = Limits(max_concurrency=1, coalesce=True)
    running, _ = scheduler.submit("h", limits, gate.work("push-1"))
    outcomes = [scheduler.submit("h", limits, gate.work(f"push-{i}")) for i in range(2, 12)]
    assert [how for _, how in outcomes] == ["queued"] + ["coalesced"] * 9
    assert len({id(f) for f, _ in outcomes}) == 1  # one shared run
    gate.release.set()
    assert running.result(5) == "push-1"
    assert outcomes[0][0].result(5) == "push-11"  # the queued run saw the latest push
    wait_for(lambda: scheduler.wait_idle(0))
    assert gate.ran == ["push-1", "push-11"]


def test_coalesce_by_keeps_one_waiting_run_per_value_and_the_queue_bounds_the_values() -> None:
    scheduler: Scheduler[str] = Scheduler()
    gate = Gate()
    limits = Limits(max_concurrency=1, max_queue=2, coalesce=True, coalesce_by=Argument("payload", "ref"))
    running, _ = scheduler.submit("h", limits, gate.work("dev-1"), group="dev")
    pushes = [("dev", "dev-2"), ("main", "main-1"), ("dev", "dev-3"), ("main", "main-2"), ("dev", "dev-4")]
    outcomes = [scheduler.submit("h", limits, gate.work(work), group=group) for group, work in pushes]
    assert [how for _, how in outcomes] == ["queued", "queued", "coalesced", "coalesced", "coalesced"]
    with pytest.raises(Busy):  # a third value finds the queue full (max-queue 2)
        scheduler.submit("h", limits, gate.work("tag-1"), group="v1.0")
    gate.release.set()
    assert running.result(5) == "dev-1"
    assert outcomes[0][0].result(5) == "dev-4"  # each value's waiting run saw its newest push
    assert outcomes[1][0].result(5) == "main-2"
    wait_for(lambda: scheduler.wait_idle(0))
    assert gate.ran == ["dev-1", "dev-4", "main-2"]  # in the order their values first waited


def test_global_cap_makes_runs_wait() -> None:
    scheduler: Scheduler[str] = Scheduler(max_running=2)
    gate = Gate()
    futures = [scheduler.submit(f"h{i}", Limits(), gate.work(str(i)))[0] for i in range(4)]
    wait_for(lambda: scheduler.queued == 2)
    assert scheduler.running == 2
    gate.release.set()
    assert sorted(f.result(5) for f in futures) == ["0", "1", "2", "3"]
    assert scheduler.wait_idle(5)


def command_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("command"))


def test_runs_past_the_global_cap_wait_in_line_without_a_thread_each() -> None:
    before = command_threads()
    scheduler: Scheduler[str] = Scheduler(max_running=1)
    gate = Gate()
    futures = [scheduler.submit(f"h{i % 7}", Limits(), gate.work(str(i)))[0] for i in range(300)]
    assert (scheduler.running, scheduler.queued) == (1, 299)
    assert command_threads() - before <= 1  # the other 299 hold no thread
    gate.release.set()
    assert [f.result(5) for f in futures] == [str(i) for i in range(300)]
    assert gate.ran == [str(i) for i in range(300)]  # one at a time, first in, first out
    assert scheduler.wait_idle(5)
    assert (scheduler.running, scheduler.queued) == (0, 0)


def test_a_hooks_next_queued_run_joins_the_global_line_at_its_end() -> None:
    scheduler: Scheduler[str] = Scheduler(max_running=1)
    gate = Gate()
    one = Limits(max_concurrency=1, max_queue=5)
    first, _ = scheduler.submit("a", one, gate.work("a1"))
    wait_for(lambda: scheduler.running == 1)
    second, how = scheduler.submit("a", one, gate.work("a2"))  # behind a1, by the hook's own limit
    assert how == "queued"
    other, how = scheduler.submit("b", Limits(), gate.work("b1"))  # behind a1, by the global cap
    assert how == "started"
    assert scheduler.queued == 2
    gate.release.set()
    assert [f.result(5) for f in (first, second, other)] == ["a1", "a2", "b1"]
    assert gate.ran == ["a1", "b1", "a2"]


def test_a_run_that_gets_no_thread_fails_and_gives_its_place_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    # The process is out of threads once (Thread.start raises, as CPython does then). Meanwhile, another
    # run has joined the line behind the failing one under the cap of 1: it must get the slot and run.
    scheduler: Scheduler[str] = Scheduler(max_running=1)
    real_start = threading.Thread.start
    later: list[Future[str]] = []

    def start_once_failing(thread: threading.Thread) -> None:
        if not later:
            later.append(scheduler.submit("b", Limits(), lambda: "b ran")[0])
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        scheduler.submit("a", Limits(), lambda: "a ran")
    assert later[0].result(5) == "b ran"
    assert scheduler.submit("a", Limits(), lambda: "a again")[0].result(5) == "a again"
    assert scheduler.wait_idle(5)
    assert (scheduler.running, scheduler.queued) == (0, 0)


def test_errors_reach_the_future() -> None:
    scheduler: Scheduler[str] = Scheduler()

    def boom() -> str:
        raise RuntimeError("boom")

    future, _ = scheduler.submit("h", Limits(), boom)
    with pytest.raises(RuntimeError, match="boom"):
        future.result(5)


def test_command_threads_are_reused_then_exit_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    import hookrunner.run.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "IDLE_THREAD_SECONDS", 0.3)
    scheduler: Scheduler[int] = Scheduler()
    first = scheduler.submit("a", Limits(), threading.get_ident)[0].result(5)
    wait_for(lambda: scheduler._idle_threads == 1)
    # The next run, even for another hook, goes to the waiting thread instead of a new one.
    assert scheduler.submit("b", Limits(), threading.get_ident)[0].result(5) == first
    assert scheduler.wait_idle(5)
    wait_for(lambda: scheduler._idle_threads == 0)  # and it exits once idle for long enough
    assert not any(t.ident == first for t in threading.enumerate())
