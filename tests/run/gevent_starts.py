"""Many short runs started at once by the run owner's runner as it runs with -state-url, in a process of its
own for tests/run/test_processes_offload.py: gevent's patching applied first, as serve/ownerprocess.py
applies it, then a CommandRunner on GreenWaits whose tracker polls from the loop, each process started on
the loop (`loop`) or, as while commands get a session of their own, on a native thread (`thread`). argv:
the command, how many runs, how many at once, the seconds one run may take, where starts run. Prints
`ended E of N, stuck S, zombies Z` (a run stuck: not ended within its seconds; zombies: children of this
process still unreaped 3 s after the runs, such as the orphans a command left, which this process adopts
and its tracker's poll must reap) and exits 1 if any is stuck or a zombie."""

from __future__ import annotations

import os
import sys
import time

from hookrunner.serve.ownerprocess import _patch_for_the_network

_patch_for_the_network()

import gevent  # noqa: E402 - after the patching, as in the owner
import gevent.pool  # noqa: E402

from hookrunner.hooks.model import Hook  # noqa: E402
from hookrunner.hooks.request import Request  # noqa: E402
from hookrunner.ops.log import log  # noqa: E402
from hookrunner.run.executor import CommandRunner  # noqa: E402
from hookrunner.run.prepare import prepare  # noqa: E402
from hookrunner.run.processes import _children, _stat  # noqa: E402
from hookrunner.serve import greenruns  # noqa: E402
from hookrunner.serve.greenruns import GreenWaits  # noqa: E402


def main() -> int:
    command, runs, at_once, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    # The start's choice only, whether or not this process has a terminal (spawn.py's own_session, which
    # decides whether each child also heads a session, is left alone).
    on_thread = sys.argv[5] == "thread"
    greenruns.own_session = lambda: on_thread
    log.enabled = False  # a few lines a run, thousands of runs
    runner = CommandRunner(adopt_orphans=True)
    runner.use(GreenWaits())
    hook = Hook(id="quick", execute_command=command)
    ended = stuck = 0

    def one(n: int) -> None:
        nonlocal ended, stuck
        spec = prepare(hook, Request(id=f"r{n}", method="POST", remote_addr="127.0.0.1:1"))
        try:
            with gevent.Timeout(seconds):
                result = runner.execute(hook, spec)
        except gevent.Timeout:
            stuck += 1
            return
        assert result.ok, result
        ended += 1

    pool = gevent.pool.Pool(at_once)
    for n in range(runs):
        pool.spawn(one, n)
    pool.join()
    deadline = time.monotonic() + 3.0
    while (zombies := _zombie_children()) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    print(f"ended {ended} of {runs}, stuck {stuck}, zombies {len(zombies)}", flush=True)
    return 1 if stuck or zombies else 0


def _zombie_children() -> list[int]:
    """This process's children that have exited and are not reaped yet."""
    children = _children(os.getpid()) or []
    return [pid for pid in children if (stat := _stat(pid)) is not None and stat.zombie]


if __name__ == "__main__":
    os._exit(main())  # a stuck start's native thread is never let go: no waiting for it at exit
