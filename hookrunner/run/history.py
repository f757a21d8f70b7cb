"""The run history, as a worker sees it: one record per run (immediate, queued, coalesced, replayed or
refused), told as events (accepted, started, ended) to a sink; the admin listener's store puts the events
together (state/historystore.py). docs/history.md says what a record holds.

A record never holds the values of a run's environment variables or the contents of its files, only their
names and sizes; argv is kept as the command saw it. Nothing here knows HTTP.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from hookrunner.run.liveoutput import OutputBatcher
from hookrunner.state.model import (
    CANCELLED,
    COALESCED,
    FAILED,
    IMMEDIATE,
    OK,
    PENDING,
    QUEUED,
    REFUSED,
    RUNNING,
    SERVED_BY_RUN,
    TIMED_OUT,
    Event,
    record_key,
)

#: The scheduler's words for how it admitted a run, as record kinds.
_KIND_OF = {"started": IMMEDIATE, "queued": QUEUED, "coalesced": COALESCED}

_EXIT = re.compile(r"exit status (-?[0-9]+)")
_SIGNAL = re.compile(r"signal: (.+?)\)?$")


class Spec(Protocol):
    """What a record keeps of a prepared run (journal.RunSpec)."""

    @property
    def argv(self) -> tuple[str, ...]: ...

    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def files(self) -> tuple[tuple[str, bytes], ...]: ...

    @property
    def cwd(self) -> str: ...


def classify(error: str | None) -> dict[str, Any]:
    """A run's outcome, exit code and signal from the executor's error text (Go's wording); None is ok."""
    if error is None:
        return {"outcome": OK, "exit_code": 0, "signal": None, "detail": ""}
    exit_match = _EXIT.search(error)
    signal_match = _SIGNAL.search(error)
    if error.startswith("command timed out"):
        outcome = TIMED_OUT
    elif error.startswith("not started: hookrunner is shutting down"):
        outcome = CANCELLED
    else:
        outcome = FAILED
    return {
        "outcome": outcome,
        "exit_code": int(exit_match.group(1)) if exit_match else None,
        "signal": signal_match.group(1) if signal_match else None,
        "detail": error,
    }


def output_fields(output: bytes, keep: int) -> dict[str, Any]:
    """The last `keep` bytes of a run's output, base64 (it may be any bytes), and its whole size."""
    tail = output[-keep:] if keep > 0 else b""
    return {
        "output": base64.b64encode(tail).decode("ascii"),
        "output_size": len(output),
        "output_truncated": len(tail) < len(output),
    }


class Ticket:
    """One run's record, as the executor reports on it; each method sends one event to the sink."""

    def __init__(self, recorder: Recorder, key: str, run_id: str, hook_id: str) -> None:
        self._recorder = recorder
        self.key = key
        self.run_id = run_id
        self.hook_id = hook_id
        self.started_at = 0.0
        self.ended = False

    def admitted(self, how: str) -> None:
        """The scheduler took it: `started`, `queued` or `coalesced` (or `replayed` for a left-over)."""
        self._recorder.send(self, {"kind": _KIND_OF.get(how, how)})

    def refused(self, reason: str) -> None:
        """Not run at all (a full queue, a replay that cannot be made): the record ends here."""
        now = time.time()
        self._recorder.end(self, {"kind": REFUSED, "outcome": REFUSED, "detail": reason, "ended_at": now})

    def started(self, spec: Spec) -> None:
        self.started_at = time.time()
        self._recorder.send(
            self,
            {
                "outcome": RUNNING,
                "started_at": self.started_at,
                "argv": list(spec.argv),
                # Names and sizes only: values and contents may be secrets.
                "env": [[name, len(value.encode("utf-8", "surrogateescape"))] for name, value in spec.env],
                "files": [[name, len(data)] for name, data in spec.files],
                "cwd": spec.cwd,
            },
        )

    def output(self, chunk: bytes) -> None:
        """Its command printed `chunk` (told as it is read): sent to the history in batches while it runs."""
        if not self.ended:
            self._recorder.batcher.chunk(self.key, chunk)

    def finished(self, output: bytes, error: str | None, cancelled: bool = False) -> None:
        """Its command ended (or could not start); `cancelled`: the stop of hookrunner ended it."""
        fields = classify(error)
        if cancelled and fields["outcome"] != OK:
            fields["outcome"] = CANCELLED
        fields.update(output_fields(output, self._recorder.output_limit))
        fields["ended_at"] = time.time()
        self._recorder.end(self, fields)

    def served_by_run(self, error: str | None) -> None:
        """Its request was coalesced into a later one, whose run has ended: the same outcome, no output."""
        fields = classify(error)
        fields["detail"] = (f"{SERVED_BY_RUN}; " + fields["detail"]).rstrip("; ")
        fields["ended_at"] = time.time()
        self._recorder.end(self, fields)


class Recorder:
    """Makes a ticket per run and sends its events, in order, to `sink`; knows the tickets still open so
    that a stop can close them (cancelled)."""

    def __init__(
        self, sink: Callable[[Event], None], output_limit: int = 64 << 10, replica: str | None = None
    ) -> None:
        self.sink = sink
        #: With a shared run state (-state-url), this replica's name: a record's key is then its run's
        #: (record_key), so that whichever replica runs it tells the one record (state/pghistory.py).
        self.replica = replica
        self.output_limit = max(output_limit, 0)
        #: A running run's output, sent while it runs (the live log); its final event still has it all.
        self.batcher = OutputBatcher(sink, self.output_limit)
        self._lock = threading.Lock()
        self._open: dict[str, Ticket] = {}
        self._serial = itertools.count(1)
        self._prefix = f"{os.getpid()}.{time.time_ns()}"  # unique to this process: keys of its tickets

    def ticket(self, run_id: str, hook_id: str, accepted_at: float | None = None) -> Ticket:
        accepted_at = accepted_at or time.time()
        if self.replica is None:
            key = f"{self._prefix}.{next(self._serial)}"
        else:
            key = record_key(self.replica, run_id, accepted_at)
        ticket = self._open_ticket(key, run_id, hook_id)
        self.sink(
            {
                "event": "run",
                "key": key,
                "id": run_id,
                "hook": hook_id,
                "accepted_at": accepted_at,
                "outcome": PENDING,
                "pid": os.getpid(),
            }
        )
        return ticket

    def adopt(self, admitted_by: str, run_id: str, hook_id: str, accepted_at: float) -> Ticket:
        """The record another replica made when it admitted the run this replica runs now (a shared
        state's): its events from here on tell that record, not a new one."""
        key = record_key(admitted_by, run_id, accepted_at)
        ticket = self._open_ticket(key, run_id, hook_id)
        # Which run it is, should these events be folded before the admitting replica's own.
        # `waited`: it was not started when admitted (this is its first claim, and another's), so it waited;
        # the kind the record has should the admitting replica's own events never come (it died first).
        event = {"event": "run", "key": key, "id": run_id, "hook": hook_id, "accepted_at": accepted_at}
        self.sink({**event, "waited": "queued"})
        return ticket

    def _open_ticket(self, key: str, run_id: str, hook_id: str) -> Ticket:
        ticket = Ticket(self, key, run_id, hook_id)
        with self._lock:
            self._open[key] = ticket
        return ticket

    def send(self, ticket: Ticket, fields: Event) -> None:
        with self._lock:
            if ticket.ended:
                return
        self.sink({"event": "run", "key": ticket.key, **fields})

    def end(self, ticket: Ticket, fields: Event) -> None:
        with self._lock:
            if ticket.ended:
                return
            ticket.ended = True
            self._open.pop(ticket.key, None)
        self.batcher.forget(ticket.key)
        self.sink({"event": "run", "key": ticket.key, **fields})

    def replaying(self, run_id: str, hook_id: str, accepted_at: float) -> None:
        """A run a stopped hookrunner left unfinished is run again: its earlier record says so."""
        event = {"event": "replaying", "id": run_id, "hook": hook_id, "accepted_at": accepted_at}
        self.sink({**event, "pid": os.getpid()})

    def cancel_open(self, reason: str) -> int:
        """The process is stopping without these runs: each record ends cancelled; returns how many."""
        with self._lock:
            tickets = list(self._open.values())
        now = time.time()
        for ticket in tickets:
            self.end(ticket, {"outcome": CANCELLED, "detail": reason, "ended_at": now})
        return len(tickets)

    def hooks(self, files: list[dict[str, Any]]) -> None:
        """The hooks this worker serves now, per file (id list and load time)."""
        self.sink({"event": "hooks", "pid": os.getpid(), "files": files})
