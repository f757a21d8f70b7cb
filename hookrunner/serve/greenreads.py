"""The gevent worker's connections as its request parser reads them: a read wakes its greenlet only once it
can go on (a whole line of a head, the bytes a body read still needs), every read's deadline is kept by one
sweeping timer, and a connection whose bytes are already there shares the loop with the others."""

from __future__ import annotations

import heapq
import re
import time
import weakref
from collections.abc import Callable
from typing import Any

import gevent
import gevent.socket
from gevent.hub import Waiter
from gunicorn.http.unreader import SocketUnreader

from hookrunner.serve.protocol import HEADER_NAME_BYTES
from hookrunner.serve.worker import DeadlineSocket, read_expired, shutdown_reading

#: How long one greenlet may keep the loop before it lets the others run: a client whose bytes are
#: already buffered (pipelined requests, a body sent as fast as it is read) never waits in a read, so
#: without this it would be served to its end while every other connection waits.
SLICE = 0.002

#: How often the deadlines of waiting reads are looked at: a read past its deadline ends at most this late.
SWEEP = 0.05

#: A read of a request's head wakes its greenlet only when a line has ended (or `size` bytes are there):
#: the parser can do nothing with less.
LINE = -1

#: How much one recv() of a waiting read asks for.
RECV_SIZE = 65536

_slice_started = time.monotonic()

#: A timer's duration that has passed by the next poll (the loop's clock is that of its last poll).
_DUE = 1e-6


def polled() -> None:
    """Called by the loop after each poll of the sockets (a check watcher): a slice starts."""
    global _slice_started
    _slice_started = time.monotonic()


def share_loop() -> None:
    """Let the loop serve other connections when SLICE has passed since it last polled the sockets (cheap
    when it has not: a clock read). Called between reads and between requests of a connection. A greenlet
    woken by the poll itself (a byte arrived) goes on at once: the others have had their turn."""
    global _slice_started
    now = time.monotonic()
    if now - _slice_started >= SLICE:
        # Not sleep(0): that runs the other ready greenlets but does not poll the sockets, so a waiting
        # client would not be seen. Nor idle(): the loop runs idle watchers only when nothing else is
        # pending, which under a flood of new connections is never (a client waited for the flood's end).
        # A timer already due fires after the next poll, whatever else is pending.
        gevent.sleep(_DUE)
        _slice_started = time.monotonic()


class _Deadlines:
    """One timer for the deadlines of every waiting read, where a gevent timeout per read would start and
    stop a timer of the loop at every wake-up (thousands a second under a flood of slow clients). Entries
    are (deadline, order, a weak reference to the reader); a reader whose deadline moved on is simply put
    back. The reference is weak since an entry stays until its deadline, -read-timeout (30 s) after the
    connection came, and a connection long over, with what it read, must not live as long."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, weakref.ref[RequestReader | DormantConnection]]] = []
        self._count = 0
        self._timer: Any = None

    def add(self, deadline: float, reader: RequestReader | DormantConnection) -> None:
        self._count += 1
        heapq.heappush(self._heap, (deadline, self._count, weakref.ref(reader)))
        if self._timer is None:
            self._timer = gevent.get_hub().loop.timer(SWEEP, SWEEP, ref=False)
            self._timer.start(self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            reader = heapq.heappop(heap)[2]()
            if reader is not None:
                reader.swept(now)


_deadlines = _Deadlines()


#: A request line that the parser takes as it is (a common method, a target of visible ASCII without `%`,
#: HTTP/1.0 or 1.1): a connection may wait for the rest of its head without a greenlet. Any other line
#: gets its greenlet at once, so that a line net/http refuses is answered as soon as it has come.
_PLAIN_REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|HEAD|DELETE|PATCH|OPTIONS) /[!-$&-~]* HTTP/1\.[01]\r\n")

#: Whether a request (method, target, Content-Length) is answered only once its body has come.
BodyFirst = Callable[[bytes, bytes, int], bool]

#: How a DormantConnection's greenlet is started: (accepted, what it read, whether its client has gone:
#: the end of the stream, or an error, came before the head or body it held was whole).
Start = Callable[[float, bytes, bool], None]

#: A dormant connection holds at most this much of a head before its greenlet takes over.
DORMANT_HEAD_BYTES = 8192

#: ...and at most this much of a body that is answered only once it has come (routes.body_first).
DORMANT_BODY_BYTES = 65536

#: A head whose header lines the parser takes as they are (a token, a colon, a value of visible bytes,
#: spaces and tabs), after its request line.
_PLAIN_HEADERS = re.compile(rb"(?:" + HEADER_NAME_BYTES + rb"+:[\t\x20-\x7e\x80-\xff]*\r\n)*\r\n")

#: The header lines that decide whether, and how much, body follows the head.
_BODY_HEADERS = re.compile(
    rb"^(content-length|transfer-encoding|expect|host):[ \t]*(.*?)[ \t]*\r$", re.IGNORECASE | re.MULTILINE
)

_PLAIN_HOST = re.compile(rb"[0-9A-Za-z.:\[\]-]+")


class DormantConnection:
    """A plain connection whose head has not all come: a watcher of the loop (whose callback reads the
    bytes) and an entry in _Deadlines, no greenlet, no parser. The connection's greenlet starts
    (`start(accepted, head, gone)`) once the head is whole, or the end or an error has come (`gone`: its
    client left part-way), or the parser has something to answer at once (a request line it may refuse, a
    bare LF, more than DORMANT_HEAD_BYTES); -read-timeout passing first closes it as a reader would (the
    log line, no answer). Thousands of idle connections, or of heads sent a byte at a time, cost the loop
    a system call per byte and no more, and the accept of each one is cheap enough for the listener to
    keep up with a client opening them as fast as it can.

    A plain head of a request that webhook answers only once its body has come (`body_first`, from
    serve/routes.py) stays dormant for its body too, up to DORMANT_BODY_BYTES of it: thousands of slow
    bodies then cost no dispatch through the app each. Its deadline passing starts the greenlet, whose
    read of the body meets the deadline as it would have (the log line, the hook run with what came)."""

    def __init__(self, sock: Any, peer: Any, read_timeout: float, start: Start,
                 dormant: set[DormantConnection], body_first: BodyFirst | None = None) -> None:
        self._sock, self._peer, self._read_timeout, self._start = sock, peer, read_timeout, start
        self._dormant = dormant
        self._body_first = body_first
        self._head = bytearray()
        #: How many bytes (head and body) to hold before the greenlet starts, once the head is whole.
        self._until: int | None = None
        self.accepted = time.monotonic()
        self._watcher: Any = gevent.get_hub().loop.io(sock.fileno(), 1)
        self._watcher.start(self._readable)
        dormant.add(self)
        if read_timeout > 0:
            _deadlines.add(self.accepted + read_timeout, self)
        # A client usually sends its request right after it connects, so by the time the loop accepts it
        # the head is there: read at once, and its greenlet starts a turn of the loop sooner than if it
        # waited for the next poll to say what the accept could have seen (a flooded loop's turn is a few
        # of the flood's requests). Nothing there yet costs one recv() that finds nothing.
        self._readable()

    def _end(self) -> bool:
        """No longer dormant (True the first time): its bytes go to the greenlet or nowhere."""
        if self not in self._dormant:
            return False
        self._dormant.discard(self)
        self._watcher.stop()
        self._watcher.close()
        return True

    def _readable(self) -> None:
        head = self._head
        try:
            data = self._sock._sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # the greenlet's own read meets the error again
        seen = len(head)
        head += data
        if data and not self._hand_over(seen):
            return
        if self._end():
            self._start(self.accepted, bytes(head), not data)

    def _hand_over(self, seen: int) -> bool:
        """Whether the greenlet takes over now that more has come (`seen` bytes were there before)."""
        if self._until is None:
            hold = self._hold(seen)
            if hold is None:
                return len(self._head) >= DORMANT_HEAD_BYTES
            if hold <= len(self._head):
                return True
            self._until = hold  # a whole head whose body is held first
        return len(self._head) >= self._until

    def _hold(self, seen: int) -> int | None:
        """How many bytes of the connection to hold before the parser takes it, as far as the head as it
        stands tells (`seen` bytes of it looked at before): 0 when the parser is needed now; where the part
        of the body to wait for ends, when a whole head's answer waits for its body; None while it can't
        say yet."""
        head = self._head
        line_end = head.find(b"\n")
        if line_end < 0:
            return None
        if not _PLAIN_REQUEST_LINE.fullmatch(head, 0, line_end + 1):
            return 0
        end = head.find(b"\r\n\r\n", max(0, seen - 3))
        stop = len(head) if end < 0 else end + 4  # what follows the head is body
        if head.count(b"\n", max(seen, 1), stop) != head.count(b"\r\n", max(0, seen - 1), stop):
            return 0  # a bare LF: refused at once
        if end < 0:
            return None
        return self._body_until(line_end + 1, end + 4) or 0

    def _body_until(self, headers: int, body: int) -> int | None:
        """How much of the connection to hold in all, when its whole head (header lines from `headers`,
        body from `body`) is one whose answer waits for a body of a plain Content-Length; else None."""
        if self._body_first is None:
            return None
        head = self._head
        if not _PLAIN_HEADERS.fullmatch(head, headers, body):
            return None
        fields: dict[bytes, list[bytes]] = {}
        for name, value in _BODY_HEADERS.findall(head, headers, body):
            fields.setdefault(name.lower(), []).append(value)
        lengths, hosts = fields.get(b"content-length", []), fields.get(b"host", [])
        if b"transfer-encoding" in fields or b"expect" in fields or len(lengths) != 1 or len(hosts) != 1:
            return None
        if not lengths[0].isdigit() or not _PLAIN_HOST.fullmatch(hosts[0]) or len(lengths[0]) > 15:
            return None
        length = int(lengths[0])
        method, target, _ = bytes(head[: headers - 2]).split(b" ", 2)
        if length == 0 or not self._body_first(method, target, length):
            return None
        return body + min(length, DORMANT_BODY_BYTES)

    def swept(self, now: float) -> None:
        if self._until is not None:
            self.close()  # a body part-way: its greenlet's read meets the deadline
        elif self._end():
            read_expired(self._peer, self._read_timeout)
            self._sock.close()

    def close(self) -> None:
        """Stopping: a connection that has sent nothing gets nothing; one part-way through its head is a
        request being read, and gets its greenlet to go on."""
        if self._end():
            if self._head:
                self._start(self.accepted, bytes(self._head), False)
            else:
                self._sock.close()


class GatedUnreader(SocketUnreader):
    """gunicorn's socket unreader, telling the reader before each read what it needs: a line (for a head,
    or a chunked body) or a number of bytes (what a body read of known length still misses). gunicorn
    loops until it has that much anyway; the reader does the waiting without waking the greenlet."""

    _size: int | None = None

    def read(self, size: int | None = None, read_ahead: int | None = None) -> bytes:
        self._size = size
        data: bytes = super().read(size, read_ahead)
        return data

    def chunk(self, size_hint: int | None = None) -> bytes:
        size = self._size
        self.sock.gate = LINE if size is None or size <= 0 else max(1, size - self.buf.tell())
        try:
            data: bytes = super().chunk(size_hint)
            return data
        finally:
            self.sock.gate = None


class RequestReader:
    """The connection as gunicorn's parser reads it, in three states.

    - *Waiting* for the first byte of a request: after a first request, for at most the keep-alive
      time (an idle connection is then closed, as the threaded worker does); before the first request,
      for at most -read-timeout. A stopping worker closes the connections in this state.
    - *Reading* a request: every read shares the -read-timeout deadline (DeadlineSocket), which counts
      from the first byte (from the connection's start for its first request).
    - *Draining* the unread rest of a body after the answer: reads are bounded by the drain's own
      timeout, which gunicorn sets.

    On a plain (not TLS) socket, a waiting or reading read sleeps on a watcher of the loop whose callback
    reads the socket, and wakes the greenlet only when `gate` is met: a client sending its head or its
    body a byte at a time costs a system call per byte, not a turn of the parser. Deadlines are swept
    (_Deadlines). TLS sockets and draining reads are read the plain gevent way.
    """

    def __init__(self, sock: Any, read_timeout: float, keepalive: float, peer: Any,
                 accepted: float | None = None, head: bytes = b"") -> None:
        self._sock = sock
        self._read_timeout = read_timeout
        self._keepalive = keepalive
        self._deadline = DeadlineSocket(sock, read_timeout, peer) if read_timeout > 0 else None
        self._first = True
        self.waiting = True
        self._draining = False
        self._caller_timeout: float | None = None
        #: What the next read needs before it wakes: None (any byte), LINE, or a number of bytes.
        self.gate: int | None = None
        plain = type(sock) is gevent.socket.socket
        self._raw: Any = getattr(sock, "_sock", None) if plain else None
        self._inbox = bytearray(head)  # what a DormantConnection read already
        self._eof = False
        self._error: OSError | None = None
        self._want = 0
        self._wait_began = time.monotonic() if accepted is None else accepted
        self._watcher: Any = None
        self._waiter: Waiter[bool] | None = None
        self._registered: float | None = None

    def request_started(self) -> None:
        """The parser has a request: it is being read even if no read was needed (its head came with
        the previous request, pipelined), so its body reads are under the deadline, not keep-alive's."""
        if self.waiting:
            self._begin(time.monotonic())

    def _begin(self, now: float) -> None:
        """The first byte of a request has come (at `now`): its deadline starts."""
        self.waiting = False
        if self._deadline is not None and self._deadline.deadline is None:
            self._deadline.deadline = (self._wait_began if self._first else now) + self._read_timeout
        self._first = False

    def request_done(self) -> None:
        """The answer is sent; what is read now is the rest of the body, until next_request()."""
        self._draining = True

    def next_request(self) -> None:
        self._draining = False
        self.waiting = True
        self._wait_began = time.monotonic()
        if self._deadline is not None:
            self._deadline.new_request()

    def settimeout(self, timeout: float | None) -> None:
        self._caller_timeout = timeout

    def gettimeout(self) -> float | None:
        return self._caller_timeout

    def recv(self, size: int) -> bytes:
        if self._raw is not None and not self._draining and self._caller_timeout is None:
            if self._inbox:
                share_loop()  # bytes already here: the read would not wait, and let no one else run
            return self._gated(size)
        share_loop()
        if self._inbox or self._eof:
            return self._take(size)
        if self.waiting:
            return self._first_bytes(size)
        if self._draining or self._deadline is None:
            return self._read(size, self._caller_timeout)
        self._deadline.settimeout(self._caller_timeout)
        return self._deadline.recv(size)

    # ----------------------------------------------------------------------------- plain sockets

    def _gated(self, size: int) -> bytes:
        self._want = size
        while not self._ready(size, self._inbox):
            deadline = self._current_deadline()
            if deadline is not None and time.monotonic() >= deadline:
                return self._expired(size)
            self._park(deadline)
        return self._take(size)

    def _ready(self, size: int, data: bytes | bytearray) -> bool:
        """Whether a read may return: the end, an error, or what `gate` asks for (`data`: what is new)."""
        if self._eof or self._error is not None:
            return True
        held = len(self._inbox)
        if not held:
            return False
        gate = self.gate
        if gate is None or held >= size:
            return True
        if gate == LINE:
            return b"\n" in data
        return held >= gate

    def _current_deadline(self) -> float | None:
        if not self.waiting:
            return None if self._deadline is None else self._deadline.deadline
        limit = self._read_timeout if self._first else self._keepalive
        return self._wait_began + limit if limit else None

    def _park(self, deadline: float | None) -> None:
        if deadline is not None and deadline != self._registered:
            _deadlines.add(deadline, self)
            self._registered = deadline
        if self._watcher is None:
            self._watcher = gevent.get_hub().loop.io(self._raw.fileno(), 1)
        waiter: Waiter[bool] = Waiter()
        self._waiter = waiter
        self._watcher.start(self._readable)
        try:
            waiter.get()
        finally:
            self._watcher.stop()
            self._waiter = None

    def _readable(self) -> None:
        """The loop's callback when the socket has bytes (or its end): read them; wake the greenlet only
        if its read can now return."""
        try:
            # RECV_SIZE at a time: a recv() allocates what it is asked for, and a slow client's byte must
            # not cost a megabyte's allocation. A fast body is read on while the pieces come full.
            data = piece = self._raw.recv(RECV_SIZE)
            while len(piece) == RECV_SIZE and len(self._inbox) + len(data) < self._want:
                try:
                    piece = self._raw.recv(RECV_SIZE)
                except (BlockingIOError, InterruptedError):
                    break
                data += piece
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._error, data = exc, b""
        if data:
            if self.waiting:
                self._begin(time.monotonic())
            self._inbox += data
        elif self._error is None:
            self._eof = True
        if self._waiter is not None and self._ready(self._want, data):
            self._watcher.stop()
            self._waiter.switch(True)

    def swept(self, now: float) -> None:
        """_Deadlines' call when a deadline this reader registered has come: wake it if it is still
        waiting and its deadline is past; register its later deadline if it has one."""
        self._registered = None
        if self._waiter is None:
            return  # not waiting: its next wait registers its deadline again
        deadline = self._current_deadline()
        if deadline is None:
            return
        if now >= deadline:
            self._watcher.stop()
            self._waiter.switch(False)
        else:
            _deadlines.add(deadline, self)
            self._registered = deadline

    def _expired(self, size: int) -> bytes:
        if not self.waiting:
            assert self._deadline is not None
            return self._deadline.recv(size)  # past its deadline: logs, and raises ClientReadTimeout
        if self._first and self._deadline is not None:
            self._deadline.deadline = self._wait_began
            return self._deadline.recv(size)
        return b""  # idle for longer than keep-alive: closed quietly, as an idle connection is

    def _take(self, size: int) -> bytes:
        inbox = self._inbox
        if not inbox:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            return b""
        if self.waiting:
            self._begin(time.monotonic())  # a pipelined request's bytes, read with the one before
        data = bytes(inbox[:size])
        del inbox[:size]
        return data

    # ------------------------------------------------------------------ TLS sockets, draining reads

    def _first_bytes(self, size: int) -> bytes:
        began = time.monotonic()
        limit = (self._read_timeout if self._first else self._keepalive) or None
        if self._first:
            limit = limit and max(0.001, self._wait_began + limit - began)
        else:
            self._wait_began = began
        try:
            data = self._read(size, limit)
        except TimeoutError:
            return self._expired(size)
        if data:
            self._begin(time.monotonic())
        return data

    def _read(self, size: int, timeout: float | None) -> bytes:
        self._sock.settimeout(timeout)
        try:
            data: bytes = self._sock.recv(size)
            return data
        finally:
            try:
                self._sock.settimeout(None)
            except OSError:
                pass

    def close_if_waiting(self) -> None:
        """Stopping: a connection waiting for a request gets none (its read sees the end at once)."""
        if self.waiting:
            shutdown_reading(self._sock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
