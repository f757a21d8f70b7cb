"""The run owner on a gevent loop in a process of its own (tests/run/gevent_owner.py, as the gevent worker
runs commands: nothing monkey-patched), with three workers' clients in this process: one max-concurrency
across them all, and output carried whole, with no traceback in the owner's output."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from owner_support import hook, limits, most_at_once, request, runs_of, script, spawn

from hookrunner.run import wire
from hookrunner.run.executor import CommandResult
from hookrunner.run.ownerclient import OwnerClient, OwnerUnavailable

OWNER = Path(__file__).with_name("gevent_owner.py")


def start_owner(fds: list[int], epoch: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(OWNER), "0", str(epoch), *map(str, fds)],
        pass_fds=fds,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def clients() -> Iterator[list[OwnerClient]]:
    pairs = [wire.pair() for _ in range(3)]
    fds = [owner_end.fileno() for _, owner_end in pairs]
    owner = start_owner(fds, epoch=1)
    for _, owner_end in pairs:
        owner_end.close()
    made = [OwnerClient(worker_end, spawn) for worker_end, _ in pairs]
    for client in made:
        client.hello_wait = 10.0  # the owner's process is still importing
        client.connect()
    try:
        yield made
    finally:
        for client in made:
            client.close()
        out, err = owner.communicate(timeout=30)
        assert owner.returncode == 0, err.decode()
        assert b"Traceback" not in err, err.decode()
        assert out == b"serving\n"


def test_max_concurrency_one_holds_across_three_workers_on_a_gevent_owner(
    clients: list[OwnerClient], tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    body = f'echo "start $1 $(date +%s%N)" >> {log}\nsleep 0.1\necho "end $1 $(date +%s%N)" >> {log}\n'
    serial = hook(script(tmp_path / "timed", body), limits=limits(max_concurrency=1, max_queue=100))
    with ThreadPoolExecutor(30) as pool:
        asked = [pool.submit(clients[n % 3].submit, serial, request(f"r{n}", n=str(n))) for n in range(30)]
        futures = [a.result(timeout=30) for a in asked]
    assert all(f.result(timeout=30).ok for f in futures)
    runs = runs_of(log)
    assert sorted(n for n, _, _ in runs) == sorted(str(n) for n in range(30))
    assert most_at_once(runs) == 1


def test_a_mebibyte_and_a_stream_arrive_whole_from_a_gevent_owner(
    clients: list[OwnerClient], tmp_path: Path
) -> None:
    data = bytes(range(256)) * 4096
    (tmp_path / "blob").write_bytes(data)
    cat = hook(script(tmp_path / "cat", f"cat {tmp_path}/blob\n"))
    assert clients[0].run(cat, request("c", n="x")) == CommandResult(data)
    chunks: list[bytes] = []
    streamed = clients[1].submit(
        hook(cat.execute_command, stream_output=True), request("s", n="x"), False, chunks.append
    )
    assert streamed.result(timeout=30) == CommandResult(data)
    assert b"".join(chunks) == data


def test_the_connection_outlives_its_owner_and_the_next_owner_serves_it(tmp_path: Path) -> None:
    """As the master will do it: it keeps the owner's end; the owner dies (kill -9) and a new one, of the
    next epoch, is given the same end. A run the dead owner admitted fails as OwnerUnavailable once the
    new owner says hello; a run sent while no owner was there is read, run and answered by the new one."""
    worker_end, owner_end = wire.pair()
    fds = [owner_end.fileno()]
    client = OwnerClient(worker_end, spawn)
    client.hello_wait = 10.0
    client.connect()
    gate = tmp_path / "go"
    command = script(tmp_path / "gated", f'while [ ! -e {gate} ]; do sleep 0.01; done\necho "ran $1"\n')
    owners = [start_owner(fds, epoch=1)]
    try:
        lost = client.submit(hook(command, capture_output=True), request("lost", n="lost"))
        owners[0].kill()
        owners[0].wait(timeout=10)
        with ThreadPoolExecutor(1) as pool:
            later = pool.submit(client.run, hook(command), request("later", n="later"))  # no owner to read it
            time.sleep(0.2)
            assert not later.done()
            owners.append(start_owner(fds, epoch=2))
            with pytest.raises(OwnerUnavailable, match="restarted"):
                lost.result(timeout=30)
            gate.touch()
            assert later.result(timeout=30) == CommandResult(b"ran later\n")
        assert client.owner_pid == owners[1].pid
    finally:
        client.close()
        owner_end.close()
        for owner in owners:
            owner.kill()
            _, err = owner.communicate(timeout=10)
            assert b"Traceback" not in err, err.decode()
