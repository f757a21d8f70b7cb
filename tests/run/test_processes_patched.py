"""The run owner's runner with gevent's patching, as the owner has it with -state-url: many runs started at
once on the loop all end (docs/run-state.md, "A run stuck running" and "The start on the loop")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def test_many_runs_started_at_once_on_the_owners_patched_loop_all_end() -> None:
    """tests/run/gevent_starts.py: the owner's runner as -state-url runs it (gevent's patching, processes
    started on the loop). When starts were handed to native threads and the tracker's lock was taken
    there, 7 or 8 of 300 runs (8 at once) never got past their start, in every try."""
    script = Path(__file__).with_name("gevent_starts.py")
    true = shutil.which("true")
    assert true is not None
    out = subprocess.run(
        [sys.executable, str(script), true, "500", "20", "10"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ended 500 of 500, stuck 0", (out.stdout, out.stderr)
