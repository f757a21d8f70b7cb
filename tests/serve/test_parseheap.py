"""serve/parseheap.py: a parse's objects come from malloc, and their memory goes back once freed, whatever
other threads made and kept meanwhile."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hookrunner.serve.parseheap import ParseHeap

_LIVE = """
import sys, threading
from hookrunner.serve.parseheap import PARSE_HEAP, ParseHeap
from hookrunner.ops.heap import malloc_trim
from hookrunner.serve.worker import merge_frees

assert PARSE_HEAP.available and merge_frees()
mode = sys.argv[1]
sys.setswitchinterval(0.0002)  # as the gevent worker sets it

def rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6

def chain(depth):
    # Nested XML's shape: a chain of one-key maps, as the parse of <a><a>...</a></a> builds it.
    root = node = {}
    for _ in range(depth):
        node["a"] = node = {}
    return root

kept = []
def others(stop):
    # Another request's objects that outlive the parse (a read's deadline: a tuple, a float).
    while not stop.wait(0.0005):
        kept.append((float(len(kept)), len(kept)))

before = rss_mb()
stop = threading.Event()
thread = threading.Thread(target=others, args=(stop,))
thread.start()
tree = PARSE_HEAP.outside_pools(lambda: chain(500_000)) if mode == "malloc" else chain(500_000)
stop.set()
thread.join()
peak = rss_mb()
node = tree
while node:  # freed level by level (the recursion of one big free is not what is measured)
    node = node.pop("a")
del tree, node
malloc_trim()
print(len(kept), round(peak - before), round(rss_mb() - before))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_parse_gives_back_its_memory_though_another_thread_keeps_objects_made_meanwhile() -> None:
    """With Python's small-object allocator, the objects another thread made during the parse and kept
    pin the allocator's 1 MiB blocks that the parse filled; from malloc they pin a page each at most."""

    def run(mode: str) -> tuple[int, int, int]:
        done = subprocess.run([sys.executable, "-c", _LIVE, mode], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        kept, peak, after = map(int, done.stdout.split())
        return kept, peak, after

    kept, peak, after = run("pymalloc")
    assert kept > 50 and peak > 80, (kept, peak)
    assert after > 50, (kept, peak, after)  # the control: what the change is for
    kept, peak, after = run("malloc")
    assert kept > 50 and peak > 80, (kept, peak)
    assert after < 10, (kept, peak, after)


def test_objects_made_in_a_parse_are_not_python_s_allocator_s_and_are_freed_after_it() -> None:
    heap = ParseHeap()
    assert heap.available  # CPython's own allocator, as the tests run
    start = sys.getallocatedblocks()
    inside = heap.outside_pools(lambda: [str(n) for n in range(50_000)])
    made_inside = sys.getallocatedblocks() - start
    outside = [str(n) for n in range(50_000)]
    made_outside = sys.getallocatedblocks() - start - made_inside
    assert made_inside < 1_000 < 50_000 <= made_outside, (made_inside, made_outside)
    assert heap.events == 1
    inside.extend(outside)  # a list made by malloc grown after the parse, then everything freed
    del inside, outside
    heap.freed()
    assert heap.events == 2


def test_a_failed_parse_puts_the_allocator_back() -> None:
    heap = ParseHeap()

    def fails() -> None:
        raise ValueError("not XML")

    with pytest.raises(ValueError):
        heap.outside_pools(fails)
    start = sys.getallocatedblocks()
    made = [str(n) for n in range(50_000)]
    assert sys.getallocatedblocks() - start >= 50_000, "Python's allocator again"
    del made
