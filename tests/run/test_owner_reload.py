"""The run owner's side of a hot reload (issue 32 step 9): a hooks generation sent to every worker's
connection and waited for, a worker that does not answer named, and a worker that connects later sent
the current generation at its hello (run/owner.py's publish_hooks, run/ownerclient.py's on_reload)."""

from __future__ import annotations

import socket
import time

from owner_support import host, spawn, wait_until

from hookrunner.hooks.generation import pack, unpack
from hookrunner.run import wire
from hookrunner.run.ownerclient import OwnerClient

#: Past one packet: the generation crosses in parts.
FILES: list[tuple[str, str | None]] = [
    ("/etc/hooks/a.yaml", "- id: a\n" + "#" * 300_000 + "\n"),
    ("/b", None),
]


def test_a_generation_reaches_every_worker_and_one_that_does_not_answer_is_named() -> None:
    with host(0) as made:
        got: dict[int, list[tuple[int, list[tuple[str, str | None]]]]] = {}

        def client(pid: int) -> OwnerClient:
            worker_end, owner_end = wire.pair()
            made.owner.attach(owner_end, pid)
            made_client = OwnerClient(worker_end, spawn)
            made_client.on_reload = lambda g, f, d: got.setdefault(pid, []).append((g, unpack(f, d)))
            made_client.connect()
            made.clients.append(made_client)
            return made_client

        client(101)
        client(102)
        stopped = made.raw_worker(103)  # reads nothing, answers nothing: a worker SIGSTOPped
        assert wait_until(lambda: made.owner.workers == [101, 102, 103])
        fields, data = pack(FILES)
        began = time.monotonic()
        late = made.owner.publish_hooks(1, fields, data, wait=0.5)
        assert late == [103]
        assert time.monotonic() - began >= 0.5  # it waited for the silent one, no longer
        assert got == {101: [(1, FILES)], 102: [(1, FILES)]}
        # The stopped worker finds the whole generation in its connection when it reads again.
        stopped.settimeout(5)
        kinds, pieces = [], []
        while not kinds or kinds[-1] != "reload":
            message, _ = wire.receive(stopped)
            kinds.append(message.kind)
            if message.kind.startswith("reload"):
                assert message.get("id") == 1
                pieces.append(message.data)
                last = message
        assert kinds[0] == "hello" and set(kinds[1:-1]) == {"reload_part"}
        assert unpack(last.fields, b"".join(pieces)) == FILES
        # A worker that connects later (forked after the reload) says it serves generation 0: it is sent 1.
        client(104)
        assert wait_until(lambda: got.get(104) == [(1, FILES)]), got
        # Each worker that applied it answered `reloaded`: the next generation is waited for by them alone.
        assert made.owner.publish_hooks(2, *pack([("/b", None)]), wait=2.0) == [103]
        assert wait_until(lambda: all(len(got[pid]) == 2 for pid in (101, 102, 104)))


def test_a_hello_that_crossed_a_generation_already_sent_is_not_sent_it_again() -> None:
    """A worker's hello names the generation it served when it wrote it; one published before the owner
    read that hello was already sent on the connection, and is not sent twice (under load a worker
    applied generation 1 twice when its hello came after the publish)."""
    with host(0) as made:
        raw = made.raw_worker(201)
        assert wait_until(lambda: made.owner.workers == [201])
        fields, data = pack(FILES)
        # The worker has not said hello yet: the generation goes out, nobody answers within the wait.
        assert made.owner.publish_hooks(1, fields, data, wait=0.05) == [201]
        wire.send(raw, wire.Message("hello", {"version": wire.VERSION, "pid": 201, "generation": 0}))
        kinds = _until_quiet(raw)
        assert kinds[0] == "hello" and kinds.count("reload") == 1, kinds
        # The same for the next generation (a worker that connects anew, or to a new owner, has a new
        # connection, which is sent the current generation at its hello: the test above).
        wire.send(raw, wire.Message("reloaded", {"generation": 1}))
        made.owner.publish_hooks(2, *pack([("/c", None)]), wait=0.05)
        wire.send(raw, wire.Message("hello", {"version": wire.VERSION, "pid": 201, "generation": 1}))
        kinds = _until_quiet(raw)
        assert kinds.count("reload") == 1, kinds


def _until_quiet(raw: socket.socket) -> list[str]:
    """The kinds of the messages `raw` receives: up to the first `reload` (however slow the owner's
    flusher is), then whatever else comes within 0.5 s (a second copy would come right behind the first)."""
    kinds: list[str] = []
    raw.settimeout(10)
    while "reload" not in kinds:
        message, _ = wire.receive(raw)
        kinds.append(message.kind)
    raw.settimeout(0.5)
    try:
        while True:
            message, _ = wire.receive(raw)
            kinds.append(message.kind)
    except TimeoutError:
        return kinds
