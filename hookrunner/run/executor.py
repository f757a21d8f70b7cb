"""Running a hook's command: path lookup, argv, HOOK_ environment, temp files, combined output."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from hookrunner.errors import CommandNotFound
from hookrunner.golang.exec import start_problem
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.syscall import errno_text, exit_text
from hookrunner.hooks.command import resolve_command
from hookrunner.hooks.model import Hook, Limits
from hookrunner.hooks.request import Request
from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.run.claimed import NOT_STARTED, ClaimedRuns, Held
from hookrunner.run.history import Recorder, Ticket
from hookrunner.run.prepare import coalesce_group, inherited_environment, prepare
from hookrunner.run.processes import ProcessTracker, RunProcesses, end_previous_attempt
from hookrunner.run.spawn import Exit, Listener, Output, Process, Waits, start_process
from hookrunner.run.startwait import START_WAIT, OnStarted, StartWaits, told_once
from hookrunner.run.tempfiles import create_temp, write_temp
from hookrunner.state.backend import RunState, StateUnavailable
from hookrunner.state.embedded import EmbeddedState
from hookrunner.state.journal import Journal, JournalUnwritable, LeftOver, RunSpec, accepts_runs
from hookrunner.state.model import Claim, Outcome, ProcessId, record_key
from hookrunner.state.slots import Busy

_TIMED_OUT = "command timed out after"


@dataclass(frozen=True)
class CommandResult:
    """Combined stdout+stderr and, when the command failed, Go's error text for it."""

    output: bytes
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        """Ended at its command timeout (the error text _spawn gives it)."""
        return self.error is not None and self.error.startswith(_TIMED_OUT)


class CommandRunner:
    """Runs hook commands, each in its own process group, within timeouts and concurrency limits."""

    def __init__(
        self,
        command_timeout: float = 0.0,
        max_concurrent: int = 0,
        kill_grace: float = 5.0,
        adopt_orphans: bool = False,
    ) -> None:
        """`adopt_orphans`: the serving worker, whose only children are commands, makes itself their
        subreaper (run/processes.py), so that no process a run starts escapes it."""
        self.command_timeout = command_timeout
        self.kill_grace = kill_grace
        self._tracker = ProcessTracker(adopt_orphans)
        #: How a request waits for the run whose output it answers with. A serving worker whose requests
        #: are greenlets replaces it with a wait that does not block its event loop (greenworker).
        self.wait_for: Callable[[Future[CommandResult]], CommandResult] = Future.result
        #: How runs wait on their processes, and where they run (run/spawn.py): on command threads by
        #: default; the gevent worker sets its event loop's (serve/greenruns.py) with use().
        self.waits = Waits()
        # Background runs' answers that wait for their start (start(), on the gevent worker).
        self._starts = StartWaits()
        #: How long a background run's answer waits for its start (START_WAIT).
        self.start_wait = START_WAIT
        self._lock = threading.Lock()
        self._processes: set[Process] = set()
        # Set when shutdown gives up waiting: queued runs must not start commands the exiting process
        # would leave behind (each in a process group of its own, nothing would end them).
        self._closing = False
        self._max_concurrent = max_concurrent
        self._journal: Journal | None = None
        #: A hook by id as the hooks are now: for runs this process did not admit (the journal's left-overs,
        #: another replica's runs); the run owner sets its registry's.
        self.find: Callable[[str], Hook | None] = lambda hook_id: None
        # The journal's left-overs announced (logged, recorded) and not yet claimed: their hook and ticket.
        self._replays: dict[int, tuple[Hook | None, str, Ticket | None]] = {}
        #: Where runs are admitted, claimed and finished (run/claimed.py on a state/backend.py RunState).
        self.runs = ClaimedRuns(self._embedded(None))
        self.runs.foreign = self._foreign
        self.runs.lose = self._lose
        #: The run history (-admin-addr; run/history.py), attached in the serving process; None: no records.
        self.history: Recorder | None = None

    def use(self, waits: Waits) -> None:
        """Run and wait the way `waits` does (before any run is admitted)."""
        self.waits = waits
        self.runs.waits = waits

    def _embedded(self, journal: Journal | None) -> EmbeddedState:
        owner = journal.owner if journal is not None else ""
        limits = self._limits_of
        return EmbeddedState(
            journal, self._max_concurrent, owner, limits=limits, on_left_overs=self._left_overs
        )

    @property
    def journal(self) -> Journal | None:
        """The run journal (-state-dir), attached in the serving process; None: runs live in memory only."""
        return self._journal

    @journal.setter
    def journal(self, journal: Journal | None) -> None:
        """Attach (or detach) the journal, before any run is admitted: the embedded state is made anew."""
        self._journal = journal
        self.runs.state = self._embedded(journal)

    def use_state(self, state: RunState) -> None:
        """Admit, claim and finish through `state` (PostgreSQL's, shared by replicas), before any run."""
        self._journal = None
        self.runs.state = state

    @property
    def state(self) -> RunState:
        return self.runs.state

    def accepts_runs(self) -> bool:
        """Readiness: the journal, with one, can be written. A shared state's database is not asked: every
        replica's, its outage must not take them all out of a load balancer at once (docs/operations.md)."""
        return accepts_runs(self._journal) if isinstance(self.runs.state, EmbeddedState) else True

    @property
    def running(self) -> int:
        """Commands whose process is alive now (with a shared state: runs holding places, every replica's)."""
        if not isinstance(self.runs.state, EmbeddedState):
            return self._counts()[0]
        with self._lock:
            return len(self._processes)

    @property
    def queued(self) -> int:
        """Runs admitted but waiting for a free slot."""
        return self._counts()[1]

    def _counts(self) -> tuple[int, int]:
        try:
            counts = self.runs.state.counts()
        except StateUnavailable:
            return 0, 0
        return counts.running, counts.queued

    def submit(
        self, hook: Hook, req: Request, started_first: bool = False, on_output: Listener | None = None
    ) -> Future[CommandResult]:
        """Admit a run under the hook's limits; raises Busy when it is at its limit with a full queue, and
        JournalUnwritable when the journal cannot record it (with one, the run is written down durably
        before it is admitted, so before the answer). With `started_first`, where runs are launched on the
        serving loop (the gevent worker), a run admitted to start now has started its process (or failed to)
        when this returns, or has waited `start_wait` for a core, unless it is the only one answered and not
        yet started (STARTS_AHEAD): the loop answers no faster than it starts commands, and leaves no backlog.
        `on_output` is told each chunk of this run's output as it is read (a coalesced request's: nothing)."""
        if not (started_first and self.waits.launches):
            return self._submit(hook, req, on_output)[0]

        def admit(on_started: OnStarted) -> tuple[Future[CommandResult], bool]:
            spec, group = prepare(hook, req), coalesce_group(hook, req)
            future, _how, now = self._admit(hook, spec, group, on_output, on_started)
            return future, now

        return self._starts.answer(self.waits.event(), admit, self.start_wait)

    @property
    def ahead(self) -> int:
        """Background runs answered before their process started that have not started yet."""
        return self._starts.ahead

    def _submit(
        self, hook: Hook, req: Request, on_output: Listener | None = None
    ) -> tuple[Future[CommandResult], str]:
        """submit(), and how the run was admitted (`started`, `queued` or `coalesced`)."""
        # A queued run keeps what its command needs (argv, variables, files), not the request.
        return self.submit_prepared(hook, prepare(hook, req), coalesce_group(hook, req), on_output)

    def submit_prepared(
        self,
        hook: Hook,
        spec: RunSpec,
        group: str | None,
        on_output: Listener | None = None,
        on_started: OnStarted | None = None,
        keep: bool = False,
    ) -> tuple[Future[CommandResult], str]:
        """Admit a run prepared elsewhere (the run owner's, from a worker's `run` message: run/owner.py) of
        coalesce group `group`, as submit() does; returns its future and how it was admitted. `on_started`
        is told this run's start (its pid), or its end without one (None): not a coalesced request's.
        `keep`: its request waits for its output (kept if it runs elsewhere)."""
        return self._admit(hook, spec, group, on_output, on_started, keep)[:2]

    def _admit(
        self,
        hook: Hook,
        spec: RunSpec,
        group: str | None,
        on_output: Listener | None,
        on_started: OnStarted | None = None,
        keep: bool = False,
    ) -> tuple[Future[CommandResult], str, bool]:
        """Admit through the run state (with a journal, the run is written down first); returns the future,
        how, and whether the run holds its claim now. Raises Busy, JournalUnwritable or StateUnavailable."""
        accepted_at = time.time()  # the ticket's and the state's: a shared history's record key has it
        history = self.history
        ticket = history.ticket(spec.request_id, hook.id, accepted_at) if history is not None else None

        def work(claim: Claim, held: Held) -> tuple[CommandResult, str]:
            # A coalesced request's run starts with the newest request's work (its hook, ticket, stream);
            # with a shared state the newest request may be another replica's: its record tells the run.
            ticket_now = self._adopted(claim, ticket)
            result = self._claimed_run(hook, claim, held, ticket_now, on_output, on_started)
            return result, result.error or "exit status 0"

        try:
            future, how, now = self.runs.admit(spec, hook.limits, group, work, accepted_at, keep)
        except Busy:
            _refused(ticket)
            raise
        except StateUnavailable as exc:
            if isinstance(exc.__cause__, JournalUnwritable):
                _refused(ticket, "not run: the run journal cannot be written (503)")
                raise exc.__cause__ from None
            _refused(ticket, "not run: the run state is unavailable (503)")
            raise
        if how != "started":
            log.request(spec.request_id, f"{hook.id} is at its concurrency limit; run {how}")
        result: Future[CommandResult] = future  # type: ignore[assignment]
        _admitted(ticket, result, how)
        return result, how, now

    def claim_now(self) -> int:
        """Start what the run state lets this process start now (at start: the journal's left-overs)."""
        return self.runs.claim_now()

    def _limits_of(self, hook_id: str) -> Limits:
        hook = self.find(hook_id)
        return hook.limits if hook is not None else Limits()

    def _left_overs(self, left_overs: list[LeftOver]) -> None:
        """The journal's left-overs, claimed by the embedded state: each is announced now (the log, the run
        history), in the journal's order, and run once its places are free."""
        if left_overs:
            log.output(f"run journal: {len(left_overs)} unfinished run(s) left by a stopped hookrunner")
        for left in left_overs:
            self._replays[left.run_id] = self._announce(left.run_id, left.spec, left.accepted_at, True)

    def _adopted(self, claim: Claim, mine: Ticket | None = None) -> Ticket | None:
        """The record a shared state's first attempt tells: its request's (`mine`, or another's)."""
        if self.history is None or not claim.admitted_by or claim.replayed:
            return mine
        spec = claim.spec
        if mine is not None and mine.key == record_key(claim.admitted_by, spec.request_id, claim.accepted_at):
            return mine
        return self.history.adopt(claim.admitted_by, spec.request_id, spec.hook_id, claim.accepted_at)

    def _announce(
        self, run_id: int, spec: RunSpec, accepted_at: float, replayed: bool, adopted: Ticket | None = None
    ) -> tuple[Hook | None, str, Ticket | None]:
        """A run this process did not admit: its hook now, why it will not run ("": it will), its ticket
        (`adopted`: the record its admitting replica made, else one of its own)."""
        hook = self.find(spec.hook_id)
        history = self.history
        ticket = adopted
        if ticket is None and history is not None:
            ticket = history.ticket(spec.request_id, spec.hook_id)
        if hook is None or (replayed and not hook.replay):
            why = "no such hook" if hook is None else "replay is false"
            log.output(
                f"not replaying run {run_id} of hook {spec.hook_id}: "
                + ("no such hook any more" if hook is None else "the hook has replay: false")
            )
            _refused(ticket, f"not replayed: {why}")
            return hook, why, None
        if replayed:
            log.output(f"replaying run {run_id} of hook {hook.id}, accepted at {_utc(accepted_at)}")
            if history is not None:
                history.replaying(spec.request_id, spec.hook_id, accepted_at)
            metrics.record_journal("replayed")
        if ticket is not None and adopted is None:
            ticket.admitted("replayed" if replayed else "started")
        return hook, "", ticket

    def _foreign(self, claim: Claim, held: Held) -> str:
        """Run a claim of a run this process did not admit: a journal's left-over, a run taken over after its
        holder's lease and grace, or another replica's queued run; the status its finish records."""
        announced = self._replays.pop(claim.run_id, None)
        if announced is None:
            announced = self._announce(
                claim.run_id, claim.spec, claim.accepted_at, claim.replayed, self._adopted(claim)
            )
        hook, why, ticket = announced
        if hook is None or why:
            # Its output has no reader and its timeout no keeper any more: it is ended all the same.
            self.waits.offload(self._end_previous, claim.run_id, claim.previous)
            status = f"not replayed: {why}"
            self.runs.state.refuse(claim, Outcome(status))
            return status
        return self._claimed_run(hook, claim, held, ticket).error or "exit status 0"

    def _lose(self, held: Held) -> None:
        """A claim lost with its lease: its processes are killed at once (another replica may run it)."""
        if isinstance(held.handle, RunProcesses):
            self._tracker.end([held.handle], 0.0, self.waits.sleep)

    def _end_previous(self, run_id: int, previous: tuple[ProcessId, ...]) -> None:
        if not previous:
            return
        ended = end_previous_attempt(previous, self.kill_grace)
        if ended:
            pids = " ".join(str(process.pid) for process in ended)
            log.output(f"run {run_id}: ended what still ran of its previous attempt (pids {pids})")

    def _claimed_run(
        self,
        hook: Hook,
        claim: Claim,
        held: Held | None,
        ticket: Ticket | None = None,
        on_output: Listener | None = None,
        on_started: OnStarted | None = None,
    ) -> CommandResult:
        spec = claim.spec
        told = told_once(on_started)
        try:
            if claim.previous:
                self.waits.offload(self._end_previous, claim.run_id, claim.previous)
            return self.execute(hook, spec, held, ticket, on_output, told)
        except Exception as exc:  # noqa: BLE001 - a background command must never die silently
            log.request(spec.request_id, f"error running command: {exc}")
            return CommandResult(b"", str(exc))
        finally:
            if told is not None:
                told(None)  # not started at all: its answer waits no more

    def start(self, hook: Hook, req: Request) -> None:
        """Run in the background (webhook's `go handleHook`); raises Busy like submit."""
        self.submit(hook, req, started_first=True)

    def run(self, hook: Hook, req: Request) -> CommandResult:
        """Run the hook's command for this request and wait for it."""
        return self.execute(hook, prepare(hook, req))

    def execute(
        self,
        hook: Hook,
        spec: RunSpec,
        held: Held | None = None,
        ticket: Ticket | None = None,
        on_output: Listener | None = None,
        on_started: OnStarted | None = None,
    ) -> CommandResult:
        """Run a prepared run (from a request, or replayed from the journal) and wait for it; `held`: its
        claim, on which its processes are recorded; its record in the run history (`ticket`) is told
        when it starts, as its output comes (the live log) and when it ends; `on_output`, each chunk of
        its output as it is read; `on_started`, its process's pid once started."""
        if ticket is None:
            return self._execute(hook, spec, held, on_output, on_started)
        ticket.started(spec)
        result = CommandResult(b"", "error running command")
        try:
            result = self._execute(hook, spec, held, _both(ticket.output, on_output), on_started)
        finally:
            ticket.finished(result.output, result.error, cancelled=self._closing)
        return result

    def _execute(
        self,
        hook: Hook,
        spec: RunSpec,
        held: Held | None = None,
        on_output: Listener | None = None,
        on_started: OnStarted | None = None,
    ) -> CommandResult:
        rid = spec.request_id
        try:
            path = resolve_command(hook)
        except CommandNotFound as exc:
            log.request(rid, f"error in {exc}")
            if " " in hook.execute_command:
                first = hook.execute_command.split()[0]
                log.request(rid, f"use 'pass-arguments-to-command' to specify args for '{first}'")
            metrics.record_run(hook.id, "not_found", None)
            return CommandResult(b"", str(exc))

        argv = list(spec.argv)
        envs = [f"{key}={value}" for key, value in spec.env]
        files: list[str] = []
        for envname, data in spec.files:
            try:
                fd, name = create_temp(spec.cwd, envname)
            except OSError as exc:
                log.request(rid, f"error creating temp file [{exc.strerror}]")
                continue
            log.request(rid, f"writing env {envname} file {name}")
            try:
                write_temp(fd, name, data)
            except OSError as exc:  # as webhook: the variable is left unset (write_temp removed the file)
                log.request(rid, f"error writing file {name} [{exc.strerror}]")
                continue
            files.append(name)
            envs.append(f"{envname}={name}")

        env = inherited_environment()
        for entry in envs:
            key, _, value = entry.partition("=")
            env[key] = value
        cwd = spec.cwd
        if log.wants("command_started"):  # the quoting is not free, and serves only the log
            quoted = " ".join(go_quote(a) for a in argv)
            log.request(
                rid,
                f"executing {spec.command} ({path}) with arguments [{quoted}] "
                f"and environment [{' '.join(envs)}] using {cwd} as cwd\n",
                hook=hook.id,
                event="command_started",
            )
        timeout = hook.command_timeout or self.command_timeout
        started = time.monotonic()
        output, error = self._spawn(path, argv, env, cwd or None, timeout, rid, held, on_output, on_started)
        if held is not None:  # its finish keeps it for a request waiting on another replica
            held.output = output
        metrics.record_run(hook.id, metrics.exit_status_label(error), time.monotonic() - started)
        # With no whole copy of the output: it is the one copy the run holds (ops/log.py, request_output).
        log.request_output(rid, "command output: ", output, hook=hook.id, event="command_output")
        if error is not None:
            log.request(rid, f"error occurred: {error}\n", hook=hook.id, event="command_failed")
        for name in files:
            log.request(rid, f"removing file {name}\n")
            try:
                os.remove(name)
            except OSError as exc:
                log.request(rid, f"error removing file {name} [{exc}]")
        log.request(rid, f"finished handling {hook.id}\n", hook=hook.id, event="command_finished")
        return CommandResult(output, error)

    def _spawn(
        self,
        path: str,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        timeout: float,
        rid: str,
        held: Held | None = None,
        on_output: Listener | None = None,
        on_started: OnStarted | None = None,
    ) -> tuple[bytes, str | None]:
        with self._lock:
            if self._closing:
                return b"", NOT_STARTED
        problem = start_problem(path, argv, [f"{key}={value}" for key, value in env.items()], cwd or "")
        if problem is not None:
            return b"", problem
        found = held.found if held is not None else None
        try:
            # Starting blocks until the child execs: where `waits.start` says (the run owner's loop itself,
            # docs/run-state.md, "The start on the loop"); the tracker's bookkeeping stays on this thread.
            spawn = partial(start_process, path, argv, env, cwd)
            process, run = self._tracker.start(spawn, found, self.waits.start)
        except OSError as exc:
            return b"", f"fork/exec {path}: {errno_text(exc)}"
        except ValueError:  # what start_problem did not foresee: Go's fork fails with EINVAL for it
            return b"", f"fork/exec {path}: invalid argument"
        if held is not None:
            held.started(run.leader, run)
        with self._lock:
            self._processes.add(process)
            closing = self._closing
        if on_started is not None:
            on_started(process.pid)
        waits = self.waits
        if closing:
            # Shutdown took its list of runs while this one was being started.
            self._tracker.end([run], 0.0, waits.sleep)
        assert process.stdout is not None
        output = Output(process.stdout.fileno(), waits, on_output)
        exit_ = Exit(process, waits)
        timed_out = False
        deadline = time.monotonic() + timeout if timeout else None
        try:
            # The output is read until every holder of the pipe has closed it, and then the command is
            # waited for, as webhook does; with a timeout, both within it. A shutdown that ended the
            # run's processes gives the rest of the output a second.
            ended = output.read(deadline, self._is_closing) and exit_.wait(deadline, self._is_closing)
            if not ended:
                if self._is_closing():
                    output.read(time.monotonic() + 1.0)
                else:
                    timed_out = True
                    log.request(rid, f"command timed out after {timeout:g}s; terminating its process group")
                    self._tracker.end([run], self.kill_grace, output.spend)
                    # Everything of the run is gone: what is still in the pipe comes at once. A holder
                    # the run could not be told by gets no more than a second.
                    output.read(time.monotonic() + 1.0)
            process.stdout.close()
            if not exit_.wait(time.monotonic() + 5.0 if timed_out or self._is_closing() else None):
                _signal_group(process.pid, signal.SIGKILL)
                exit_.wait(None)
        finally:
            exit_.close()
            self._tracker.done(run)
            with self._lock:
                self._processes.discard(process)
        if timed_out:
            return output.data, f"{_TIMED_OUT} {timeout:g}s ({exit_text(exit_.code)})"
        if exit_.code != 0:
            return output.data, exit_text(exit_.code)
        return output.data, None

    def _is_closing(self) -> bool:
        return self._closing

    #: Whether shutdown has given up waiting and ends what still runs (a run ending now was cancelled).
    closing = property(_is_closing)

    def shutdown(self, grace: float) -> None:
        """Wait up to `grace` seconds for running and queued commands, then kill what is left: every process
        of every running run, those that left its process group included."""
        if self.runs.wait_idle(max(grace, 0.0), self.waits.sleep if self.waits.launches else None):
            return
        with self._lock:
            self._closing = True
            leftovers = list(self._processes)
        if self.history is not None:
            self.history.cancel_open("cancelled: hookrunner stopped before it ended (-shutdown-timeout)")
        self.runs.close(lambda: CommandResult(b"", NOT_STARTED))
        for process in leftovers:
            log.output(f"shutdown: killing the process group of command {process.pid}")
        self._tracker.end(self._tracker.runs, 0.0, self.waits.sleep)


def _admitted(ticket: Ticket | None, future: Future[CommandResult], how: str) -> None:
    """The run history: how the run was admitted; a request coalesced into a later one's run ends with it."""
    if ticket is None:
        return
    ticket.admitted(how)

    def done(future: Future[CommandResult]) -> None:
        exc = future.exception()
        ticket.served_by_run(f"error: {type(exc).__name__}" if exc is not None else future.result().error)

    if how in ("queued", "coalesced"):
        future.add_done_callback(done)  # a no-op for the ticket whose own command ran (it has ended)


def _both(first: Listener, second: Listener | None) -> Listener:
    """One listener that tells `first`, then `second` (when given), each chunk."""
    if second is None:
        return first

    def both(chunk: bytes) -> None:
        first(chunk)
        second(chunk)

    return both


_BUSY = "busy: at its concurrency limit with a full queue (429)"


def _refused(ticket: Ticket | None, reason: str = _BUSY) -> None:
    if ticket is not None:
        ticket.refused(reason)


def _utc(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass  # already gone
