"""hookrunner.serve.worker: what every worker process sets up the same way (the rest of it is exercised by
the integration tests, which exec the real command)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Each runs in a process of its own: mallopt changes how the whole process allocates.
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


_THREAD_ARENAS = """
import sys, threading
from hookrunner.serve.worker import share_one_arena

def arenas():
    # A thread's arena is a 64 MiB reservation (on 64-bit glibc): its usable start, then the rest unusable.
    spans = [line.split()[:2] for line in open("/proc/self/maps")]
    found = 0
    for (span, perms), (following, rest) in zip(spans, spans[1:]):
        start, end = (int(x, 16) for x in span.split("-"))
        after_start, after_end = (int(x, 16) for x in following.split("-"))
        found += perms == "rw-p" and rest == "---p" and after_start == end and after_end - start == 64 << 20
    return found

if sys.argv[1] == "shared":
    assert share_one_arena()
before = arenas()
ready = threading.Barrier(4)

def allocate():
    held = [bytearray(100_000) for _ in range(8)]  # from malloc, not Python's small-object allocator
    ready.wait()

threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(arenas() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, its arenas in /proc")
def test_threads_share_one_arena() -> None:
    """By default each thread that allocates (four at once here) gets an arena of its own, kept once it ends;
    shared, none is made."""

    def new_arenas(mode: str) -> int:
        run = subprocess.run([sys.executable, "-c", _THREAD_ARENAS, mode], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert new_arenas("default") >= 1
    assert new_arenas("shared") == 0


_REREAD = """
import resource
from hookrunner.serve.worker import map_big_allocations

assert map_big_allocations()
block = bytes(1 << 20)
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in range(200):
    block = bytes([n % 256]) * (1 << 20)  # a 1 MiB body, then the next request's
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_body_of_a_mib_reuses_the_heap_request_after_request() -> None:
    """Each 1 MiB block freed and allocated again must come back from the heap, not be given back to the
    system and faulted in afresh (256 page faults a time): mapped at a fixed 1 MiB threshold, or trimmed
    from the top of the heap at glibc's 128 KiB trim threshold, 200 of them cost over 40,000 faults."""
    run = subprocess.run([sys.executable, "-c", _REREAD], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 2000, f"{run.stdout.strip()} page faults for 200 blocks of 1 MiB"


def test_the_settled_config_reads_every_setting_as_gunicorns_config_does() -> None:
    from gunicorn.config import Config

    from hookrunner.serve.arbiter import PARSER_OPTIONS
    from hookrunner.serve.worker import SettledConfig

    cfg = Config()
    for key, value in PARSER_OPTIONS.items():
        cfg.set(key, value)
    cfg.set("forwarded_allow_ips", "10.0.0.0/8")
    cfg.set("worker_class", "gevent")
    settled = SettledConfig(cfg)
    for name in cfg.settings:
        assert getattr(settled, name) == getattr(cfg, name), name
    assert settled.worker_class is cfg.worker_class  # the class, as the Config's property gives it
    assert "worker_class" in vars(settled) and "limit_request_fields" in vars(settled)  # read once, kept
    assert settled.is_ssl == cfg.is_ssl
    assert settled.forwarded_allow_networks() == cfg.forwarded_allow_networks()  # methods: the Config's
    assert settled.address == cfg.address  # properties that are not settings: the Config's
    with pytest.raises(AttributeError):
        _ = settled.no_such_setting


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_heap_is_trimmed_once_a_burst_of_handshakes_is_over() -> None:
    from hookrunner.serve.worker import HeapTrim

    clock, trims = _Clock(), []
    heap = HeapTrim(lambda: trims.append(clock.now), clock)
    begun = HeapTrim.TRIM_AFTER - 1
    heap.tick(begun)
    clock.now += 5
    heap.tick(begun)
    assert trims == []  # a few handshakes: not worth a trim
    begun += 1
    heap.tick(begun)
    assert trims == []  # the burst may go on
    clock.now += HeapTrim.TRIM_QUIET
    heap.tick(begun)
    heap.tick(begun)
    assert trims == [clock.now]  # once, after it
    burst = clock.now
    for step in range(1, 1001):  # 100 s with no handshake: the connections it opened end meanwhile
        clock.now = burst + step / 10
        heap.tick(begun)
    assert [round(when - burst, 1) for when in trims] == [0.0, *HeapTrim.FOLLOW_UPS]


def test_a_burst_that_goes_on_is_trimmed_every_so_often() -> None:
    from hookrunner.serve.worker import HeapTrim

    clock, trims = _Clock(), []
    heap = HeapTrim(lambda: trims.append(clock.now), clock)
    begun = 0
    for step in range(250):
        clock.now = 100 + step / 10
        begun += HeapTrim.TRIM_AFTER
        heap.tick(begun)
    # 25 s of handshakes with no pause: every TRIM_EVERY (10 s), with the follow-ups of each between
    assert [round(when - 100) for when in trims] == [10, 11, 12, 14, 18, 20, 21, 22, 24]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_malloc_trim_is_there() -> None:
    from hookrunner.ops.heap import malloc_trim

    assert malloc_trim()
