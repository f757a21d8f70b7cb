"""Fair turns between clients on the gevent worker's one loop: a request whose head has come starts at once
if its client has had no turn since the loop last polled the sockets, and otherwise waits its turn, given
round-robin between clients after each poll. One client's 64 busy connections then cost a second client
one request's wait per poll, not 64 (issue 34; docs/limits.md, "A flooded neighbour")."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from gevent.hub import Waiter

from hookrunner.serve.proxies import Network, forwarded_client

T = TypeVar("T")


class FairTurns(Generic[T]):
    """Turns for waiters (whatever wakes a request), kept per client, given in rounds.

    A round starts at each poll of the loop (`round`). A client's request goes at once (`admit` is True)
    if the client has had no turn this round and has none waiting; otherwise it waits, in its client's
    queue. `round` gives the waiting turns one client at a time, round-robin (a client given a turn moves
    to the back), until `budget` seconds have passed since the round began: at least one turn, so that
    every waiting client is served in time however long a request takes."""

    def __init__(self, budget: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._budget = budget
        self._clock = clock
        #: Clients with waiting turns, in the order they are to be served (a dict keeps insertion order).
        self._waiting: dict[Hashable, deque[T]] = {}
        #: Clients who have had a turn in this round.
        self._served: set[Hashable] = set()

    def __len__(self) -> int:
        """How many turns are waiting."""
        return sum(map(len, self._waiting.values()))

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def admit(self, client: Hashable, waiter: T) -> bool:
        """True: the request goes now. False: `waiter` waits for `round` to give it its turn."""
        if client not in self._served and client not in self._waiting:
            self._served.add(client)
            return True
        self._waiting.setdefault(client, deque()).append(waiter)
        return False

    def withdraw(self, client: Hashable, waiter: T) -> None:
        """A waiting turn no longer wanted (its request's greenlet was killed)."""
        queue = self._waiting.get(client)
        if queue is None:
            return
        try:
            queue.remove(waiter)
        except ValueError:
            return
        if not queue:
            del self._waiting[client]

    def round(self) -> Iterator[T]:
        """A new round: the waiters whose turn it is, one at a time; the caller runs each before asking
        for the next, so the budget counts the time their requests take."""
        self._served.clear()
        began = self._clock()
        while self._waiting:
            client = next(iter(self._waiting))
            queue = self._waiting.pop(client)
            waiter = queue.popleft()
            if queue:
                self._waiting[client] = queue  # to the back: the other clients go first
            self._served.add(client)
            yield waiter
            if self._clock() - began >= self._budget:
                return


def _nothing() -> None:
    pass


class LoopTurns:
    """FairTurns on a gevent loop: `take` is called by a connection's greenlet before it serves a request,
    `polled` by the loop after each poll (a check watcher). While turns wait, an idle watcher keeps the
    loop's poll from blocking, so that the next round comes at once."""

    def __init__(self, loop: Any, budget: float) -> None:
        self._turns: FairTurns[Waiter[None]] = FairTurns(budget)
        self._spinner = loop.idle()

    def take(self, client: Hashable) -> None:
        waiter: Waiter[None] = Waiter()
        if self._turns.admit(client, waiter):
            return
        if not self._spinner.active:
            self._spinner.start(_nothing)
        try:
            waiter.get()
        except BaseException:
            self._turns.withdraw(client, waiter)
            raise

    def polled(self) -> None:
        for waiter in self._turns.round():
            waiter.switch(None)  # runs the request's greenlet until it waits again
        if not self._turns and self._spinner.active:
            self._spinner.stop()


def client_key(networks: Sequence[Network], peer: Any, headers: Sequence[tuple[str, str]]) -> str:
    """Who sent a request, for fairness and rate limits: the peer's address, or with -trusted-proxies the
    client a trusted proxy forwarded (serve/proxies.py); "" for a Unix socket's peers, which are one."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    if networks and host:
        forwarded = [value for name, value in headers if name.upper() == "X-FORWARDED-FOR"]
        client = forwarded_client(networks, host, forwarded)
        if client is not None:
            return client[0]
    return str(host)
