"""Issue 21's attacks on the installed `hookrunner`, the small CI profile: one test per attack class, each
with a normal client probing meanwhile. scripts/hostile runs the long profile (5,000 connections per
kind, 25 MiB bodies, 50,000 pipelined requests) side by side with webhook and prints the figures.

Bounds here are generous (this machine is shared); the targets themselves are measured by scripts/hostile.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from hostile_load import (
    Flood,
    MiB,
    Target,
    background_run_survives,
    form_body,
    hooks,
    json_body,
    one_byte_chunks,
    oversized_head,
    pipelined,
    probing,
    push,
    queue_memory,
    raise_fd_limit,
    receive,
    request,
    rss_of,
    start,
    stop,
    tls_flood,
    xml_body,
)
from integration_harness import HOOKRUNNER_TEST_FLAGS, REFERENCE_BINARY, reference_available
from test_serving import ECHO_HOOK, Server, tls_files, wait_until
from test_serving import worker_pids as master_workers

GO_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\n431 Request Header Fields Too Large"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Target]:
    raise_fd_limit()
    target = start("hookrunner", [HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS], tmp_path, hooks(tmp_path))
    try:
        yield target
    finally:
        stop(target)


def fails_on_gthread(reason: str) -> pytest.MarkDecorator:
    """A strict xfail under `-worker-class gthread`: a known limit of that worker, not a pass left out."""
    return pytest.mark.xfail("gthread" in HOOKRUNNER_TEST_FLAGS, reason=reason, strict=True)


def worker_pids(target: Target) -> list[int]:
    """The master's children but the run owner."""
    return master_workers(target.process.pid)


@fails_on_gthread(
    "the threaded worker reads a request on one of its 64 threads: slow clients hold them all "
    "(docs/limits.md, slow clients)"
)
def test_more_connections_than_the_old_cap_do_not_stop_a_normal_client(server: Target) -> None:
    """1,200 held connections (600 idle, 600 sending headers a byte a second): gunicorn's gevent worker
    used to take 1,000 and leave the rest, and the probe, in the kernel's backlog."""
    floods = [Flood(server.port, "idle", 600).open(), Flood(server.port, "slowloris", 600).open()]
    try:
        assert sum(f.opened for f in floods) == 1200
        time.sleep(1)
        with probing(server.port, 0.1) as probe:
            time.sleep(4)
    finally:
        for flood in floods:
            flood.close()
    assert not probe.failures, probe.failures
    assert probe.answered >= 20 and probe.p99_ms() < 1000, probe.summary()


def test_queued_pushes_hold_what_their_command_needs_not_their_bodies(tmp_path: Path) -> None:
    """Issue 21, item 6: 1,000 queued 100 KB pushes whose command takes one field add little (3,000 may
    add 30 MB). Each connection's reader and held head lived on for -read-timeout (30 s) in the deadlines'
    heap, and its buffer with it: 1,000 such pushes added 100 MB."""
    target = start(
        "hookrunner", [HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS, "-max-concurrent-commands", "1"], tmp_path,
        hooks(tmp_path),
    )
    try:
        answered, grown = queue_memory(target, 1000)
    finally:
        stop(target)
    assert answered == 1000
    assert grown <= 15, f"1,000 queued pushes added {grown:.0f} MB"


@fails_on_gthread("the threaded worker reads every request on a thread of its own, from its first byte")
def test_slow_bodies_cut_at_once_each_run_their_hook_and_let_a_live_client_through(server: Target) -> None:
    """1,000 slow bodies cut at once: each one's hook still runs with what came, as webhook's does, but a
    push sent right after is served between them, not once they have all been (docs/limits.md)."""
    count = 1000
    flood = Flood(server.port, "slowbody", count).open()
    assert flood.opened == count
    time.sleep(1)
    flood.close()
    began = time.monotonic()
    answer = request(server.port, push("/hooks/ping", b"{}"), 30)
    waited = time.monotonic() - began
    answered_before = server.log.count("| POST /hooks/json")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert answered_before < count // 2, f"the push was answered after {answered_before} cut bodies, in {waited:.1f} s"
    deadline = time.monotonic() + 120
    while server.log.count("finished handling json") < count and time.monotonic() < deadline:
        time.sleep(0.5)
    assert server.log.count("finished handling json") == count


@fails_on_gthread("the threaded worker reads every request on a thread of its own, from its first byte")
def test_a_body_still_coming_has_not_reached_the_app(server: Target) -> None:
    """A push whose body comes slowly costs no dispatch until it has come (webhook answers it only then):
    its hook is not matched, not even logged as incoming, while the body is part-way."""
    body = b'{"a": 1}'
    head = push("/hooks/json", body, close=True)[: -len(body)]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + body[:3])
        time.sleep(1)
        assert request(server.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(
            b"HTTP/1.1 200"
        )  # served meanwhile, and logged: the log is up to date
        assert "GET /" in server.log and "POST" not in server.log
        sock.sendall(body[3:])
        answer = receive(sock, time.monotonic() + 10)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert "json got matched" in server.log


def test_oversized_heads_get_gos_431_at_the_limit(server: Target) -> None:
    for kind in ("header", "line"):
        answer, seconds = oversized_head(server.port, kind, 8 * MiB)
        assert answer == GO_431, (kind, answer[:200])
        assert seconds < 5, (kind, seconds)
    # Just under the limit: served.
    head = (
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * ((1 << 20) - 100) + b"\r\n\r\n"
    )
    began = time.monotonic()
    assert request(server.port, head).startswith(b"HTTP/1.1 200 OK\r\n")
    assert time.monotonic() - began < 1  # the target is 50 ms (scripts/hostile); generous for a loaded CI


@pytest.mark.skipif(not reference_available(), reason="needs the reference webhook")
def test_431_is_byte_for_byte_webhooks(tmp_path: Path) -> None:
    reference = start("webhook", [str(REFERENCE_BINARY)], tmp_path, hooks(tmp_path))
    try:
        answer, _ = oversized_head(reference.port, "header", 4 * MiB)
    finally:
        stop(reference)
    assert answer == GO_431


def test_big_hostile_bodies_leave_others_served_and_the_worker_alive(server: Target, tmp_path: Path) -> None:
    worker = worker_pids(server)
    before = server.rss_mb()
    bodies = [
        ("/hooks/json", "application/json", json_body(4 * MiB, "invalid")),
        ("/hooks/json", "application/json", json_body(4 * MiB, "nested")),
        ("/hooks/xml", "application/xml", xml_body(2 * MiB)),
        ("/hooks/form", "application/x-www-form-urlencoded", form_body(100_000)),
    ]

    def attack() -> None:
        for path, content_type, body in bodies:
            answer = request(server.port, push(path, body, content_type), timeout=120)
            assert answer.startswith(b"HTTP/1.1 "), (path, answer[:80])
        answer = request(server.port, one_byte_chunks(1 * MiB), timeout=120)
        assert answer.startswith(b"HTTP/1.1 "), answer[:80]

    with probing(server.port, 0.1) as probe:
        assert background_run_survives(server, tmp_path / "bg-done", attack)
    assert not probe.failures, probe.failures
    assert probe.p99_ms() < 2000, probe.summary()
    assert worker_pids(server) == worker
    assert "Worker timeout" not in server.log and "WORKER TIMEOUT" not in server.log
    assert "Traceback" not in server.log, server.log[-3000:]
    # The parsed bodies are freed on a parser thread once answered: RSS comes back within 100 MB.
    deadline = time.monotonic() + 20
    while server.rss_mb() >= before + 100 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert server.rss_mb() < before + 100, (before, server.rss_mb())


def test_two_25_mib_json_bodies_at_once_give_their_memory_back(server: Target) -> None:
    """issue 21's RSS target with its own bodies: two 25 MiB `{"a":[0,0,...]}x` at once. Before, the
    worker took 3 GB for them, was back within 100 MB only four seconds or more after the answers (much
    later on a loaded machine), and kept some 60 MB for good: glibc had raised its mmap threshold after
    the first big block and kept the next ones in a parser thread's arena (docs/limits.md, robustness)."""
    request(server.port, push("/hooks/json", b'{"a":[0]}'))  # what a first hook request loads, loaded
    before = server.rss_mb()
    data = push("/hooks/json", json_body(25 * MiB, "invalid"))
    answers: list[bytes] = []
    peak = [before]
    senders = [threading.Thread(target=lambda: answers.append(request(server.port, data, 300))) for _ in "12"]
    for sender in senders:
        sender.start()
    while any(sender.is_alive() for sender in senders):
        peak[0] = max(peak[0], server.rss_mb())
        time.sleep(0.2)
    assert [answer[:15] for answer in answers] == [b"HTTP/1.1 200 OK"] * 2, [a[:80] for a in answers]
    deadline = time.monotonic() + 10
    while server.rss_mb() >= before + 30 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.rss_mb() < before + 30, (before, peak[0], server.rss_mb())
    assert peak[0] < before + 1000, (before, peak[0])


def test_hostile_xml_gives_its_memory_back(server: Target) -> None:
    """issue 34: XML of many siblings, of many attributes and of deep nesting, one after the other. The
    worker's RSS is back within 100 MB of its level before a few seconds after each answer (the target is
    5 s; scripts/hostile measures it at 25 MiB beside webhook). Before, 4 MiB of nesting (600,000 elements)
    kept some 190 MB: taking the chain of maps apart counted each level's contents anew, for hours."""
    request(server.port, push("/hooks/xml", b"<r><a/></r>", "application/xml"))  # what XML loads, loaded
    worker = worker_pids(server)
    before = server.rss_mb(worker)
    for kind in ("siblings", "attributes", "nested"):
        answer = request(server.port, push("/hooks/xml", xml_body(4 * MiB, kind), "application/xml"), 120)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), (kind, answer[:80])
        deadline = time.monotonic() + 10
        while server.rss_mb(worker) >= before + 100 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.rss_mb(worker) < before + 100, (kind, before, server.rss_mb(worker))
    assert worker_pids(server) == worker
    assert "Traceback" not in server.log, server.log[-3000:]


def test_nested_xml_gives_its_memory_back_with_pushes_served_meanwhile(server: Target) -> None:
    """issue 34: nested XML while another client pushes every 20 ms. What those pushes leave for a while
    (each connection's read deadline, the event loop's own objects) was made while the parse filled
    Python's small-object allocator's 1 MiB blocks, and each object kept a block: 25 MiB of nesting kept
    118-167 MB (scripts/hostile), this test's body some 150. The worker's RSS is back within 100 MB of its
    level before 5 s after the answer, the target itself."""
    request(server.port, push("/hooks/xml", b"<r><a/></r>", "application/xml"))  # what XML loads, loaded
    worker = worker_pids(server)
    before = server.rss_mb(worker)
    body = push("/hooks/xml", xml_body(10 * MiB, "nested"), "application/xml")
    with probing(server.port, 0.02) as probe:
        answer = request(server.port, body, 120)
        answered = time.monotonic()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:80]
    while server.rss_mb(worker) >= before + 100 and time.monotonic() < answered + 5:
        time.sleep(0.2)
    assert server.rss_mb(worker) < before + 100, (before, server.rss_mb(worker))
    assert probe.answered >= 20 and not probe.failures, probe.summary()  # others were served meanwhile
    assert worker_pids(server) == worker


def test_pipelined_requests_do_not_hold_others_back(server: Target) -> None:
    with probing(server.port, 0.05) as probe:
        answers, _ = pipelined(server.port, 10_000)
    assert answers == 10_000
    assert not probe.failures, probe.failures
    assert probe.p99_ms() < 1000, probe.summary()


def test_bad_escape_in_target_is_refused_before_a_bad_header_value(server: Target) -> None:
    """net/http parses the target first: `400 Bad Request`, not `... invalid header value`."""
    answer = request(server.port, b"GET /hooks/%zz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n")
    expected = (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    )
    assert answer == expected + b"400 Bad Request"
    if reference_available():
        reference = start(
            "webhook", [str(REFERENCE_BINARY)], server.log_path.parent, hooks(server.log_path.parent)
        )
        try:
            assert (
                request(reference.port, b"GET /hooks/%zz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n")
                == answer
            )
        finally:
            stop(reference)


def test_fd_limit_on_hookrunner_is_raised_to_the_hard_limit(server: Target) -> None:
    limits = Path(f"/proc/{server.process.pid}/limits").read_text()
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard, line


def flooded_past_the_fd_limit(tmp_path: Path) -> str:
    """Started with a hard limit of 128 open files, flooded past it: once the flood closes the server
    serves again (else the test fails); returns its log."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    import subprocess

    original = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        return original(*args, preexec_fn=low_limit, **kwargs)  # type: ignore[call-overload, no-any-return]

    subprocess.Popen = popen  # type: ignore[misc]
    try:
        target = start("hookrunner", [HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS], tmp_path, hooks(tmp_path))
    finally:
        subprocess.Popen = original  # type: ignore[misc]
    try:
        flood = Flood(target.port, "idle", 200).open()
        time.sleep(1.5)
        flood.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if request(
                    target.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2
                ).startswith(b"HTTP/1.1 200"):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("not serving again after the flood")
    finally:
        stop(target)
    return target.log


def test_accept_errors_at_the_fd_limit_leave_no_traceback_and_recover(tmp_path: Path) -> None:
    log = flooded_past_the_fd_limit(tmp_path)
    assert "Traceback" not in log, log[-3000:]


@fails_on_gthread(
    "the threaded worker is gunicorn's own accept loop, which logs nothing of its own per error "
    "(docs/limits.md, robustness)"
)
def test_accept_errors_at_the_fd_limit_log_gos_line_each(tmp_path: Path) -> None:
    log = flooded_past_the_fd_limit(tmp_path)
    assert "http: Accept error: accept tcp 127.0.0.1:" in log, log[-2000:]
    assert "too many open files; retrying in 5ms" in log


@fails_on_gthread(
    "the threaded worker sees its parent gone, then waits for its slow clients' requests "
    "(up to -read-timeout) before it exits"
)
def test_a_worker_whose_master_was_killed_exits_under_a_flood(server: Target) -> None:
    """gunicorn's worker ends itself when its parent changes, at its next heartbeat; under a flood of
    5,000 connections that starved the loop an orphaned worker kept serving after its master was
    SIGKILLed. (This profile's 900 connections did not starve the earlier code either: it guards the
    heartbeat, scripts/hostile's 5,000 showed the starvation.)"""
    import os
    import signal

    workers = worker_pids(server)
    assert len(workers) == 1
    floods = [Flood(server.port, "slowloris", 600).open(), Flood(server.port, "slowbody", 300).open()]
    try:
        time.sleep(1)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(5)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _running(workers[0]):
            time.sleep(0.1)
        assert not _running(workers[0]), "the orphaned worker is still running"
    finally:
        for flood in floods:
            flood.close()
        if _running(workers[0]):
            os.kill(workers[0], signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_memory_comes_back_after_tls_floods(tmp_path: Path, servers: list[Server]) -> None:
    """Issue 34, item 6: two floods of 2,000 TLS handshakes and 2,000 begun and abandoned, and RSS comes
    back within 20 MB of where it was (main's code on the gevent worker: 70 -> 146-169 MB, the handshakes'
    free pages kept in the heap; on gthread, whose handshakes are on threads with arenas of their own, it
    passed before as well)."""
    raise_fd_limit()
    _, flags = tls_files(tmp_path)
    server = Server(tmp_path, [ECHO_HOOK], *flags)
    servers.append(server)
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    server.ready(lambda: http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10))

    def rss() -> float:
        master = server.process.pid
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        return sum(rss_of(pid) for pid in (master, *map(int, children)))

    before = rss()
    for _ in range(2):
        assert tls_flood(server.port, 2000, "full", 200) >= 1900
        assert tls_flood(server.port, 2000, "held") >= 1900
        assert wait_until(lambda: rss() <= before + 20, timeout=30), f"RSS {before:.0f} -> {rss():.0f} MB"
    status = server.request("GET", "/", conn=http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client, timeout=10))[0]
    assert status == 200
