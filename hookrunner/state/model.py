"""What the run state holds, shared by its stores and the run path: a prepared run (RunSpec), a process by
pid and start time (ProcessId), and the run history's events with the words for a run's kind and outcome.
Nothing here starts a process or knows HTTP."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

#: How a run was admitted (the record's `kind`).
IMMEDIATE = "immediate"
QUEUED = "queued"
COALESCED = "coalesced"
REPLAYED = "replayed"
REFUSED = "refused"
KINDS = (IMMEDIATE, QUEUED, COALESCED, REPLAYED, REFUSED)

#: How a run ended (the record's `outcome`); `pending` and `running` while it has not.
PENDING = "pending"
RUNNING = "running"
OK = "ok"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
OUTCOMES = (PENDING, RUNNING, OK, FAILED, TIMED_OUT, REFUSED, REPLAYED, CANCELLED)
FINAL_OUTCOMES = (OK, FAILED, TIMED_OUT, REFUSED, REPLAYED, CANCELLED)
#: The detail of a request's record whose run a later request's run (coalesced into it) ran instead.
SERVED_BY_RUN = "coalesced: a later request's run ran instead"


def record_key(admitted_by: str, run_id: str, accepted_at: float) -> str:
    """The key of a run's record in a shared history: `@`, the replica that admitted its request, the
    request's id and when it was accepted (what the run state keeps of it, so any replica can name it)."""
    return f"@{admitted_by} {run_id} {accepted_at!r}"


Event = dict[str, Any]


@dataclass(frozen=True)
class RunSpec:
    """Everything needed to start a run again: what the executor prepared from the request."""

    hook_id: str
    request_id: str
    command: str  # the hook's execute-command, resolved again when run
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # the hook's variables, over the serving process's environment
    files: tuple[tuple[str, bytes], ...]  # (variable name, contents) of pass-file-to-command
    cwd: str

    def to_json(self) -> str:
        # ensure_ascii: argv and values may carry lone surrogates (undecodable bytes), which SQLite's
        # UTF-8 text cannot hold but JSON escapes can.
        return json.dumps(
            {
                "command": self.command,
                "argv": list(self.argv),
                "env": [list(pair) for pair in self.env],
                "files": [[name, base64.b64encode(data).decode("ascii")] for name, data in self.files],
                "cwd": self.cwd,
            },
            ensure_ascii=True,
        )

    @classmethod
    def from_json(cls, hook_id: str, request_id: str, text: str) -> RunSpec:
        data = json.loads(text)
        return cls(
            hook_id=hook_id,
            request_id=request_id,
            command=str(data["command"]),
            argv=tuple(str(a) for a in data["argv"]),
            env=tuple((str(k), str(v)) for k, v in data["env"]),
            files=tuple((str(n), base64.b64decode(d)) for n, d in data["files"]),
            cwd=str(data["cwd"]),
        )


@dataclass(frozen=True)
class ProcessId:
    """A process, by its pid and its start time (clock ticks after boot, /proc/<pid>/stat field 22)."""

    pid: int
    start: int


#: How long an embedded backend's claim lasts: the owner's life (no other claimer on the host).
FOREVER = float("inf")


@dataclass(frozen=True)
class Claim:
    """A run this replica may start now, held by it: the run's id, what to start, which attempt this is (a
    finish or a process record from another attempt is refused) and until when the claim holds unless
    renewed (wall-clock seconds; FOREVER for the embedded backend). `previous`: what still ran of the run's
    earlier attempt, as recorded, to be ended before this one starts. Attempts count the run's claims from 1
    (state/backend.py's RunState.claims says how)."""

    run_id: int
    spec: RunSpec
    attempt: int = 1
    lease_until: float = FOREVER
    accepted_at: float = 0.0
    previous: tuple[ProcessId, ...] = ()
    replayed: bool = False
    #: The replica that admitted the request whose spec the run holds (a shared state's; "" on one host):
    #: with accepted_at and the request id, which history record the run is.
    admitted_by: str = ""
    #: Whether a request may wait for the run's output elsewhere (admitted with, or coalesced into by, a
    #: capture or a stream, and not started at its own admission): a shared state keeps the output its
    #: finish is given, for the replica where that request waits.
    keep_output: bool = False


@dataclass(frozen=True)
class Admission:
    """How a run was admitted: `how` is STARTED, QUEUED or COALESCED (state/slots.py's words); `run_id`
    the run that stands for the request (for COALESCED, the waiting run it was folded into); `claim` is set
    when the run may start now (held by this replica), None when it waits for a place."""

    how: str
    run_id: int
    claim: Claim | None = None


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the journal writes it: `exit status 0`, Go's error text, or a `not run: ...` /
    `not replayed: ...` reason; `output`, the command's combined output when it is known (given to finish,
    and read back by `outcomes` where the backend keeps it for a waiting request), else None."""

    status: str
    output: bytes | None = None


@dataclass(frozen=True)
class Counts:
    """Runs holding a place and runs waiting, in all and per hook (for /metrics and readiness)."""

    running: int
    queued: int
    per_hook: tuple[tuple[str, int, int], ...] = ()  # (hook id, running, queued)
