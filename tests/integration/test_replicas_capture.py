"""A request that waits for its command's output (include-command-output-in-response, stream-command-output)
on one replica, whose queued run another replica claims and runs (-state-url, issue 33): its answer is the
one it would have had had its own replica run it: the output byte for byte, and webhook's 500 and error
text for a failing command. The installed command, two replicas on the throwaway cluster; scripts/test runs
it on both worker classes (HOOKRUNNER_TEST_FLAGS).

To make the other replica the one that runs it: replica B holds the hook's one place with a run that waits
for a gate file, the request comes to replica A and is queued there, A's run owner is stopped (SIGSTOP),
the gate opened: B's run ends and B, the only one looking, claims and starts the queued run; A's run owner
is let go once that run has started on B. A's run owner is stopped only while it holds no advisory lock (a
claims() transaction of its own in flight holds the hook's, and B's finish would wait for it)."""

from __future__ import annotations

import http.client
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from pg_cluster import Cluster
from replica_support import start_replicas, state_url
from test_limits import python_command
from test_serving import Server, run_owner_pids, wait_until

#: Appends `start <seq> <replica>` to the record; for seq `hold`, waits for the gate file; prints
#: `ran <seq> on <replica>` and every byte value 1024 times (256 KiB: NUL, invalid UTF-8, several of the
#: owner's frames), appends `end <seq> <replica>`, and exits with the code given.
COMMAND = """
import os, sys, time
record, gate, seq, code = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ran = os.environ.get("HOOKRUNNER_TEST_REPLICA", "?")
def note(what):
    with open(record, "a") as out:
        out.write(f"{what} {seq} {ran}\\n")
note("start")
while seq == "hold" and not os.path.exists(gate):
    time.sleep(0.02)
sys.stdout.buffer.write(f"ran {seq} on {ran}\\n".encode() + bytes(range(256)) * 1024)
sys.stdout.buffer.flush()
note("end")
sys.exit(code)
"""

ERROR_TEXT = b"Error occurred while executing the hook's command. Please check your logs for more details."
LIMITS = {"max-concurrency": 1, "max-queue": 10}


def output_of(seq: str, replica: str) -> bytes:
    return f"ran {seq} on {replica}\n".encode() + bytes(range(256)) * 1024


def hook(hook_id: str, record: Path, gate: Path, **fields: object) -> dict[str, object]:
    args = [str(record), str(gate)]
    return {
        "id": hook_id,
        **python_command(
            COMMAND,
            *({"source": "string", "name": arg} for arg in args),
            {"source": "url", "name": "seq"},
            {"source": "url", "name": "code"},
        ),
        **LIMITS,
        **fields,
    }


def request(server: Server, path: str) -> tuple[int, dict[str, str], bytes]:
    return server.request("POST", path, conn=http.client.HTTPConnection("127.0.0.1", server.port, timeout=60))


def noted(record: Path, line: str) -> bool:
    return record.exists() and line in record.read_text().splitlines()


@dataclass(frozen=True)
class Fleet:
    """Replicas r1 (A, where requests wait) and r2 (B, which runs their runs) on `database` of `cluster`,
    the record their command writes and the gate its holding run waits for."""

    a: Server
    b: Server
    record: Path
    gate: Path
    cluster: Cluster
    database: str

    def advisory_locks(self) -> int:
        return int(
            self.cluster.psql(self.database, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        )

    @contextmanager
    def a_stopped(self) -> Iterator[None]:
        """A's run owner stopped (SIGSTOP) while the body runs, at a moment it holds no advisory lock; let go
        (SIGCONT) at the end."""
        (owner,) = run_owner_pids(self.a.process.pid)
        for _ in range(100):
            os.kill(owner, signal.SIGSTOP)
            if self.advisory_locks() == 0:  # B is idle (its run waits for the gate): any lock would be A's
                break
            os.kill(owner, signal.SIGCONT)
            time.sleep(0.05)
        else:
            raise AssertionError("A's run owner kept holding an advisory lock")
        try:
            yield
        finally:
            os.kill(owner, signal.SIGCONT)


@pytest.fixture
def fleet(tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str) -> Fleet:
    """Replicas r1 (A, where requests wait) and r2 (B, which runs their runs), the record and the gate."""
    record, gate = tmp_path / "runs.txt", tmp_path / "gate"
    hooks = [
        hook("captured", record, gate, **{"include-command-output-in-response": True}),
        hook("captured-on-error", record, gate, **{"include-command-output-in-response": True,
             "include-command-output-in-response-on-error": True}),
        hook("streamed", record, gate, **{"stream-command-output": True}),
    ]  # fmt: skip
    a, b = start_replicas(tmp_path, servers, state_url(pg_cluster, pg_database), 2, lambda name: hooks)
    database = pg_database.split("dbname=")[1].split()[0]
    return Fleet(a, b, record, gate, pg_cluster, database)


def run_elsewhere(
    fleet: Fleet, hook_id: str, code: int
) -> tuple[tuple[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]:
    """B holds `hook_id`'s place; a push to A (`waited`, exiting with `code`) is queued there and run on B.
    Returns A's answer and B's own (the holding run's)."""
    a, b, record, gate = fleet.a, fleet.b, fleet.record, fleet.gate
    gate.unlink(missing_ok=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        holding: Future[tuple[int, dict[str, str], bytes]] = pool.submit(
            request, b, f"/hooks/{hook_id}?seq=hold&code=0"
        )
        assert wait_until(lambda: noted(record, "start hold r2"), timeout=20), b.log
        waiting = pool.submit(request, a, f"/hooks/{hook_id}?seq=waited-{hook_id}&code={code}")
        queued = f"{hook_id} is at its concurrency limit; run queued"
        assert wait_until(lambda: queued in a.log, timeout=20), (
            waiting.done() and waiting.result(),
            a.log[-3000:],
        )
        with fleet.a_stopped():
            gate.touch()
            assert wait_until(lambda: noted(record, f"start waited-{hook_id} r2"), timeout=20), b.log
        answer = waiting.result(timeout=60)
        own = holding.result(timeout=60)
    record.unlink()
    return answer, own


def test_a_capture_run_on_another_replica_is_answered_with_its_output_byte_for_byte(
    fleet: Fleet,
) -> None:
    (status, headers, body), own = run_elsewhere(fleet, "captured", 0)
    assert own[0] == 200 and own[2] == output_of("hold", "r2")  # B's own capture, as before
    assert status == 200, (status, body[:200])
    assert body == output_of("waited-captured", "r2"), body[:200]
    assert headers.get("content-type") == own[1].get("content-type")  # sniffed from the same bytes
    assert "Traceback" not in fleet.a.log + fleet.b.log


def test_a_failing_capture_run_on_another_replica_is_webhooks_500(
    fleet: Fleet,
) -> None:
    (status, _, body), _ = run_elsewhere(fleet, "captured", 3)
    assert (status, body) == (500, ERROR_TEXT)
    # With include-command-output-in-response-on-error: 500 and the failing command's own output.
    (status, _, body), _ = run_elsewhere(fleet, "captured-on-error", 3)
    assert status == 500
    assert body == output_of("waited-captured-on-error", "r2"), body[:200]


def test_a_stream_run_on_another_replica_gets_the_whole_output_at_its_end(
    fleet: Fleet,
) -> None:
    # As a request coalesced into another's run on one host gets it: the whole output once the run ends.
    (status, _, body), own = run_elsewhere(fleet, "streamed", 0)
    assert own[0] == 200 and own[2] == output_of("hold", "r2")
    assert status == 200, (status, body[:200])
    assert body == output_of("waited-streamed", "r2"), body[:200]
