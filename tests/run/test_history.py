"""The run history's worker side: a record per run, told as events by the command runner (every kind and
outcome), put together by the store; secrets (variable values, file contents) never in an event."""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Hook, Limits
from hookrunner.hooks.request import Request
from hookrunner.run.executor import CommandRunner
from hookrunner.run.history import Recorder, classify, output_fields
from hookrunner.state.historystore import HistoryStore
from hookrunner.state.journal import Journal, RunSpec
from hookrunner.state.slots import Busy


class Collected:
    """A sink that keeps the events and applies them to an in-memory store."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.store = HistoryStore("", keep=100)
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)
            self.store.apply(json.loads(json.dumps(event)))  # what crosses the feed: JSON


def python_hook(hook_id: str, code: str, **extra: Any) -> Hook:
    return Hook(
        id=hook_id,
        execute_command=sys.executable,
        pass_arguments=(Argument("string", "-c"), Argument("string", code)),
        **extra,
    )


def req(rid: str, **payload: object) -> Request:
    return Request(id=rid, method="POST", remote_addr="127.0.0.1:1", payload=dict(payload), body=b"")


@pytest.fixture
def runner() -> tuple[CommandRunner, Collected]:
    sink = Collected()
    runner = CommandRunner(command_timeout=0.0)
    runner.history = Recorder(sink, output_limit=16)
    return runner, sink


def wait(future: Future[Any]) -> None:
    future.result(timeout=20)
    time.sleep(0.05)  # done callbacks of the other requests sharing the run


@pytest.mark.parametrize(
    ("error", "outcome", "code", "sig"),
    [
        (None, "ok", 0, None),
        ("exit status 3", "failed", 3, None),
        ("signal: killed", "failed", None, "killed"),
        ("command timed out after 1s (signal: terminated)", "timed_out", None, "terminated"),
        ("not started: hookrunner is shutting down", "cancelled", None, None),
        ("exec: \"nope\": executable file not found in $PATH", "failed", None, None),
    ],
)
def test_classify_reads_the_executors_error_text(error: str | None, outcome: str, code: int | None, sig: str | None) -> None:
    fields = classify(error)
    assert (fields["outcome"], fields["exit_code"], fields["signal"]) == (outcome, code, sig)


def test_output_keeps_the_last_bytes_and_the_whole_size() -> None:
    fields = output_fields(b"0123456789", 4)
    assert base64.b64decode(fields["output"]) == b"6789"
    assert (fields["output_size"], fields["output_truncated"]) == (10, True)
    off = output_fields(b"0123456789", 0)
    assert (off["output"], off["output_size"], off["output_truncated"]) == ("", 10, True)


def test_ok_and_failed_runs_with_argv_env_names_and_sizes_only(runner: tuple[CommandRunner, Collected]) -> None:
    run, sink = runner
    hook = Hook(
        id="h",
        execute_command=sys.executable,
        pass_arguments=(Argument("string", "-c"), Argument("string", "import sys; print('x' * 40); sys.exit(4)")),
        pass_environment=(Argument("payload", "token", envname="TOKEN"),),
        pass_file=(Argument("payload", "key", envname="KEY_FILE"),),
    )
    wait(run.submit(hook, req("r1", token="s3cr3t-value", key="PRIVATE-KEY-CONTENTS")))
    record = sink.store.run("r1")
    assert record is not None
    assert (record["kind"], record["outcome"], record["exit_code"], record["detail"]) == ("immediate", "failed", 4, "exit status 4")
    assert record["argv"] == [sys.executable, "-c", "import sys; print('x' * 40); sys.exit(4)"]
    assert record["env"] == [["TOKEN", 12]]
    assert record["files"] == [["KEY_FILE", 20]]
    assert (bytes(record["output"]), record["output_size"], record["output_truncated"]) == (b"x" * 15 + b"\n", 41, True)
    assert record["duration"] is not None and record["duration"] >= 0
    assert record["started_at"] >= record["accepted_at"]
    every_event = json.dumps(sink.events)
    assert "s3cr3t-value" not in every_event and "PRIVATE-KEY-CONTENTS" not in every_event
    wait(run.submit(python_hook("h2", "print('fine')"), req("r2")))
    assert sink.store.run("r2")["outcome"] == "ok"  # type: ignore[index]


def test_timed_out_and_killed_by_a_signal(runner: tuple[CommandRunner, Collected]) -> None:
    run, sink = runner
    run.kill_grace = 0.5
    wait(run.submit(python_hook("t", "import time; time.sleep(30)", command_timeout=0.3), req("t1")))
    wait(run.submit(python_hook("k", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), req("k1")))
    timed = sink.store.run("t1")
    killed = sink.store.run("k1")
    assert timed is not None and killed is not None
    assert timed["outcome"] == "timed_out" and timed["detail"].startswith("command timed out after 0.3s")
    assert (killed["outcome"], killed["signal"], killed["exit_code"]) == ("failed", "killed", None)


def test_queued_coalesced_and_refused(runner: tuple[CommandRunner, Collected], tmp_path: Any) -> None:
    run, sink = runner
    gate = tmp_path / "gate"
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)"
    hook = python_hook("c", code, limits=Limits(max_concurrency=1, coalesce=True))
    first = run.submit(hook, req("c1"))
    second = run.submit(hook, req("c2"))  # queued
    third = run.submit(hook, req("c3"))  # coalesced into the queued run: c3's values run, c2's never
    busy = python_hook("b", code, limits=Limits(max_concurrency=1, max_queue=0))
    blocker = run.submit(busy, req("b1"))
    with pytest.raises(Busy):
        run.submit(busy, req("b2"))
    gate.touch()
    for future in (first, second, third, blocker):
        wait(future)
    records = {r["id"]: r for r in sink.store.runs(limit=10)}
    assert {k: (r["kind"], r["outcome"]) for k, r in records.items()} == {
        "c1": ("immediate", "ok"),
        "c2": ("queued", "ok"),
        "c3": ("coalesced", "ok"),
        "b1": ("immediate", "ok"),
        "b2": ("refused", "refused"),
    }
    assert records["c2"]["started_at"] is None and records["c2"]["detail"].startswith("coalesced")
    assert records["c3"]["started_at"] is not None
    assert "full queue" in records["b2"]["detail"]


def test_runs_cut_short_by_the_stop_are_cancelled(runner: tuple[CommandRunner, Collected]) -> None:
    run, sink = runner
    hook = python_hook("s", "import time; time.sleep(30)", limits=Limits(max_concurrency=1, max_queue=5))
    run.submit(hook, req("s1"))
    run.submit(hook, req("s2"))
    assert _wait_for(lambda: (sink.store.run("s1") or {}).get("outcome") == "running")
    run.shutdown(0.2)
    assert {r["id"]: r["outcome"] for r in sink.store.runs()} == {"s1": "cancelled", "s2": "cancelled"}
    assert "cancelled" in sink.store.run("s2")["detail"]  # type: ignore[index]


def test_replayed_runs_and_refused_replays(runner: tuple[CommandRunner, Collected], tmp_path: Any) -> None:
    run, sink = runner
    journal = Journal(str(tmp_path / "state"), "old-boot")
    spec = RunSpec("h", "old1", sys.executable, (sys.executable, "-c", "print('again')"), (), (), "")
    gone = RunSpec("nohook", "old2", "/bin/true", ("/bin/true",), (), (), "")
    journal.record(spec)
    journal.record(gone)
    journal.close()
    # The earlier start's records, as its worker sent them (a store of another boot), left running.
    previous = HistoryStore(str(tmp_path / "state" / "journal.sqlite3"))
    previous.apply({"event": "run", "key": "k-old", "id": "old1", "hook": "h", "outcome": "running"})
    previous.close()
    sink.store = HistoryStore(str(tmp_path / "state" / "journal.sqlite3"))
    assert sink.store.run("old1")["outcome"] == "cancelled"  # type: ignore[index]
    hooks = {"h": python_hook("h", "print('again')")}
    run.find = hooks.get
    run.journal = Journal(str(tmp_path / "state"), "new-boot")
    # The left-overs are the run state's first claims: both claimed, the one whose hook is gone refused.
    assert run.claim_now() == 2
    assert _wait_for(lambda: (sink.store.run("old1") or {}).get("outcome") == "ok")
    runs = [(r["id"], r["kind"], r["outcome"]) for r in sink.store.runs()]
    assert ("old1", "replayed", "ok") in runs
    assert ("old1", "immediate", "replayed") in runs  # the earlier start's record of it
    assert ("old2", "refused", "refused") in runs
    assert sink.store.run("old2")["detail"] == "not replayed: no such hook"  # type: ignore[index]


def test_runs_without_a_history() -> None:
    """Without -admin-addr there is no recorder, and the run path does without one."""
    run = CommandRunner()
    assert run.history is None
    assert run.submit(python_hook("n", "pass"), req("n1")).result(timeout=20).ok


def _wait_for(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


def test_a_running_runs_output_reaches_the_history_before_it_ends(tmp_path: Any) -> None:
    """The ticket hears the chunks as they are read (beside the caller's on_output), and they reach the
    store while the command still runs; its final event keeps the tail as before."""
    sink = Collected()
    run = CommandRunner(command_timeout=0.0)
    run.history = Recorder(sink, output_limit=16)
    gate = tmp_path / "gate"
    code = f"import os, time\nprint('first line', flush=True)\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\nprint('last line')"
    heard: list[bytes] = []
    future = run.submit(python_hook("live", code), req("l1"), on_output=heard.append)

    def kept() -> bytes:
        record = sink.store.run("l1")
        return b"" if record is None else bytes(record["output"])

    deadline = time.monotonic() + 10
    while kept() != b"first line\n" and time.monotonic() < deadline:
        time.sleep(0.02)
    record = sink.store.run("l1")
    assert record is not None and record["outcome"] == "running" and bytes(record["output"]) == b"first line\n"
    gate.touch()
    wait(future)
    record = sink.store.run("l1")
    assert record is not None and record["outcome"] == "ok"
    assert (bytes(record["output"]), record["output_size"]) == (b" line\nlast line\n", 21)
    assert b"".join(heard) == b"first line\nlast line\n"
    assert any(e["event"] == "output" for e in sink.events)
