"""psycopg waits cooperatively under gevent (issue 33 item 1): with gevent's monkey patching, a query that waits
on the server lets the loop's other greenlets run. Measured in a child process of the installed artefact's
Python (scripts/test installs the wheel with its `postgres` extra), against the tests' throwaway PostgreSQL: one
greenlet runs `SELECT pg_sleep(1)` while another ticks every 10 ms, and the largest gap between ticks is the
longest the loop was held. The same child without the patch shows that the measure sees a blocked loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Every child: `patched` applies gevent's monkey patching before psycopg is imported, as a gevent process that
#: talks to PostgreSQL must (psycopg chooses its wait function when imported); `measured(work)` runs `work` in
#: a greenlet while another ticks every 10 ms, and returns the largest gap between ticks with work's answer.
MEASURE = r"""
import json, sys, time
if sys.argv[2] == "patched":
    from gevent import monkey
    monkey.patch_all()
import gevent

gaps = []
done = False

def ticker():
    last = time.monotonic()
    while not done:
        gevent.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now

def measured(work):
    global done
    tick = gevent.spawn(ticker)
    gevent.sleep(0.05)
    started = time.monotonic()
    answer = gevent.spawn(work).get()
    elapsed = time.monotonic() - started
    done = True
    tick.join()
    return {"max_gap": max(gaps), "ticks": len(gaps), "elapsed": elapsed, **answer}
"""

#: psycopg alone: a query that waits 1 s on the server.
CHILD = (
    MEASURE
    + r"""
import psycopg
import psycopg.waiting

def query():
    with psycopg.connect(sys.argv[1]) as conn:
        conn.execute("SELECT pg_sleep(1)")
    return {"wait": psycopg.waiting.wait.__name__, "psycopg": psycopg.__version__}

print(json.dumps(measured(query)))
"""
)

#: PostgresState itself, as the run owner will call it on its loop: its waiter waits 1 s for work (LISTEN, a
#: poke pipe, select), then 20 admissions and counts through its lent connections.
STATE_CHILD = (
    MEASURE
    + r"""
from hookrunner.hooks.model import Limits
from hookrunner.state.model import RunSpec
from hookrunner.state.postgres import PostgresState

state = PostgresState(sys.argv[1], "a", poll=30.0)
state.counts()  # the schema and a first connection, before the measure

def work():
    waiter = state.wake()
    waiter.wait(0)  # a new waiter's first wait ends at once
    woken = waiter.wait(1.0)
    limits = Limits(max_concurrency=2, max_queue=100)
    hows = [state.admit(RunSpec("h", str(n), "/bin/true", (), (), (), "/"), limits, None, 0.0).how
            for n in range(20)]
    return {"woken": woken, "started": hows.count("started"), "queued": state.counts().queued}

print(json.dumps(measured(work)))
state.close()
"""
)


def artefact_python() -> str:
    """The installed wheel's interpreter when scripts/test made one, else this one (a bare pytest run)."""
    command = os.environ.get("HOOKRUNNER_BIN")
    if command:
        return str(Path(command).with_name("python"))
    return sys.executable


def measure(conninfo: str, mode: str, child: str = CHILD) -> dict[str, Any]:
    done = subprocess.run(
        [artefact_python(), "-I", "-c", child, conninfo, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_query_that_waits_leaves_the_loop_free(pg_database: str) -> None:
    found = measure(pg_database, "patched")
    assert found["elapsed"] >= 1.0, found  # the query did wait on the server
    assert found["max_gap"] < 0.100, found
    assert found["ticks"] >= 40, found  # the ticker ran throughout, not only before and after
    assert found["wait"] != "wait_c", found  # gevent's poll, through the patched select module
    major, minor, patch = (int(part) for part in found["psycopg"].split(".")[:3])
    assert (major, minor, patch) >= (3, 1, 14), found


def test_the_measure_sees_a_blocked_loop(pg_database: str) -> None:
    # Without the patch psycopg waits in C (wait_c), holding the whole thread: the same measure must say so,
    # or the test above could pass with a loop that was never shared.
    found = measure(pg_database, "unpatched")
    assert found["wait"] == "wait_c", found
    assert found["max_gap"] >= 0.9, found


def test_the_run_state_waits_and_admits_without_holding_the_loop(pg_database: str) -> None:
    found = measure(pg_database, "patched", STATE_CHILD)
    assert found["woken"] is False and found["elapsed"] >= 1.0, found  # the waiter did wait its second
    assert (found["started"], found["queued"]) == (2, 18), found  # and the admissions went through
    assert found["max_gap"] < 0.100, found
    assert found["ticks"] >= 40, found
