"""The run owner's runner with gevent's patching, as the owner has it with -state-url: many runs started at
once on the loop all end, and the orphans runs leave are reaped (docs/run-state.md, "A run stuck running",
"The start on the loop" and "-state-url")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def patched_runs(command: str, runs: int, at_once: int) -> str:
    """What tests/run/gevent_starts.py prints for `runs` runs of `command`, `at_once` at a time (10 s each
    at most)."""
    script = Path(__file__).with_name("gevent_starts.py")
    argv = [sys.executable, str(script), command, str(runs), str(at_once), "10"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return f"{out.stdout.strip()} (exit status {out.returncode}){out.stderr}"


def test_many_runs_started_at_once_on_the_owners_patched_loop_all_end() -> None:
    """tests/run/gevent_starts.py: the owner's runner as -state-url runs it (gevent's patching, processes
    started on the loop). When starts were handed to native threads and the tracker's lock was taken
    there, 7 or 8 of 300 runs (8 at once) never got past their start, in every try."""
    true = shutil.which("true")
    assert true is not None
    assert patched_runs(true, 500, 20) == "ended 500 of 500, stuck 0, zombies 0 (exit status 0)"


def test_on_the_owners_patched_loop_the_orphans_a_run_leaves_are_reaped(tmp_path: Path) -> None:
    """The tracker's poll, started by the first start, must be a greenlet of the loop that runs (gevent's
    patching makes a thread a greenlet of the hub it is started on): else the orphans this process adopts
    stay zombies. Each run here leaves a child that exits 0.2 s after its parent; with the whole start
    handed to a native thread of the loop's pool, as before the tracker's lock stayed on the loop, they
    were left unreaped."""
    command = tmp_path / "leave-orphan"
    command.write_text("#!/bin/sh\n(sleep 0.2 &)\n")
    command.chmod(0o755)
    assert patched_runs(str(command), 20, 5) == "ended 20 of 20, stuck 0, zombies 0 (exit status 0)"
