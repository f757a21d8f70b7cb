"""The run owner's wire: how a worker and the run owner (and the master and the owner) talk over a private
AF_UNIX SOCK_SEQPACKET socketpair (docs/run-state.md, "The wire protocol"). One message is one packet: a
JSON object naming its `kind` (ASCII, as the journal writes argv), a newline, then raw bytes (output, a
file's contents). Only the framing lives here; what each kind means belongs to its two ends."""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: The protocol's version, sent in the first message (`hello`) of a connection.
VERSION = 1

#: The JSON log's event of every line about the run owner's process and its connections (-log-format json).
EVENT = "run_owner"

#: The largest packet either end sends or accepts: well under a socket buffer's default size
#: (net.core.wmem_default, 208 KiB here), which bounds one SOCK_SEQPACKET packet.
MAX_PACKET = 128 * 1024

#: Output travels in frames of at most this many bytes.
FRAME = 64 * 1024

#: Errors of a connection whose peer is gone: its end of file, or a peer that died with packets unread
#: (ECONNRESET) or that we wrote to after it closed (EPIPE). All three mean the peer's end, never ours.
_GONE = (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, errno.ESHUTDOWN)


class WireError(Exception):
    """A packet that is not a message: too large, no header line, a header that is not a JSON object with a
    string `kind`. The packet is dropped; the connection may go on."""


class PeerGone(Exception):
    """The other end of the connection is gone (end of file, reset, broken pipe)."""


@dataclass(frozen=True)
class Message:
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    data: bytes = b""

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


def encode(message: Message) -> bytes:
    """The packet for `message`; raises WireError when it would exceed MAX_PACKET."""
    header = dict(message.fields)
    header["kind"] = message.kind
    packet = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    packet += b"\n" + message.data
    if len(packet) > MAX_PACKET:
        raise WireError(f"a {message.kind} message of {len(packet)} bytes exceeds {MAX_PACKET}")
    return packet


def decode(packet: bytes) -> Message:
    """The message in `packet`; raises WireError for anything else."""
    if len(packet) > MAX_PACKET:
        raise WireError(f"a packet of more than {MAX_PACKET} bytes")
    head, newline, data = packet.partition(b"\n")
    if not newline:
        raise WireError("a packet without a header line")
    try:
        header = json.loads(head)
    except ValueError as exc:  # UnicodeDecodeError included
        raise WireError(f"a header that is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("kind"), str):
        raise WireError("a header without a kind")
    kind = header.pop("kind")
    return Message(kind, header, data)


def pair() -> tuple[socket.socket, socket.socket]:
    """A new private connection: two connected SOCK_SEQPACKET ends, closed on exec."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send(sock: socket.socket, message: Message, fds: list[int] | None = None) -> None:
    """Send one message (with `fds` passed along, SCM_RIGHTS); raises PeerGone when the peer is gone, and
    lets BlockingIOError through from a non-blocking socket whose buffer is full (the caller keeps it)."""
    packet = encode(message)
    try:
        if fds:
            socket.send_fds(sock, [packet], fds)
        else:
            sock.send(packet)
    except OSError as exc:
        if exc.errno in _GONE:
            raise PeerGone(str(exc)) from None
        raise


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[Message, list[int]]:
    """The next message and the descriptors passed with it (at most `max_fds`; any beyond are closed by
    the kernel). Raises PeerGone at the peer's end, WireError for a packet that is not a message (which is
    consumed), and lets BlockingIOError through from a non-blocking socket with nothing to read."""
    try:
        if max_fds:
            packet, fds, _flags, _addr = socket.recv_fds(sock, MAX_PACKET + 1, max_fds)
            # Close-on-exec, as every descriptor Python opens: no command inherits a worker's connection
            # (set here: MSG_CMSG_CLOEXEC is not honoured by every kernel this runs on).
            for fd in fds:
                os.set_inheritable(fd, False)
        else:
            packet, fds = sock.recv(MAX_PACKET + 1), []
    except OSError as exc:
        if exc.errno in _GONE:
            raise PeerGone(str(exc)) from None
        raise
    if not packet:
        raise PeerGone("end of file")
    try:
        return decode(packet), fds
    except WireError:
        for fd in fds:
            _close(fd)
        raise


def frames(data: bytes) -> Iterator[bytes]:
    """`data` in pieces of at most FRAME bytes (one empty piece for no data)."""
    if not data:
        yield b""
        return
    for start in range(0, len(data), FRAME):
        yield data[start : start + FRAME]


def _close(fd: int) -> None:
    try:
        socket.close(fd)
    except OSError:
        pass
