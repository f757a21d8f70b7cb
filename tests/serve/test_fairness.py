"""Fair turns between clients: who goes at once, who waits, in which order the waiting are served, the
round's budget, withdrawn turns, the loop's part (greenlets released after a poll, the loop kept from
blocking meanwhile), and which client a request is from."""

from __future__ import annotations

import gevent
import gevent.event
import pytest
from fakeclock import Clock

from hookrunner.serve.fairness import FairTurns, LoopTurns, client_key
from hookrunner.serve.proxies import parse_networks


def test_first_request_of_a_client_in_a_round_goes_at_once_the_next_waits() -> None:
    turns: FairTurns[str] = FairTurns(0.0)
    assert turns.admit("a", "a1")
    assert turns.admit("b", "b1")  # another client: its first goes too
    assert not turns.admit("a", "a2")
    assert not turns.admit("a", "a3")
    assert len(turns) == 2 and turns


def test_a_client_with_turns_waiting_waits_even_in_a_new_round() -> None:
    turns: FairTurns[str] = FairTurns(0.0)
    turns.admit("a", "a1")
    turns.admit("a", "a2")
    turns.admit("a", "a3")
    assert list(turns.round()) == ["a2"]
    # a3 still waits: a4 must not overtake it, whatever the round.
    assert not turns.admit("a", "a4")
    assert list(turns.round()) == ["a3"]
    assert list(turns.round()) == ["a4"]
    assert not turns
    assert list(turns.round()) == []
    assert turns.admit("a", "a5")  # nothing waiting, a new round: at once


def test_rounds_serve_the_waiting_clients_round_robin() -> None:
    """Two clients with many waiting (a flood each) and one with a single turn: each round gives one
    turn (a budget of 0), and the clients take them in turn, so the single one waits for one turn of
    each other client, not for their queues."""
    turns: FairTurns[str] = FairTurns(0.0)
    for client in "ab":
        turns.admit(client, f"{client}0")
        for n in range(1, 5):
            assert not turns.admit(client, f"{client}{n}")
    turns.admit("c", "c0")
    assert not turns.admit("c", "c1")
    given = [waiter for _ in range(10) for waiter in turns.round()]
    assert given == ["a1", "b1", "c1", "a2", "b2", "a3", "b3", "a4", "b4"]


def test_a_round_gives_turns_until_its_budget_is_spent_and_at_least_one() -> None:
    clock = Clock()
    turns: FairTurns[str] = FairTurns(0.005, clock)
    turns.admit("a", "a0")
    for n in range(1, 10):
        turns.admit("a", f"a{n}")
    given = []
    for waiter in turns.round():
        given.append(waiter)
        clock.now += 0.002  # each request takes 2 ms
    assert given == ["a1", "a2", "a3"]  # 6 ms > 5 ms after the third
    given = []
    for waiter in turns.round():
        given.append(waiter)
        clock.now += 1.0  # a request longer than the budget: one per round still
    assert given == ["a4"]


def test_a_client_served_in_a_round_waits_for_the_next() -> None:
    turns: FairTurns[str] = FairTurns(0.0)
    turns.admit("a", "a0")
    turns.admit("a", "a1")
    assert list(turns.round()) == ["a1"]
    assert not turns.admit("a", "a2")  # a1 was a's turn in this round
    assert turns.admit("b", "b0")


def test_withdrawn_turns_are_not_given() -> None:
    turns: FairTurns[str] = FairTurns(0.0)
    turns.admit("a", "a0")
    turns.admit("a", "a1")
    turns.admit("a", "a2")
    turns.withdraw("a", "a1")
    turns.withdraw("a", "a9")  # not waiting: nothing happens
    turns.withdraw("z", "z1")
    assert list(turns.round()) == ["a2"]
    turns.admit("b", "b0")
    turns.admit("b", "b1")
    turns.withdraw("b", "b1")
    assert not turns
    assert turns.admit("b", "b2") is False  # b was served in this round: it waits for the next
    assert list(turns.round()) == ["b2"]


def test_loop_turns_release_one_client_per_poll_and_keep_the_loop_polling() -> None:
    """On a real loop: a client's second request waits until the loop has polled (with nothing else to
    wake it, the idle watcher keeps the poll from blocking), and a killed waiter gives up its turn."""
    loop = gevent.get_hub().loop
    turns = LoopTurns(loop, 0.0)
    check = loop.check()
    check.start(turns.polled)
    order: list[str] = []
    try:
        def request(client: str, name: str) -> None:
            turns.take(client)
            order.append(name)

        first = gevent.spawn(request, "a", "a1")
        second = gevent.spawn(request, "a", "a2")
        killed = gevent.spawn(request, "a", "a3")
        third = gevent.spawn(request, "a", "a4")
        gevent.sleep(0)  # all four have asked; a1 went at once
        assert order == ["a1"]
        killed.kill()
        gevent.joinall([first, second, third], timeout=5, raise_error=True)
        assert order == ["a1", "a2", "a4"]
        assert not turns._spinner.active  # nothing waits: the loop may block in its poll again
    finally:
        check.stop()


@pytest.mark.parametrize(
    ("proxies", "peer", "headers", "key"),
    [
        ([], ("127.0.0.2", 4242), [], "127.0.0.2"),
        ([], ("127.0.0.2", 4242), [("X-FORWARDED-FOR", "203.0.113.7")], "127.0.0.2"),  # not believed
        (["127.0.0.0/8"], ("127.0.0.2", 4242), [("X-FORWARDED-FOR", "203.0.113.7")], "203.0.113.7"),
        (["127.0.0.0/8"], ("127.0.0.2", 4242), [], "127.0.0.2"),  # a trusted proxy forwarding no one
        (["10.0.0.0/8"], ("127.0.0.2", 4242), [("X-FORWARDED-FOR", "203.0.113.7")], "127.0.0.2"),
        (["127.0.0.0/8"], "", [("X-FORWARDED-FOR", "203.0.113.7")], ""),  # a Unix socket's peer
        ([], ("::1", 4242, 0, 0), [], "::1"),
    ],
)
def test_client_key(proxies: list[str], peer: object, headers: list[tuple[str, str]], key: str) -> None:
    assert client_key(parse_networks(proxies), peer, headers) == key


def test_take_is_immediate_when_nothing_waits() -> None:
    turns = LoopTurns(gevent.get_hub().loop, 0.0)
    done = gevent.event.Event()
    gevent.spawn(lambda: (turns.take("a"), turns.take("b"), done.set()))
    assert done.wait(5)
