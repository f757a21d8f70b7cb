"""hookrunner.serve.worker: what every worker process sets up the same way (the rest of it is exercised by
the integration tests, which exec the real command)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Run in a process of its own: mallopt changes how the whole process allocates.
_BIG_BLOCKS_KEPT = """
import sys
from hookrunner.serve.worker import map_big_allocations

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))

if sys.argv[1] == "mapped":
    assert map_big_allocations()
before = rss_mib()
for _ in range(3):
    block = b"x" * (24 << 20)
    del block
print(rss_mib() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, RSS from /proc")
def test_big_blocks_are_given_back_once_freed_with_the_threshold_fixed() -> None:
    """glibc raises its mmap threshold when a big block is freed, so the next ones of that size come from
    the heap and stay there once freed: 24 MiB kept after three 24 MiB bodies, say."""

    def kept_mib(mode: str) -> int:
        run = subprocess.run([sys.executable, "-c", _BIG_BLOCKS_KEPT, mode], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert kept_mib("default") >= 20
    assert kept_mib("mapped") < 4
