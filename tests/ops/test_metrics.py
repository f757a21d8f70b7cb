"""The metrics module: exit-status labels, the recorders, and the flags that turn observability on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hookrunner.errors import UsageError
from hookrunner.flags import parse_args, usage_text
from hookrunner.ops import metrics


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (None, "0"),
        ("exit status 1", "1"),
        ("exit status 255", "255"),
        ("signal: killed", "signal"),
        ("command timed out after 2s (signal: terminated)", "timeout"),
        ('fork/exec /x: permission denied', "error"),
        ("exit status 4096", "error"),
    ],
)
def test_exit_status_label(error: str | None, label: str) -> None:
    assert metrics.exit_status_label(error) == label


class Hooks:
    def __init__(self) -> None:
        self.count = 3

    def __len__(self) -> int:
        return self.count


class Runner:
    running = 2
    queued = 1


@pytest.fixture
def enabled() -> Iterator[metrics.Metrics]:
    yield metrics.enable(Hooks(), Runner())
    metrics.disable()


def scrape(m: metrics.Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = m.exposition("")
    assert content_type.startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_recorders_and_gauges(enabled: metrics.Metrics) -> None:
    metrics.record_request("a", metrics.SERVED)
    metrics.record_request("a", metrics.SERVED)
    metrics.record_request("", metrics.NOT_FOUND)
    metrics.record_run("a", "0", 0.2)
    metrics.record_run("a", "not_found", None)
    metrics.record_reload(False)
    got = scrape(enabled)
    assert got[("hookrunner_requests_total", (("hook", "a"), ("outcome", "served")))] == 2
    assert got[("hookrunner_requests_total", (("hook", ""), ("outcome", "not_found")))] == 1
    assert got[("hookrunner_command_runs_total", (("hook", "a"), ("status", "0")))] == 1
    assert got[("hookrunner_command_runs_total", (("hook", "a"), ("status", "not_found")))] == 1
    assert got[("hookrunner_command_duration_seconds_count", (("hook", "a"),))] == 1
    assert got[("hookrunner_command_duration_seconds_bucket", (("hook", "a"), ("le", "0.25")))] == 1
    assert got[("hookrunner_command_duration_seconds_bucket", (("hook", "a"), ("le", "0.1")))] == 0
    assert got[("hookrunner_commands_running", ())] == 2
    assert got[("hookrunner_commands_queued", ())] == 1
    assert got[("hookrunner_hooks_loaded", ())] == 3
    assert got[("hookrunner_reloads_total", (("result", "failure"),))] == 1
    assert got[("hookrunner_reloads_total", (("result", "success"),))] == 0


def test_journal_events_start_at_zero_and_count(enabled: metrics.Metrics) -> None:
    metrics.record_journal("journaled")
    metrics.record_journal("pruned", 7)
    got = scrape(enabled)
    assert got[("hookrunner_journal_runs_total", (("event", "journaled"),))] == 1
    assert got[("hookrunner_journal_runs_total", (("event", "pruned"),))] == 7
    assert got[("hookrunner_journal_runs_total", (("event", "replayed"),))] == 0
    assert got[("hookrunner_journal_runs_total", (("event", "failed"),))] == 0


def test_openmetrics_when_asked(enabled: metrics.Metrics) -> None:
    body, content_type = enabled.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_recorders_do_nothing_when_off() -> None:
    metrics.disable()
    metrics.record_request("a", metrics.SERVED)
    metrics.record_run("a", "0", 1.0)
    metrics.record_reload(True)
    assert metrics.active() is None


def test_observability_flags() -> None:
    config = parse_args(["-metrics", "-log-format=json"])
    assert (config.metrics, config.log_format) == (True, "json")
    assert (parse_args([]).metrics, parse_args([]).log_format) == (False, "text")
    with pytest.raises(UsageError) as caught:
        parse_args(["-log-format", "xml"])
    assert str(caught.value).startswith('invalid value "xml" for flag -log-format: must be one of text, json\n')
    assert caught.value.exit_code == 2
    assert "  -log-format string\n" in usage_text()
    assert "-metrics" not in usage_text(extensions=False)


class Elsewhere:
    """A run owner as a worker's metrics see it: the host's families come from it, requests go to it."""

    def __init__(self, text: bytes | None) -> None:
        self.text = text
        self.counted: list[tuple[str, str]] = []

    def run_metrics(self) -> bytes | None:
        return self.text

    def count(self, hook: str, outcome: str) -> None:
        self.counted.append((hook, outcome))


def test_a_worker_counts_its_requests_elsewhere_and_shows_the_hosts_totals() -> None:
    # The owner's exposition of the host's families, as its `metrics` answer carries it.
    owner = metrics.Metrics(Hooks(), Runner())
    owner.requests.labels(hook="a", outcome=metrics.SERVED).inc(5)
    owner.reloads.labels(result="success").inc(2)
    host = Elsewhere(owner.host_exposition())
    own_hooks = Hooks()
    own_hooks.count = 7
    worker = metrics.enable(own_hooks, Runner(), host)
    try:
        metrics.record_request("a", metrics.SERVED)
        metrics.record_request("", metrics.NOT_FOUND)
        metrics.record_reload(True)
        got = scrape(worker)
    finally:
        metrics.disable()
    assert host.counted == [("a", metrics.SERVED), ("", metrics.NOT_FOUND)]
    # The requests shown are the host's (the owner's 5), not this process's own (which counted nothing);
    # hooks loaded and reloads are the host's too (the owner reloads for every worker: issue 32 step 9).
    requests = {k: v for k, v in got.items() if k[0] == "hookrunner_requests_total"}
    assert requests == {("hookrunner_requests_total", (("hook", "a"), ("outcome", "served"))): 5}
    assert got[("hookrunner_reloads_total", (("result", "success"),))] == 2
    assert got[("hookrunner_hooks_loaded", ())] == 3


def test_a_scrape_without_the_hosts_families_fails_rather_than_showing_none() -> None:
    """Every family is the host's: when its keeper gives none, the scrape raises (answered 503), never an
    empty exposition, which Prometheus would record as a target with no series."""
    away = Elsewhere(None)
    worker = metrics.Metrics(Hooks(), Runner(), away)
    with pytest.raises(metrics.HostMetricsAway):
        worker.exposition("")
    with pytest.raises(metrics.HostMetricsAway):
        worker.exposition("application/openmetrics-text; version=1.0.0")
    away.text = metrics.Metrics(Hooks(), Runner()).host_exposition()
    assert scrape(worker)[("hookrunner_hooks_loaded", ())] == 3


def test_count_request_takes_only_outcomes_it_knows(enabled: metrics.Metrics) -> None:
    assert metrics.count_request("a", metrics.BUSY)
    assert not metrics.count_request("a", "nonsense")
    assert not metrics.count_request(None, metrics.BUSY)
    assert not metrics.count_request("x" * (metrics.MAX_HOOK_LABEL + 1), metrics.BUSY)
    requests = {k: v for k, v in scrape(enabled).items() if k[0] == "hookrunner_requests_total"}
    assert requests == {("hookrunner_requests_total", (("hook", "a"), ("outcome", "busy"))): 1}
