"""How the run history's events get from the worker processes to the admin listener's process: one private
Unix socket (in a 0700 folder the master makes), a connection per worker, length-prefixed JSON messages
after a challenge on a random key (multiprocessing.connection). A worker never waits for the admin
listener: its events go through a bounded queue on a thread of its own, and are dropped (counted, logged
once) when the listener cannot keep up or is gone."""

from __future__ import annotations

import json
import queue
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from hookrunner.ops.log import log
from hookrunner.run.processes import identify
from hookrunner.state.model import Event

#: Events waiting to be sent from one worker; past this they are dropped.
QUEUE_SIZE = 10000
#: Seconds between tries to accept a worker's connection after an error (EMFILE).
ACCEPT_RETRY = 0.5


class FeedClient:
    """A worker's side: `send` never blocks; a thread sends the events in order."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self._address = address
        self._authkey = authkey
        self._queue: queue.Queue[Event | None] = queue.Queue(QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    def send(self, event: Event) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="history-feed", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._dropped()

    def _dropped(self) -> None:
        self.dropped += 1
        if self.dropped == 1:
            log.output("run history: the admin listener does not keep up; dropping run events")

    def _serve(self) -> None:
        connection: Connection | None = None
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                data = json.dumps(event, ensure_ascii=True).encode("ascii")
                if connection is None:
                    connection = Client(self._address, family="AF_UNIX", authkey=self._authkey)
                connection.send_bytes(data)
            except (OSError, EOFError, ValueError) as exc:
                if connection is not None:
                    connection.close()
                    connection = None
                self._dropped()
                if self.dropped == 1:
                    log.output(f"run history: cannot reach the admin listener: {exc}")
            finally:
                self._queue.task_done()

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the queued events to be sent; returns whether they were."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        if self._thread is None:
            return True
        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)


class FeedServer:
    """The admin listener's side: accepts the workers' connections and hands each event to `apply`."""

    def __init__(self, address: str, authkey: bytes, apply: Any, gone: Any = None) -> None:
        """`apply(event)` for each event; `gone(pid)` when a worker's connection ends with the worker."""
        self._listener = Listener(address, family="AF_UNIX", authkey=authkey)
        self._apply = apply
        self._gone = gone
        self._closed = False
        self.failures = 0

    @property
    def address(self) -> str:
        return str(self._listener.address)

    def start(self) -> None:
        threading.Thread(target=self._accept, name="history-feed-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                # Out of file descriptors, say: the workers' connections are taken again once it passes.
                log.output(f"run history: accepting a worker's connection failed: {exc}")
                time.sleep(ACCEPT_RETRY)
                continue
            except Exception:  # noqa: BLE001 - a peer that fails the challenge is simply not served
                continue
            threading.Thread(
                target=self._receive, args=(connection,), name="history-feed", daemon=True
            ).start()

    def _receive(self, connection: Connection) -> None:
        pid = 0
        with connection:
            while True:
                try:
                    data = connection.recv_bytes()
                except (EOFError, OSError):
                    break
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                if isinstance(event.get("pid"), int):
                    pid = event["pid"]
                try:
                    self._apply(event)
                except Exception as exc:  # noqa: BLE001 - one bad event must not stop the feed
                    self.failures += 1
                    if self.failures == 1:  # once: a full disk would otherwise log every event
                        log.output(f"run history: cannot record an event: {exc}")
        # The connection ended: if its worker did too (killed, or stopped), its runs still open never end.
        if pid and self._gone is not None and process_ended(pid):
            self._gone(pid)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def process_ended(pid: int, wait: float = 2.0) -> bool:
    """Whether process `pid` is gone or a zombie, waiting up to `wait` seconds for it to be."""
    deadline = time.monotonic() + wait
    while identify(pid) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
