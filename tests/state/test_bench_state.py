"""scripts/bench-state (issue 33's run-state benchmark) cannot rot: it runs end to end with tiny sizes on every
backend, its own throwaway PostgreSQL included, through the claims path; and its checks fail loudly when runs
do not add up (a refused finish, a run finished twice or never, a journal row left open)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pg_cluster
import pytest

from hookrunner.hooks.model import Limits
from hookrunner.state.embedded import EmbeddedState
from hookrunner.state.journal import FILE_NAME, Journal
from hookrunner.state.model import Claim, Outcome

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench-state"


def _bench_module() -> Any:
    loader = importlib.machinery.SourceFileLoader("bench_state", str(SCRIPT))
    spec = importlib.util.spec_from_loader("bench_state", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_state"] = module  # its dataclasses look their module up while it loads
    loader.exec_module(module)
    return module


BENCH = _bench_module()


def test_every_backend_runs_and_every_run_is_counted(tmp_path: Path) -> None:
    reason = pg_cluster.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    argv = [sys.executable, str(SCRIPT), "--runs", "6", "--rounds", "2", "--threads", "2"]
    argv += [
        "--max-concurrency",
        "1",
        "--hooks",
        "2",
        "--dir",
        str(tmp_path),
        "--json",
        str(tmp_path / "out.json"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # 2 rounds x (4 backends alone + 5 with two threads), 6 runs each.
    assert "every run of every phase finished once (18 phases, 108 runs)" in done.stdout, done.stdout
    assert "fsync on" in done.stdout, done.stdout  # the cluster keeps its promises, as SQLite's journal does
    rows = [
        line.split(" | ")[:2]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and "ms" not in line
    ]
    assert rows == [
        ["| 1", "memory"], ["| 1", "sqlite"], ["| 1", "pg-tcp"], ["| 1", "pg-unix"],
        ["| 2", "memory"], ["| 2", "sqlite"], ["| 2", "pg-tcp"], ["| 2", "pg-unix"], ["| 2", "pg-2-replicas"],
    ]  # fmt: skip
    assert "| 1 | sqlite |" in done.stdout and "| 1.00x | 1.00x | 1.00x |" in done.stdout
    assert (tmp_path / "out.json").read_text().count('"backend"') == 18
    assert list(tmp_path.iterdir()) == [tmp_path / "out.json"]  # its journals are gone


class _RefusingFinish(EmbeddedState):
    """A backend that refuses the finish of run 3, as it would a late write of an old attempt."""

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        return False if claim.run_id == 3 else super().finish(claim, outcome)


def test_a_refused_finish_fails_the_phase() -> None:
    with pytest.raises(BENCH.BenchFailure, match="finish\\(\\) refused run 3"):
        BENCH.drive([_RefusingFinish()], 5, 2, Limits(), 1)


def test_the_ledger_refuses_a_double_finish_and_an_unfinished_run() -> None:
    ledger = BENCH.Ledger()
    ledger.admitted(1, 0.0, waits=False)
    ledger.admitted(2, 0.0, waits=True)
    ledger.finished(1, 1.0)
    with pytest.raises(BENCH.BenchFailure, match="run 1 finished twice"):
        ledger.finished(1, 2.0)
    with pytest.raises(BENCH.BenchFailure, match="1 runs never finished, first \\[2\\]"):
        ledger.check(2)
    with pytest.raises(BENCH.BenchFailure, match="2 runs admitted, 3 asked for"):
        ledger.check(3)
    with pytest.raises(BENCH.BenchFailure, match="run 2 admitted twice"):
        ledger.admitted(2, 0.0, waits=False)


def test_a_claim_may_come_before_its_admitter_notes_the_admit(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = BENCH.Ledger()
    late = threading.Timer(0.1, ledger.admitted, args=(7, 0.0, True))  # another thread's admit, noted late
    late.start()
    ledger.claimed(Claim(7, BENCH.spec(7, 1)), from_queue=True)  # waits for it
    late.join()
    assert not ledger.has_waiting()
    monkeypatch.setattr(BENCH, "ADMITTED_WAIT", 0.05)
    with pytest.raises(BENCH.BenchFailure, match="run 8 claimed but never admitted here"):
        ledger.claimed(Claim(8, BENCH.spec(8, 1)), from_queue=True)


def test_a_journal_row_left_open_fails_the_check(tmp_path: Path) -> None:
    state = EmbeddedState(Journal(str(tmp_path), "bench"))
    ledger, _ = BENCH.drive([state], 4, 2, Limits(), 1)
    ledger.check(4)
    BENCH.check_journal(tmp_path / FILE_NAME, 4)  # as the script checks it
    state.admit(BENCH.spec(5, 1), Limits(), None, 0.0)  # admitted, never finished
    state.close()
    with pytest.raises(BENCH.BenchFailure, match="5 rows written for 5 runs, 1 unfinished"):
        BENCH.check_journal(tmp_path / FILE_NAME, 5)
    with pytest.raises(BENCH.BenchFailure, match="rows written for 4 runs"):
        BENCH.check_journal(tmp_path / FILE_NAME, 4)
