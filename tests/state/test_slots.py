"""The run state's places on their own (hookrunner/state/slots.py): per-hook limits, the queue, coalescing
per group, and the global cap's line, with plain strings for runs and no threads."""

from __future__ import annotations

import pytest

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Limits
from hookrunner.state.slots import COALESCED, QUEUED, STARTED, Busy, Slots


def test_runs_start_up_to_the_hook_limit_then_queue_then_are_refused() -> None:
    slots: Slots[str] = Slots()
    limits = Limits(max_concurrency=2, max_queue=1, retry_after=7)
    assert slots.admit("h", limits, "a") == (STARTED, "a", True)
    assert slots.admit("h", limits, "b") == (STARTED, "b", True)
    assert slots.admit("h", limits, "c") == (QUEUED, "c", False)
    with pytest.raises(Busy) as busy:
        slots.admit("h", limits, "d")
    assert (busy.value.hook_id, busy.value.retry_after) == ("h", 7)
    assert slots.admit("h", limits, "replayed", admitted=True) == (QUEUED, "replayed", False)  # past the bound
    assert (slots.running, slots.queued, slots.active) == (2, 2, 2)
    assert slots.admit("other", limits, "x") == (STARTED, "x", True)  # limits are per hook
    assert slots.finished("h") == ("h", "c")  # the queue's first takes the place, first in, first out
    assert slots.finished("h") == ("h", "replayed")
    assert slots.finished("h") is None
    assert slots.finished("h") is None
    assert slots.finished("other") is None
    assert slots.idle and (slots.running, slots.queued) == (0, 0)


def test_coalescing_folds_into_the_waiting_run_of_the_same_group() -> None:
    slots: Slots[str] = Slots()
    limits = Limits(max_concurrency=1, max_queue=2, coalesce=True, coalesce_by=Argument("payload", "ref"))
    assert slots.admit("h", limits, "dev-1", "dev")[0] == STARTED
    assert slots.admit("h", limits, "dev-2", "dev") == (QUEUED, "dev-2", False)
    assert slots.admit("h", limits, "main-1", "main") == (QUEUED, "main-1", False)
    assert slots.admit("h", limits, "dev-3", "dev") == (COALESCED, "dev-2", False)  # stands for dev-3 now
    assert slots.admit("h", limits, "main-2", "main") == (COALESCED, "main-1", False)
    with pytest.raises(Busy):
        slots.admit("h", limits, "tag-1", "v1")
    assert slots.queued == 2


def test_a_coalescing_hook_keeps_one_waiting_run_even_with_no_queue() -> None:
    slots: Slots[str] = Slots()
    limits = Limits(max_concurrency=1, coalesce=True)
    slots.admit("h", limits, "a")
    assert slots.admit("h", limits, "b") == (QUEUED, "b", False)
    assert slots.admit("h", limits, "c") == (COALESCED, "b", False)


def test_the_global_cap_puts_runs_in_one_line_across_hooks() -> None:
    slots: Slots[str] = Slots(max_running=1)
    free = Limits()
    assert slots.admit("a", free, "a1") == (STARTED, "a1", True)
    assert slots.admit("b", free, "b1") == (STARTED, "b1", False)  # admitted, waiting for the cap
    assert slots.admit("a", free, "a2") == (STARTED, "a2", False)
    assert slots.in_line(lambda run: run == "b1") and not slots.in_line(lambda run: run == "a1")
    assert (slots.running, slots.queued) == (1, 2)
    assert slots.finished("a") == ("b", "b1")  # the line's first, whatever its hook
    assert slots.finished("b") == ("a", "a2")
    assert slots.finished("a") is None
    assert slots.idle


def test_a_hook_queued_run_joins_the_end_of_the_cap_line_when_its_hook_lets_it_go() -> None:
    slots: Slots[str] = Slots(max_running=1)
    one = Limits(max_concurrency=1, max_queue=5)
    assert slots.admit("a", one, "a1")[2] is True
    assert slots.admit("a", one, "a2")[0] == QUEUED
    assert slots.admit("b", Limits(), "b1") == (STARTED, "b1", False)
    assert slots.finished("a") == ("b", "b1")  # b1 was in the line before a2 joined it
    assert slots.finished("b") == ("a", "a2")
