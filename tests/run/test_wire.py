"""The run owner's wire (run/wire.py): messages round-trip whole over a real SOCK_SEQPACKET pair, anything
that is not a message is refused with WireError (and the connection goes on), and a peer's end is PeerGone
whatever way it ends."""

from __future__ import annotations

import os
import socket

import pytest

from hookrunner.run import wire
from hookrunner.run.wire import FRAME, MAX_PACKET, Message, PeerGone, WireError


@pytest.fixture
def ends():
    a, b = wire.pair()
    yield a, b
    a.close()
    b.close()


def test_a_message_round_trips_with_its_fields_and_raw_bytes(ends):
    a, b = ends
    data = bytes(range(256)) * 4  # every byte value, newlines included
    sent = Message("run", {"id": 7, "argv": ["/bin/echo", "\udcff", "é"], "limits": {"max": 1}}, data)
    wire.send(a, sent)
    got, fds = wire.receive(b)
    assert got == sent
    assert fds == []
    assert got["argv"][1] == "\udcff"  # a lone surrogate (an undecodable byte) survives


def test_packets_keep_their_boundaries_and_order(ends):
    a, b = ends
    for n in range(20):
        wire.send(a, Message("out", {"n": n}, b"x" * n))
    for n in range(20):
        got, _ = wire.receive(b)
        assert (got.kind, got["n"], got.data) == ("out", n, b"x" * n)


def test_the_largest_message_passes_and_one_byte_more_is_refused_before_sending(ends):
    a, b = ends
    header = len(wire.encode(Message("out")))
    fits = Message("out", {}, b"y" * (MAX_PACKET - header))
    wire.send(a, fits)
    assert wire.receive(b)[0] == fits
    with pytest.raises(WireError):
        wire.send(a, Message("out", {}, b"y" * (MAX_PACKET - header + 1)))


@pytest.mark.parametrize(
    "packet",
    [
        b"no header line",
        b"not json\n",
        b"[1, 2]\n",
        b'{"id": 1}\n',
        b'{"kind": 3}\n',
        b"\xff\xfe\n",
        b"z" * (MAX_PACKET + 10),
    ],
)
def test_what_is_not_a_message_is_refused_and_the_next_message_still_arrives(ends, packet):
    a, b = ends
    a.send(packet)
    wire.send(a, Message("hello", {"version": wire.VERSION}))
    with pytest.raises(WireError):
        wire.receive(b)
    assert wire.receive(b)[0] == Message("hello", {"version": wire.VERSION})


def test_the_peers_end_of_file_is_peer_gone(ends):
    a, b = ends
    wire.send(a, Message("exit", {"id": 1}))
    a.close()
    assert wire.receive(b)[0].kind == "exit"  # what was sent before the end still arrives
    with pytest.raises(PeerGone):
        wire.receive(b)


def test_a_peer_that_died_with_packets_unread_is_peer_gone_not_an_error_of_ours(ends):
    a, b = ends
    wire.send(b, Message("run", {"id": 1}))  # a never reads it
    a.close()
    with pytest.raises(PeerGone):
        wire.send(b, Message("run", {"id": 2}))
    with pytest.raises(PeerGone):
        wire.receive(b)


def test_a_full_non_blocking_buffer_is_left_to_the_caller(ends):
    a, _b = ends
    a.setblocking(False)
    with pytest.raises(BlockingIOError):
        for _ in range(100_000):
            wire.send(a, Message("out", {}, b"z" * FRAME))


def test_descriptors_pass_with_a_message(ends, tmp_path):
    a, b = ends
    path = tmp_path / "f"
    path.write_bytes(b"passed")
    fd = os.open(path, os.O_RDONLY)
    try:
        wire.send(a, Message("worker", {"pid": 42}), fds=[fd])
    finally:
        os.close(fd)
    got, fds = wire.receive(b, max_fds=1)
    assert got == Message("worker", {"pid": 42})
    assert len(fds) == 1
    assert not os.get_inheritable(fds[0])  # close-on-exec from the start, like the ends themselves
    with os.fdopen(fds[0], "rb") as passed:
        assert passed.read() == b"passed"


def test_the_ends_are_not_inherited_by_commands(ends):
    a, b = ends
    assert a.type == socket.SOCK_SEQPACKET
    assert not os.get_inheritable(a.fileno()) and not os.get_inheritable(b.fileno())


def test_frames_cut_output_at_the_frame_size():
    assert list(wire.frames(b"")) == [b""]
    data = os.urandom(FRAME * 2 + 5)
    pieces = list(wire.frames(data))
    assert [len(p) for p in pieces] == [FRAME, FRAME, 5]
    assert b"".join(pieces) == data
