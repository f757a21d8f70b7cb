"""The run owner's process at work (issue 32 step 6, docs/run-state.md): the host's one CommandRunner,
served to every worker's connection by run/owner.py's `Owner` on a gevent loop; the run journal opened,
and its left-overs replayed, here alone; the run history fed to the admin listener from here; the run
metrics and every worker's requests counted here (step 8); and the master's control channel read on the
same loop. serve/runowner.py forks this process and calls `serve_runs` once the process is set up.

Every run is admitted, claimed and finished through the run state (run/claimed.py on state/backend.py's
RunState): the embedded one, with the journal when -state-dir is set, or, with -state-url, PostgreSQL's,
shared by every replica, whose leases are renewed here and whose new work (another replica's, a lapsed
lease's) is waited for on the loop.

With the embedded state the loop patches nothing, as the gevent worker's does not (serve/greenworker.py):
every wait of the runs and connections goes through `GreenWaits`; a process's start runs on the loop itself
(it blocks until the child execs: 0.6 ms in the median and 2 ms at p99 under a load of starts; on a native
thread while the server has a terminal), and what blocks for long (ending a replayed run's previous
attempt) on its native threads (serve/greenruns.py). With -state-url, gevent's patching
(socket, select, time, threading) is applied first, before psycopg is imported, so that its waits are the
loop's (docs/run-state.md, "gevent")."""

from __future__ import annotations

import signal
import socket
from collections import deque
from typing import TYPE_CHECKING

import gevent
import gevent.event

from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.run.executor import CommandRunner
from hookrunner.run.history import Recorder
from hookrunner.run.owner import Owner
from hookrunner.run.spawn import Waits
from hookrunner.run.wire import EVENT, PeerGone, WireError, receive
from hookrunner.serve.context import RELOAD_SIGNALS, ctx
from hookrunner.serve.greenruns import GreenWaits
from hookrunner.serve.ownerreload import HostReloads
from hookrunner.state.journal import open_journal
from hookrunner.state.model import Event

if TYPE_CHECKING:
    # Loaded only with -admin-addr (multiprocessing's connections: docs/performance.md, memory at rest).
    from hookrunner.run.historyfeed import FeedClient
    from hookrunner.state.backend import RunState

#: History events held for the database (-state-url) at most; past it the oldest are dropped (the history
#: is not the journal: a database that is away loses events, never runs).
EVENTS_HELD = 10_000

#: Exit status of an owner that cannot open the run journal: the master forks another (once a second).
JOURNAL_FAILED = 3


def serve_runs(control: socket.socket, epoch: int) -> int:
    """Serve the workers' connections the master passes over `control` until SIGTERM (or the master's
    end), then end what still runs, as a worker did at the end of its stop's grace; returns the exit
    status."""
    gevent.reinit()  # the master may have made a loop before it forked (it builds the app with -workers)
    config = ctx.config
    if config.state_url:
        _patch_for_the_network()
    runner = CommandRunner(config.command_timeout, config.max_concurrent_commands, adopt_orphans=True)
    runner.find = lambda hook_id: ctx.registry.match(hook_id)  # the registry as it is when a claim comes
    waits = GreenWaits()
    runner.use(waits)
    owner = Owner(runner, waits.launch, epoch)
    owner.admit_apart = bool(config.state_url)  # an admission waits on the database: apart from its reader
    if config.metrics:
        owner.exposition = metrics.enable(ctx.registry, runner).host_exposition
        owner.count = metrics.count_request
    feed = _start_history(runner) if ctx.history_feed else None
    reloads = HostReloads(ctx.registry, owner, ctx.hooks_generation)
    if epoch > 1:
        # The master's hooks are those of the tree's start: an earlier owner's reloads are read again, and
        # the workers told (step 9), before an earlier owner's runs replay under them.
        reloads.run(lambda lines: ctx.registry.reload_all())
    if config.state_url:
        _start_shared_state(runner)
    elif config.state_dir and not _start_journal(runner):
        return JOURNAL_FAILED
    gevent.spawn(runner.runs.watch)
    stop = gevent.event.Event()
    gevent.signal_handler(signal.SIGTERM, stop.set)
    for signum in RELOAD_SIGNALS:  # held since the fork (serve/runowner.py): one sent meanwhile comes now
        gevent.signal_handler(signum, reloads.reload_all)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELOAD_SIGNALS)
    reloads.start(config.hotreload)
    control.setblocking(False)
    gevent.spawn(_read_control, control, owner, waits, stop)
    stop.wait()
    # The workers are gone by now (the master stops the owner after them): each waited its grace for its
    # runs. What still runs is ended; with a journal its rows stay, to be replayed at the next start.
    reloads.stop()
    runner.shutdown(0)
    owner.close()
    runner.state.close()  # the journal's, or the database's connections
    if feed is not None:
        feed.flush(1.0)
    return 0


def _read_control(control: socket.socket, owner: Owner, waits: Waits, stop: gevent.event.Event) -> None:
    """The master's `worker` and `worker_gone` messages, until the master is gone (killed: nobody would stop
    this process)."""
    while True:
        try:
            message, fds = receive(control, max_fds=1)
        except BlockingIOError:
            waits.readable(control.fileno(), 1.0)
            continue
        except WireError:
            continue
        except (PeerGone, OSError):
            stop.set()
            return
        if message.kind == "worker" and fds and isinstance(message.get("pid"), int):
            owner.attach(socket.socket(fileno=fds[0]), message["pid"])
            continue
        for fd in fds:
            socket.close(fd)
        if message.kind == "worker_gone" and isinstance(message.get("pid"), int):
            owner.detach(message["pid"])


def _start_journal(runner: CommandRunner) -> bool:
    """Open the run journal here (SQLite connections do not survive a fork), then replay the runs that
    dead processes left unfinished: an earlier start's, or an earlier owner's of this start. False: it
    could not be opened."""
    config = ctx.config
    journal = open_journal(config.state_dir, ctx.boot_id, config.state_keep)
    if journal is None:
        log.output("run owner: the run journal cannot be opened; stopping", level="error", event=EVENT)
        return False
    runner.journal = journal
    journal.prune()

    # The left-overs are the state's first claims (a full disk: claimed again by a later look).
    runner.claim_now()
    return True


def _patch_for_the_network() -> None:
    """gevent's patching of what psycopg waits with, before psycopg is imported (-state-url only)."""
    from gevent import monkey

    monkey.patch_socket()
    monkey.patch_select()
    monkey.patch_time()
    monkey.patch_thread()


def _start_shared_state(runner: CommandRunner) -> None:
    """PostgreSQL's run state (-state-url), shared by every replica: runs admitted, claimed and finished
    in the database, each history event recorded there (naming this replica), the leases of the runs
    this replica runs renewed every third of -state-lease."""
    from hookrunner.run.executor import CommandResult
    from hookrunner.state.opener import open_state, replica_name

    config = ctx.config
    state = open_state(config, replica_name(config), url=config.state_url)
    runner.use_state(state)
    # A run another replica ran: its outcome, with the output it kept for the request waiting here.
    runner.runs.ended_elsewhere = lambda outcome: CommandResult(
        outcome.output or b"", None if outcome.status == "exit status 0" else outcome.status
    )
    events: deque[Event] = deque(maxlen=EVENTS_HELD)
    arrived = gevent.event.Event()

    def record(event: Event) -> None:  # never waits for the database: a greenlet writes them in order
        events.append(event)
        arrived.set()

    def write_events() -> None:
        while True:
            arrived.wait()
            arrived.clear()
            while events:
                state.record(events.popleft())

    runner.history = Recorder(record, config.history_output, replica=state.replica)
    gevent.spawn(write_events)
    gevent.spawn(runner.runs.keep_leases, config.state_lease)
    gevent.spawn(_keep_tables, state)


def _keep_tables(state: RunState) -> None:
    """The shared tables' upkeep (state/pgupkeep.py), every round on this loop and no request's path:
    finished runs deleted past -state-done-age, events folded when no admin listener folds them."""
    from hookrunner.serve.adminfleet import open_history
    from hookrunner.state.backend import StateUnavailable
    from hookrunner.state.pgupkeep import Upkeep
    from hookrunner.state.postgres import PostgresState

    assert isinstance(state, PostgresState)  # -state-url's
    upkeep = Upkeep(state, open_history(ctx.config), ctx.config.state_done_age)
    while True:
        gevent.sleep(upkeep.every)
        try:
            upkeep.run()
        except StateUnavailable:
            pass  # logged once by the connections (state/pgconn.py); the next round tries again
        except Exception as exc:  # noqa: BLE001 - an upkeep that fails must not end the owner's loop
            log.output(f"run state: the shared tables' upkeep failed: {exc}", level="error", event=EVENT)


def _start_history(runner: CommandRunner) -> FeedClient:
    """Send every run's records to the admin listener (-admin-addr): one feed for the host."""
    from hookrunner.run.historyfeed import FeedClient

    feed = FeedClient(ctx.history_feed, ctx.history_key)
    runner.history = Recorder(feed.send, ctx.config.history_output)
    return feed
