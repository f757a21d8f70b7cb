"""The hello exchange on both ends of a worker's connection to the run owner (docs/run-state.md, step 5):
what stands in for run/owner.py's `Owner` and run/ownerclient.py until runs go through the owner (step 6).
No run crosses the connection yet; each end only says who it is and keeps the connection open."""

from __future__ import annotations

import os
import select
import socket
import threading

from hookrunner.ops.log import log
from hookrunner.run.wire import VERSION, Message, PeerGone, WireError, receive, send

#: The JSON log's event of every line about the run owner (-log-format json).
EVENT = "run_owner"

#: How long a worker waits for the owner's hello before saying so in the log (it serves meanwhile).
HELLO_WAIT = 5.0


class Greeter:
    """The owner's side, with the calls serve/runowner.py makes of run/owner.py's `Owner`: `attach` takes a
    worker's connection (says hello, then reads it on a thread of its own until it ends) and `detach` lets
    it go. Every error on a connection is that worker's end, never the owner's."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._lock = threading.Lock()
        self._links: dict[int, socket.socket] = {}

    def attach(self, sock: socket.socket, worker_pid: int) -> None:
        with self._lock:
            old = self._links.pop(worker_pid, None)
            self._links[worker_pid] = sock
        if old is not None:
            _let_go(old)
        hello = Message("hello", {"version": VERSION, "owner": os.getpid(), "epoch": self.epoch})
        threading.Thread(
            target=self._serve, args=(sock, worker_pid, hello), name=f"worker-{worker_pid}", daemon=True
        ).start()

    def detach(self, worker_pid: int) -> None:
        with self._lock:
            sock = self._links.pop(worker_pid, None)
        log.output(f"worker {worker_pid} is gone; the run owner let its connection go", event=EVENT)
        if sock is not None:
            _let_go(sock)

    def attached(self) -> list[int]:
        with self._lock:
            return sorted(self._links)

    def _serve(self, sock: socket.socket, worker_pid: int, hello: Message) -> None:
        try:
            send(sock, hello)
            while True:
                try:
                    message, _ = receive(sock)
                except WireError:
                    continue  # dropped; the connection goes on
                if message.kind == "hello":
                    log.output(
                        f"worker {worker_pid} connected to the run owner "
                        f"(epoch {self.epoch}, protocol {message.get('version')})",
                        event=EVENT,
                    )
        except (PeerGone, OSError):
            pass  # the worker's end (or detach's shutdown)
        finally:
            with self._lock:
                if self._links.get(worker_pid) is sock:
                    del self._links[worker_pid]
            sock.close()


def _let_go(sock: socket.socket) -> None:
    # Shutting down wakes the reading thread, which closes its descriptor; the worker is gone by now.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def greet_owner(sock: socket.socket, pid: int, wait: float = HELLO_WAIT) -> threading.Thread:
    """The worker's side: send this worker's hello, then read the owner's hellos on a native thread (on both
    worker classes: it blocks nothing of the loop's) for as long as the connection lasts. A hello of a new
    epoch is a new owner, which is greeted again. An owner that does not answer within `wait` seconds is
    logged once; the worker serves regardless."""

    def hello() -> None:
        send(sock, Message("hello", {"version": VERSION, "pid": pid, "generation": 0}))

    def read() -> None:
        epoch = None
        waited = False
        incoming = select.poll()  # not select(): a worker's descriptors may pass FD_SETSIZE
        incoming.register(sock, select.POLLIN)
        try:
            hello()
            while True:
                ready = incoming.poll(None if waited or epoch is not None else wait * 1000)
                if not ready:
                    waited = True
                    silent = f"worker {pid}: no hello from the run owner within {wait:g}s; serving anyway"
                    log.output(silent, event=EVENT)
                    continue
                try:
                    message, _ = receive(sock)
                except WireError:
                    continue
                if message.kind != "hello":
                    continue
                if epoch is not None and message.get("epoch") != epoch:
                    hello()  # a new owner: requests sent to the old one would be failed here (step 6)
                epoch = message.get("epoch")
        except (PeerGone, OSError, ValueError):
            pass  # the master is gone, or the worker is stopping

    thread = threading.Thread(target=read, name="run-owner-link", daemon=True)
    thread.start()
    return thread
