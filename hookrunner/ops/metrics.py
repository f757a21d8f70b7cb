"""Prometheus metrics (`-metrics`): the metric objects, and the recorders the app, runner and registry call.

Labels are few and fixed so a scanner cannot grow the series: a hook label is always an id from the hooks
file (requests for unknown ids are counted under `hook=""`), outcomes and exit statuses come from closed
sets. Without `-metrics` nothing is created and every recorder is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

# Request outcomes (the `outcome` label of hookrunner_requests_total).
SERVED = "served"  # rules satisfied, command started (or run, when its output is captured)
RULES_NOT_SATISFIED = "rules_not_satisfied"
METHOD_NOT_ALLOWED = "method_not_allowed"
NOT_FOUND = "not_found"
SIGNATURE_ERROR = "signature_error"  # a bad payload signature (the 500 of webhook)
RULE_ERROR = "rule_error"  # any other error while evaluating the rules (bad regex, empty secret...)
BUSY = "busy"  # the hook's concurrency limit and queue were full (429)
UNJOURNALED = "unjournaled"  # -state-dir's journal could not record the run (503)
ERROR = "error"  # the request could not be read (multipart, body too large) or the handler failed
OUTCOMES = (
    SERVED, RULES_NOT_SATISFIED, METHOD_NOT_ALLOWED, NOT_FOUND, SIGNATURE_ERROR, RULE_ERROR, BUSY,
    UNJOURNALED, ERROR,
)

#: The longest hook id a worker's `count` may carry (a label value, counted by the run owner).
MAX_HOOK_LABEL = 4096

#: Run journal events (the `event` label of hookrunner_journal_runs_total).
JOURNAL_EVENTS = ("journaled", "replayed", "pruned", "failed", "unwritable")

#: A command can take from milliseconds (echo) to minutes (a deploy): buckets up to ten minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class HooksSource(Protocol):
    """What the metrics read from hooks.HookRegistry."""

    def __len__(self) -> int: ...


class RunnerSource(Protocol):
    """What the metrics read from executor.CommandRunner."""

    @property
    def running(self) -> int: ...

    @property
    def queued(self) -> int: ...


def exit_status_label(error: str | None) -> str:
    """The `status` label of a finished command from the runner's (Go's) error text.

    `0`..`255` for an exit, `signal` when a signal ended it, `timeout` when hookrunner stopped it, `error`
    when it could not be started. (`not_found` is given by the runner before anything is started.)
    """
    if error is None:
        return "0"
    if error.startswith("exit status "):
        code = error[len("exit status ") :]
        return code if code.isdigit() and int(code) <= 255 else "error"
    if error.startswith("command timed out"):
        return "timeout"
    if error.startswith("signal: "):
        return "signal"
    return "error"


#: The host's families' exposition from where they are kept (the run owner), in OpenMetrics text; None when
#: it cannot be had now (the scrape then fails with HostMetricsAway).
HostSource = Callable[[], bytes | None]


class HostMetricsAway(Exception):
    """The host's families are kept in another process (the run owner) that did not give them in time (not
    yet greeted at start, stopped, being replaced). Every family is the host's, so a scrape without them
    would be an empty `200`, which Prometheus records as a target with no series: it is answered `503`
    instead, which Prometheus records as a failed scrape (`up` 0)."""


class Host(Protocol):
    """Where the host's families are kept when it is another process: the run owner, which a worker asks
    through its run/ownerclient.py `OwnerClient` (docs/run-state.md, issue 32 steps 6 and 8)."""

    def run_metrics(self) -> bytes | None:
        """The host's families in OpenMetrics text; None when they cannot be had now."""
        ...

    def count(self, hook: str, outcome: str) -> None:
        """Count one request there; sent before the request is answered."""
        ...


class _Families:
    """A collector that yields the metric families `source` gives at each scrape."""

    def __init__(self, source: Callable[[], Iterable[Metric]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from self._source()


class Metrics:
    """The metric objects, in a registry of their own (the process-wide default one stays untouched).

    The host's families (requests, commands finished, their durations, running, queued, journal events)
    are kept in `host`, a registry of their own, counted where the runs are. Where that is another process
    (a worker, whose runs the run owner starts: docs/run-state.md), `elsewhere` is that process: a request
    is counted there, and a scrape shows its exposition in place of this process's own. Hooks loaded and
    reloads are the host's too: the run owner reloads the hooks for every worker (step 9)."""

    def __init__(self, hooks: HooksSource, runner: RunnerSource, elsewhere: Host | None = None) -> None:
        # Imported here: without -metrics, start-up does not pay for prometheus_client.
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.host: CollectorRegistry = CollectorRegistry()
        #: Where the host's families are read when they are another process's (None: `host`, here).
        self._elsewhere: HostSource | None = None if elsewhere is None else elsewhere.run_metrics
        #: Where a request is counted when that is another process (None: here).
        self.count_elsewhere = None if elsewhere is None else elsewhere.count
        self.requests: Counter = Counter(
            "hookrunner_requests",
            "Requests for hooks, by hook id (empty for unknown ids) and outcome.",
            ["hook", "outcome"],
            registry=self.host,
        )
        self.command_runs: Counter = Counter(
            "hookrunner_command_runs",
            "Finished hook commands, by hook id and exit status (0-255, signal, timeout, not_found, error).",
            ["hook", "status"],
            registry=self.host,
        )
        self.command_duration: Histogram = Histogram(
            "hookrunner_command_duration_seconds",
            "How long hook commands ran, by hook id.",
            ["hook"],
            buckets=DURATION_BUCKETS,
            registry=self.host,
        )
        running = Gauge("hookrunner_commands_running", "Hook commands running now.", registry=self.host)
        running.set_function(lambda: runner.running)
        queued = Gauge(
            "hookrunner_commands_queued",
            "Hook runs admitted but waiting for a free slot (per-hook max-concurrency).",
            registry=self.host,
        )
        queued.set_function(lambda: runner.queued)
        loaded = Gauge("hookrunner_hooks_loaded", "Hooks being served now.", registry=self.host)
        loaded.set_function(lambda: len(hooks))
        self.reloads: Counter = Counter(
            "hookrunner_reloads",
            "Reloads of a hooks file (signal or -hotreload), by result (success or failure).",
            ["result"],
            registry=self.host,
        )
        # Both results exist from the start, so `increase()` and alerts see a zero rather than nothing.
        for result in ("success", "failure"):
            self.reloads.labels(result=result)
        self.journal: Counter = Counter(
            "hookrunner_journal_runs",
            "Run journal (-state-dir) events: runs journaled, replayed after a restart, pruned once "
            "finished, and failures to journal (the journal then turns off).",
            ["event"],
            registry=self.host,
        )
        for event in JOURNAL_EVENTS:
            self.journal.labels(event=event)

    def host_exposition(self) -> bytes:
        """The host's families alone in OpenMetrics text: what a worker's scrape asks the run owner for."""
        from prometheus_client.openmetrics.exposition import generate_latest

        return bytes(generate_latest(self.host))

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The host's families in the format the scraper asked for (Prometheus text, or OpenMetrics); raises
        HostMetricsAway when they are another process's and it does not give them."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        return encoder(self._scraped()), content_type

    def _scraped(self) -> Collector:
        """What this scrape shows: `host`, or the families the process that keeps them gives now."""
        if self._elsewhere is None:
            return self.host
        text = self._elsewhere()
        if text is None:
            raise HostMetricsAway("the run owner gave no metrics")
        return _Families(partial(_parsed, text))


def _parsed(text: bytes) -> Iterator[Metric]:
    """The families of an OpenMetrics text."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return text_string_to_metric_families(text.decode("utf-8"))


#: Set once at start-up by enable(), like the process-wide logger; None means -metrics is off.
_active: Metrics | None = None


def enable(hooks: HooksSource, runner: RunnerSource, elsewhere: Host | None = None) -> Metrics:
    global _active
    _active = Metrics(hooks, runner, elsewhere)
    return _active


def disable() -> None:
    global _active
    _active = None


def active() -> Metrics | None:
    return _active


def record_request(hook: str, outcome: str) -> None:
    """Count one request for a hook; `hook` must be an id from the registry, or "" for an unknown one. In a
    worker it is counted by the run owner: sent there before the request is answered, so a scrape that
    follows the answer, through any worker, counts it."""
    if _active is None:
        return
    if _active.count_elsewhere is not None:
        _active.count_elsewhere(hook, outcome)
    else:
        _active.requests.labels(hook=hook, outcome=outcome).inc()


def count_request(hook: object, outcome: object) -> bool:
    """Count a request a worker told of (the run owner's `count` message); False, counting nothing, for a
    hook that is not a string or an outcome not of OUTCOMES (no message can grow the series)."""
    if not isinstance(hook, str) or outcome not in OUTCOMES or len(hook) > MAX_HOOK_LABEL:
        return False
    record_request(hook, str(outcome))
    return True


def record_run(hook: str, status: str, seconds: float | None) -> None:
    """Count one finished command; `seconds` is None when nothing was started (command not found)."""
    if _active is not None:
        _active.command_runs.labels(hook=hook, status=status).inc()
        if seconds is not None:
            _active.command_duration.labels(hook=hook).observe(seconds)


def record_reload(ok: bool) -> None:
    if _active is not None:
        _active.reloads.labels(result="success" if ok else "failure").inc()


def record_journal(event: str, count: int = 1) -> None:
    """Count run journal events: one of JOURNAL_EVENTS."""
    if _active is not None:
        _active.journal.labels(event=event).inc(count)
