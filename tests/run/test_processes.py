"""A run's processes in /proc: named by pid and start time, found outside their group and session, ended
(TERM, then KILL after the grace); and the subreaper, which adopts orphans and reaps them without taking
the exit status of a command its Popen waits for."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hookrunner.run.processes import (
    ProcessId,
    ProcessTracker,
    _stat,
    end_previous_attempt,
    identify,
    is_running,
    previous_attempt,
    send,
)


def wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(identify(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return False


def test_a_process_is_named_by_pid_and_start_even_with_parentheses_in_its_name(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    shutil.copy("/bin/sleep", odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        time.sleep(0.1)
        stat = _stat(child.pid)
        assert stat is not None
        assert (stat.ppid, stat.pgid, stat.zombie) == (os.getpid(), os.getpgid(0), False)
        me = _stat(os.getpid())
        assert me is not None and stat.start >= me.start
        process = identify(child.pid)
        assert process == ProcessId(child.pid, stat.start) and is_running(process)
        # The same pid with another start time is another process: never taken for it, never signalled.
        impostor = ProcessId(child.pid, stat.start + 1)
        assert not is_running(impostor)
        assert not send(impostor, signal.SIGKILL)
        time.sleep(0.1)
        assert is_running(process)
        assert send(process, signal.SIGTERM)
        child.wait(timeout=5)
        assert identify(child.pid) is None and not is_running(process)
    finally:
        child.kill()
        child.wait()


# A previous attempt as a dead worker leaves it: a leader in a session of its own with a child in its group,
# and a grandchild that left for a session of its own (its pid printed). With "stubborn", all ignore TERM.
ATTEMPT = textwrap.dedent(
    """
    import os, signal, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        print(pid, flush=True)
        os._exit(0)
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    """
)


def previous(kind: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    leader = subprocess.Popen([sys.executable, "-c", ATTEMPT, kind], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    escaped = int(leader.stdout.readline())
    time.sleep(0.2)
    return leader, [leader.pid, escaped]


def test_what_still_runs_of_a_previous_attempt_is_found_and_ended(tmp_path: Path) -> None:
    leader, (leader_pid, escaped) = previous("plain")
    try:
        recorded = [identify(leader_pid), identify(escaped)]
        assert None not in recorded
        found = previous_attempt(recorded)  # type: ignore[arg-type]
        group = [p.pid for p in found if p.pid not in (leader_pid, escaped)]
        # The leader, the escaped one (recorded), and the group's child (found by its group).
        assert {leader_pid, escaped} <= {p.pid for p in found} and len(group) == 1
        began = time.monotonic()
        ended = end_previous_attempt(recorded, grace=5.0)  # type: ignore[arg-type]
        assert sorted(p.pid for p in ended) == sorted(p.pid for p in found)
        assert time.monotonic() - began < 2.0  # TERM was enough: no wait for the grace
        leader.wait(timeout=5)
        assert wait_gone([escaped, *group])
    finally:
        leader.kill()
        leader.wait()
        leader.stdout.close()  # type: ignore[union-attr]


def test_a_previous_attempt_that_ignores_term_is_killed_after_the_grace() -> None:
    leader, pids = previous("stubborn")
    try:
        recorded = [identify(pid) for pid in pids]
        began = time.monotonic()
        assert end_previous_attempt(recorded, grace=0.5)  # type: ignore[arg-type]
        took = time.monotonic() - began
        assert 0.5 <= took < 3.0, took
        assert leader.wait(timeout=5) == -signal.SIGKILL
        assert wait_gone(pids)
    finally:
        leader.kill()
        leader.wait()
        leader.stdout.close()  # type: ignore[union-attr]


SESSION_REUSED = """
import json, os, sys, time
from hookrunner.run.processes import identify, previous_attempt
head = identify(os.getpid())  # the session's and group's head, as a recorded leader of that pid would be
if os.fork():
    os._exit(0)  # the head exits: its pid still names the session and the group of the process left
while os.path.exists(f"/proc/{head.pid}"):  # until the test has reaped it
    time.sleep(0.01)
if sys.argv[1] == "group":
    os.setpgid(0, 0)  # a group of its own: in the dead head's session only
print(json.dumps([p.pid for p in previous_attempt([head])]), os.getpid(), flush=True)
"""


@pytest.mark.parametrize("kind", ["session", "group"])
def test_a_recorded_leader_pid_that_names_our_own_session_or_group_takes_nothing(kind: str) -> None:
    # A server started by a process that made a session (or group) and has exited since (a login shell,
    # `setsid sh -c 'hookrunner &'`) runs in a session whose id is a free pid: a dead previous attempt's
    # leader may have had it. That session is the server's and, without a terminal, its commands': none of
    # it is the previous attempt's (the server would end itself).
    head = subprocess.Popen(
        [sys.executable, "-c", SESSION_REUSED, kind], stdout=subprocess.PIPE, start_new_session=True
    )
    assert head.stdout is not None
    head.wait(timeout=10)
    try:
        found, me = head.stdout.readline().split()
        assert json.loads(found) == [], (found, me)
    finally:
        head.stdout.close()


def test_a_recorded_pid_now_held_by_another_process_is_left_alone() -> None:
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        now = identify(other.pid)
        assert now is not None
        # Recorded for an attempt whose leader had this pid before: it started at another time.
        assert previous_attempt([ProcessId(other.pid, now.start - 1)]) == []
        assert end_previous_attempt([ProcessId(other.pid, now.start - 1)], grace=0.1) == []
        assert is_running(now)
    finally:
        other.kill()
        other.wait()


# In a process of its own (a subreaper adopts every orphan below it, which pytest must not): a run's leader
# double-forks an orphan, and each waits for a gate file of its own to exit (the leader with status 3). The
# script waits for each step it checks (bounded), so a slow machine changes only how long it takes.
SUBREAPER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from hookrunner.run.processes import ProcessTracker, _subtree
    gates = sys.argv[1]
    code = (
        "import os, sys, time\\n"
        "def wait(gate):\\n"
        "    while not os.path.exists(os.path.join(sys.argv[1], gate)): time.sleep(0.01)\\n"
        "if os.fork() == 0:\\n"
        "    if os.fork() == 0:\\n"
        "        wait('orphan'); os._exit(0)\\n"
        "    os._exit(0)\\n"
        "wait('leader'); sys.exit(3)\\n"
    )

    def until(check):
        deadline = time.monotonic() + 10
        while not check() and time.monotonic() < deadline:
            time.sleep(0.02)

    def open_gate(name):
        open(os.path.join(gates, name), "w").close()

    tracker = ProcessTracker(adopt_orphans=True)
    spawn = lambda: subprocess.Popen(
        [sys.executable, "-c", code, gates], stdout=subprocess.PIPE, start_new_session=True
    )
    process, run = tracker.start(spawn, None)
    me = os.getpid()
    others = lambda: [p for p, s in _subtree(me).items() if s.ppid == me and p != process.pid]
    until(others)
    adopted = others()
    until(lambda: set(adopted) <= {m.pid for m in run.members})
    members = sorted(m.pid for m in run.members)
    open_gate("orphan")
    until(lambda: not set(adopted) & set(_subtree(me)))  # exited, and reaped by the poll
    zombies = [p for p, s in _subtree(me).items() if s.zombie and s.ppid == me and p != process.pid]
    open_gate("leader")
    code = process.wait(timeout=10)
    tracker.done(run)
    print(json.dumps({"adopted": adopted, "members": members, "zombies": zombies, "status": code}))
    """
)


def test_the_subreaper_adopts_orphans_reaps_them_and_keeps_its_commands_exit_status(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SUBREAPER, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert len(seen["adopted"]) == 1, seen  # the orphan came to the subreaper, not to init
    assert seen["adopted"][0] in seen["members"], seen  # and was found to be the run's
    assert seen["zombies"] == [], seen
    assert seen["status"] == 3, seen


def test_a_stopped_command_handles_the_timeouts_term_at_once() -> None:
    # A command in a process group of the server's session is stopped by a SIGTSTP (its group is not
    # orphaned); one stopped with a TERM handler ran it only at the KILL after the grace, and was killed.
    tracker = ProcessTracker()
    script = "trap 'exit 7' TERM; kill -TSTP $$; sleep 30"

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, process_group=0)

    process, run = tracker.start(spawn, None)
    try:

        def state() -> str:
            return Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

        deadline = time.monotonic() + 5
        while state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state() == "T"  # stopped
        began = time.monotonic()
        tracker.end([run], 5.0, time.sleep)
        took = time.monotonic() - began
        assert process.wait(timeout=5) == 7 and took < 2.0, (process.returncode, took)
    finally:
        process.kill()
        process.wait()
        tracker.done(run)


def test_runs_one_after_another_share_one_poll_thread_that_still_finds_their_processes() -> None:
    import threading

    from hookrunner.run.processes import ProcessTracker

    def pollers() -> set[threading.Thread]:  # the threads themselves, kept: an ident can be reused
        return {t for t in threading.enumerate() if t.name == "run-processes"}

    others = pollers()  # other trackers' (earlier tests')
    tracker = ProcessTracker()
    code = "import subprocess, sys, time; subprocess.Popen(['sleep', '1']); time.sleep(0.5)"
    mine = []
    for _ in range(3):
        process, run = tracker.start(lambda: subprocess.Popen([sys.executable, "-c", code]), None)
        process.wait()
        # Its child (`sleep`) was found by the poll while the run went on, under a thread of the same name.
        mine.append(pollers() - others)
        assert len(run.members) == 2, run.members
        tracker.done(run)
        time.sleep(0.1)  # the poll is idle between runs
    assert len(mine[0]) == 1 and mine[0] == mine[1] == mine[2]


def test_which_run_a_process_belongs_to() -> None:
    from hookrunner.run.processes import RunProcesses, _attribute
    from hookrunner.run.processes import _Stat as S

    me = 100
    found: list[ProcessId] = []
    a = RunProcesses(ProcessId(200, 1000), "pipe:[1]", found.append)
    snapshot = {
        200: S(200, me, 200, 200, 1000, False),  # a's leader
        201: S(201, 200, 200, 200, 1001, False),  # in its group
        202: S(202, 201, 202, 202, 1002, False),  # left the session, child of a member: the run's
        203: S(203, me, 203, 203, 1003, False),  # an orphan the worker adopted, newer than a: a's
        150: S(150, me, 150, 150, 900, False),  # adopted before a started: not a's
        204: S(204, 202, 202, 202, 1004, False),  # a zombie is nobody's
    }
    snapshot[204] = S(204, 202, 202, 202, 1004, True)
    _attribute(snapshot, [a], me, frozenset(), False)
    assert {p.pid for p in a.members} == {200, 201, 202, 203}
    # Told of those outside the leader's group only (the journal records them).
    assert sorted(p.pid for p in found) == [202, 203]

    # Without adopting orphans, an orphan is nobody's; in a group or session a finished run's process
    # heads (a daemon it left), nobody's either; with two running runs older than it, it cannot be told.
    orphan = {203: S(203, me, 203, 777, 1003, False)}
    for retired, runs in ((None, 1), (frozenset({777}), 1), (frozenset(), 2)):
        one = RunProcesses(ProcessId(200, 1000), "")
        two = RunProcesses(ProcessId(300, 999), "")
        _attribute(orphan, [one, two][:runs], me, retired, False)
        assert one.members == {one.leader} and two.members == {two.leader}, (retired, runs)


def test_a_process_is_nobodys_by_the_session_commands_share_with_the_server() -> None:
    # Without a terminal, commands head a process group only and stay in the server's session: a process in
    # that session is not a run's by it, even were a run's leader given the session's id (a dead leader's).
    from hookrunner.run.processes import RunProcesses, _attribute
    from hookrunner.run.processes import _Stat as S

    me, session = 100, os.getsid(0)
    run = RunProcesses(ProcessId(session, 1000), "")
    elsewhere = {301: S(301, me, 301, session, 1001, False)}  # another group, the server's session
    _attribute(elsewhere, [run], me, None, False)
    assert run.members == {run.leader}
    # A process in the run's own session (a terminal's case: the leader heads one) is the run's.
    leader = RunProcesses(ProcessId(400, 1000), "")
    _attribute({401: S(401, me, 401, 400, 1001, False)}, [leader], me, None, False)
    assert {p.pid for p in leader.members} == {400, 401}


def test_holders_of_a_runs_output_are_found_listing_each_process_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """By the output pipe (a stop ends runs so): each process's descriptors are read once, not once per
    run, so a stop with thousands of runs does not read /proc millions of times; the first run wins."""
    from hookrunner.run import processes
    from hookrunner.run.processes import RunProcesses, _attribute
    from hookrunner.run.processes import _Stat as S

    me = 100
    runs = [RunProcesses(ProcessId(1000 + n, 5000 + n), f"pipe:[{n}]") for n in range(3000)]
    holders = {
        900: {"pipe:[2999]", "pipe:[77]"},  # holds two runs' output: the first of them in order
        901: {"pipe:[5]"},
        902: {"pipe:[123456]"},  # not any run's
    }
    listed: list[int] = []

    def pipes_held(pid: int) -> set[str]:
        listed.append(pid)
        return holders.get(pid, set())

    monkeypatch.setattr(processes, "pipes_held", pipes_held)
    snapshot = {pid: S(pid, 1, pid, pid, 10, False) for pid in holders}
    _attribute(snapshot, runs, me, None, True)
    assert sorted(listed) == [900, 901, 902]
    assert ProcessId(900, 10) in runs[77].members and ProcessId(900, 10) not in runs[2999].members
    assert ProcessId(901, 10) in runs[5].members
    assert all(ProcessId(902, 10) not in run.members for run in runs)


def test_pipes_held_reads_this_process_descriptors() -> None:
    from hookrunner.run.processes import pipes_held

    read_end, write_end = os.pipe()
    try:
        assert f"pipe:[{os.fstat(read_end).st_ino}]" in pipes_held(os.getpid())
    finally:
        os.close(read_end)
        os.close(write_end)


# In a process of its own: the collector counts what every thread left, and by now the test process has the
# threads and stores of earlier tests, whose garbage can come due while this one runs.
NO_CYCLE = textwrap.dedent(
    """
    import gc, json
    from hookrunner.run.processes import ProcessId, RunProcesses, _attribute
    from hookrunner.run.processes import _Stat as S

    me = 100
    runs = [RunProcesses(ProcessId(200 + 100 * n, 1000 + n), f"pipe:[{n}]") for n in range(3)]
    snapshot = {
        200: S(200, me, 200, 200, 1000, False),
        201: S(201, 200, 200, 200, 1001, False),
        210: S(210, 201, 210, 210, 1005, False),  # found through its parent
        203: S(203, me, 203, 203, 1006, False),
    }
    gc.collect()
    gc.disable()
    _attribute(snapshot, runs, me, frozenset(), False)
    unreachable = gc.collect()
    print(json.dumps({"members": sorted(p.pid for p in runs[0].members), "unreachable": unreachable}))
    """
)


def test_finding_owners_leaves_no_garbage_cycle() -> None:
    """A poll's snapshot, runs and indexes are freed when the poll is done with them, not when the cyclic
    collector comes by (rarely on the gevent worker: 16 MiB of them were left after a load)."""
    out = subprocess.run([sys.executable, "-c", NO_CYCLE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["members"] == [200, 201, 210]
    assert seen["unreachable"] == 0
