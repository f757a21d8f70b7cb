"""Issue 34's flooded neighbour on the installed command, with default flags: one client keeps 64
keep-alive connections busy (flood_load.py) while a second pushes (an async run of /bin/true) every 50 ms.
The second is always answered, and not behind the flood's queue. scripts/hostile measures the figures side
by side with webhook (docs/limits.md, "A flooded neighbour").

The bounds are for a loaded 2-core CI machine, where the flood, its server and the neighbour share the two
cores with whatever else runs, and a load average of 10-20 is common. Absolute figures are then the
machine's more than the server's (webhook's own neighbour p99 was 22-241 ms over rounds at load 10-21,
25-34 ms at load 5), so the neighbour is judged against references measured in the same test: the flood's
own answers, and webhook under the same flood."""

from __future__ import annotations

from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from flood_load import Side, flooded_neighbour, percentile
from hostile_load import hooks, start, stop
from integration_harness import HOOKRUNNER_TEST_FLAGS, REFERENCE_BINARY

#: How long each flood lasts: a push every 50 ms gives about 160 answers, so that the p99 is the second
#: slowest of them rather than the slowest alone.
SECONDS = 8.0

THREADED = "gthread" in HOOKRUNNER_TEST_FLAGS

#: The neighbour's p50 and p99 against the flood's own p50 and p99 in the same run, at most. On the gevent
#: worker fair turns serve the neighbour, one request at a time, before the flood's waiting requests: over
#: fifteen of scripts/hostile's rounds (10 s each, load 9-21) its p50 was 0.06-0.61 of the flood's and its
#: p99 0.11-0.53, where before fair turns they were about 4x and 2.6x. The threaded worker has no fair turns: its
#: 64 threads take requests as they come, so the neighbour waits in the same line as a flood request,
#: 0.87-1.0x the flood's p50 and 0.82-0.88x its p99 in its own five rounds: the bound leaves it half as
#: long again as a flood request, for the noise of one short run.
OF_THE_FLOOD = 1.5 if THREADED else 1.0

#: The same for the tail (the second slowest of ~160 answers), which one stall of the machine decides: a
#: CI run at load 10+ once saw the gevent neighbour's at 1.31x the flood's (98.4 against 75.2 ms) while
#: its p50 stayed under the flood's. Without fair turns the neighbour's p99 was about 2.6x, so 1.5x still
#: tells the two apart.
TAIL_OF_THE_FLOOD = max(OF_THE_FLOOD, 1.5)

#: hookrunner's neighbour p99 at most this many times webhook's, measured one after the other in the same
#: test. Seen in scripts/hostile's rounds: the gevent worker 0.4-4.2x webhook's (fifteen rounds), the
#: threaded worker 1.5-7.5x (five). About twice the worst of those: the machine's load moves between the two
#: measurements.
P99_TIMES_WEBHOOK = 15.0 if THREADED else 8.0

#: ...where webhook's p99 counts as at least this much: on a quiet machine webhook's is a few
#: milliseconds, and a ratio of small figures says more about the clock than about the server.
WEBHOOK_P99_FLOOR_MS = 25.0


def _measure(argv: list[str], tmp_path: Path, name: str) -> tuple[Side, Side]:
    workdir = tmp_path / name
    workdir.mkdir()
    target = start(name, argv, workdir, hooks(workdir))
    try:
        return flooded_neighbour(target.port, connections=64, seconds=SECONDS)
    finally:
        stop(target)


def _always_answered(flood: Side, neighbour: Side) -> None:
    assert flood.answered > 1000, flood.summary()  # the flood did keep the server busy
    assert not neighbour.failures and set(neighbour.statuses) == {"200"}, neighbour.summary()
    # A push every 50 ms, each waited for.
    assert neighbour.answered >= 0.4 * SECONDS / 0.05, neighbour.summary()


def test_a_second_client_is_answered_soon_while_one_floods(tmp_path: Path) -> None:
    flood, neighbour = _measure([HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS], tmp_path, "hookrunner")
    _always_answered(flood, neighbour)
    figures = (flood.summary(), neighbour.summary())
    # The neighbour is not behind the flood's queue: its median and its tail (the second slowest of its
    # answers) against the flood's own under the same load at the same moment.
    for share, times in ((0.5, OF_THE_FLOOD), (0.99, TAIL_OF_THE_FLOOD)):
        bound = times * percentile(flood.latencies, share)
        assert percentile(neighbour.latencies, share) <= bound, (share, figures)


@pytest.mark.reference
def test_the_neighbours_tail_stays_within_reach_of_webhooks(tmp_path: Path) -> None:
    ours = _measure([HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS], tmp_path, "hookrunner")
    theirs = _measure([str(REFERENCE_BINARY)], tmp_path, "webhook")
    _always_answered(*ours)
    _always_answered(*theirs)
    p99, reference = percentile(ours[1].latencies, 0.99), percentile(theirs[1].latencies, 0.99)
    bound = P99_TIMES_WEBHOOK * max(reference, WEBHOOK_P99_FLOOR_MS)
    assert p99 <= bound, (f"p99 {p99:.1f} ms > {bound:.1f} ms", ours[1].summary(), theirs[1].summary())
