"""Request counts through the run owner (issue 32 step 8): each worker's client sends a `count` per request,
and a scrape through any client is answered only once every connection has been read until it would block,
so its totals are exactly the counts sent before it. The owner and the clients on threads, over real
SOCK_SEQPACKET pairs (tests/owner_support.py)."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from owner_support import Host, host
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.run import wire
from hookrunner.run.ownerclient import OwnerClient

#: What each of the three clients counts: (hook, outcome, how many).
SENT = [
    [("a", metrics.SERVED, 40), ("", metrics.NOT_FOUND, 25), ("a", metrics.RULES_NOT_SATISFIED, 10)],
    [("a", metrics.SERVED, 7), ("b", metrics.BUSY, 3), ("", metrics.NOT_FOUND, 30)],
    [("b", metrics.SERVED, 60), ("b", metrics.METHOD_NOT_ALLOWED, 5), ("a", metrics.ERROR, 1)],
]


class Hooks:
    def __len__(self) -> int:
        return 2


@pytest.fixture
def counted() -> Iterator[Host]:
    """Three clients of an owner whose metrics are on, as serve/ownerprocess.py sets them."""
    with host(3) as made:
        made.owner.exposition = metrics.enable(Hooks(), made.owner.runner).host_exposition
        made.owner.count = metrics.count_request
        try:
            yield made
        finally:
            metrics.disable()


def requests_total(text: bytes | None) -> dict[tuple[str, str], float]:
    assert text is not None
    return {
        (s.labels["hook"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text.decode())
        if family.name == "hookrunner_requests"
        for s in family.samples
        if s.name == "hookrunner_requests_total"
    }


def expected() -> dict[tuple[str, str], float]:
    totals: dict[tuple[str, str], float] = {}
    for sent in SENT:
        for hook_id, outcome, times in sent:
            totals[hook_id, outcome] = totals.get((hook_id, outcome), 0) + times
    return totals


def send_counts(made: Host) -> None:
    """Every client's counts, each client from a thread of its own, all sent when this returns."""

    def counts(n: int) -> None:
        for hook_id, outcome, times in SENT[n]:
            for _ in range(times):
                made.clients[n].count(hook_id, outcome)

    threads = [threading.Thread(target=counts, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_counts_from_three_clients_then_a_scrape_through_each_are_exact(counted: Host) -> None:
    send_counts(counted)
    assert [requests_total(client.run_metrics()) for client in counted.clients] == [expected()] * 3


def test_a_scrape_waits_for_a_connection_whose_counts_are_still_unread(counted: Host) -> None:
    # The owner's reader of the third worker is slow (each count takes 5 ms): when the first worker's
    # scrape comes, most of the third's counts are still in its socket. The scrape waits for them (a scrape
    # that did not would see a fraction of the 66).
    slow = 0.005

    def slow_count(hook_id: object, outcome: object) -> bool:
        if hook_id == "b":
            time.sleep(slow)
        return metrics.count_request(hook_id, outcome)

    counted.owner.count = slow_count
    send_counts(counted)
    started = time.monotonic()
    scraped = requests_total(counted.clients[0].run_metrics())
    assert scraped == expected()
    assert time.monotonic() - started < counted.owner.scrape_wait  # read out, not given up on


def test_a_connection_never_read_out_delays_a_scrape_by_scrape_wait_at_most(
    counted: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader stuck on one count (a stand-in for an owner that cannot get to it): the scrape is answered
    # once its wait is over, without that count, and says which worker it did not wait for.
    stuck, release = threading.Event(), threading.Event()

    def stuck_count(hook_id: object, outcome: object) -> bool:
        if hook_id == "stuck":
            stuck.set()
            release.wait(10)
        return metrics.count_request(hook_id, outcome)

    counted.owner.count = stuck_count
    counted.owner.scrape_wait = 0.3
    lines: list[str] = []
    monkeypatch.setattr(log, "output", lambda message, **_: lines.append(message))
    try:
        counted.clients[2].count("stuck", metrics.SERVED)
        assert stuck.wait(5)
        counted.clients[0].count("a", metrics.SERVED)
        started = time.monotonic()
        scraped = requests_total(counted.clients[0].run_metrics())
        took = time.monotonic() - started
    finally:
        release.set()
    assert scraped == {("a", metrics.SERVED): 1}
    assert 0.3 <= took < 3
    assert any("before worker(s) 103 were read out" in line for line in lines), lines


def test_a_count_the_owner_cannot_take_is_refused_and_counts_nothing(counted: Host) -> None:
    raw = counted.raw_worker(401)
    assert wire.receive(raw)[0].kind == "hello"
    for fields in (
        {"hook": "a", "outcome": "nonsense"},
        {"hook": 7, "outcome": metrics.SERVED},
        {"outcome": metrics.SERVED},
        {"hook": "x" * (metrics.MAX_HOOK_LABEL + 1), "outcome": metrics.SERVED},
    ):
        wire.send(raw, wire.Message("count", fields))
    wire.send(raw, wire.Message("count", {"hook": "a", "outcome": metrics.SERVED}))
    assert requests_total(counted.clients[0].run_metrics()) == {("a", metrics.SERVED): 1}


def test_a_client_with_no_owner_drops_its_counts_without_waiting(counted: Host) -> None:
    client = counted.clients[1]
    client.close()
    deadline = time.monotonic() + 5
    while client.run_metrics() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    client.count("a", metrics.SERVED)
    assert time.monotonic() - started < 0.5
    assert requests_total(counted.clients[0].run_metrics()) == {}


def _client_with_no_owner_reading() -> tuple[OwnerClient, socket.socket]:
    worker_end, owner_end = wire.pair()
    client = OwnerClient(worker_end, spawn=lambda work: threading.Thread(target=work, daemon=True).start())
    client.connect()
    return client, owner_end


def _kinds(owner_end: socket.socket) -> list[str]:
    owner_end.setblocking(False)
    kinds = []
    while True:
        try:
            message, _fds = wire.receive(owner_end)
        except BlockingIOError:
            return kinds
        kinds.append(message.kind)


def test_a_count_made_before_the_owners_hello_waits_in_the_connection_for_it() -> None:
    # A worker may answer its first requests before the owner that is starting (or the next one, after a
    # crash) has said hello: their counts are still sent, and the owner that takes the connection reads them.
    client, owner_end = _client_with_no_owner_reading()
    try:
        client.count("a", metrics.SERVED)
        client.count("", metrics.NOT_FOUND)
        assert _kinds(owner_end) == ["hello", "count", "count"]
    finally:
        client.close()
        owner_end.close()


def test_a_connection_with_no_room_drops_counts_without_waiting_and_says_so_once(
    log_lines: io.StringIO,
) -> None:
    client, owner_end = _client_with_no_owner_reading()
    try:
        for _ in range(20_000):  # far past a socket buffer's room: each count tried once, none waited for
            client.count("a", metrics.SERVED)
        said = [line for line in log_lines.getvalue().splitlines() if "takes no more counts" in line]
        assert len(said) == 1, said
        held = _kinds(owner_end)
        assert 1 < len(held) < 20_001  # the room was used, and what had no room was dropped
        client.count("a", metrics.SERVED)  # room again: sent
        assert _kinds(owner_end) == ["count"]
    finally:
        client.close()
        owner_end.close()
