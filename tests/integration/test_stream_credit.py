"""A streamed run's flow control between the run owner and the worker (docs/run-state.md, "Capture output and
streamed answers"), against the installed `hookrunner`: a client that stops reading a 50 MiB stream is cut
off as before (it fell -stream-buffer behind) while other pushes are answered, the owner and the worker hold
no more of the stream than its bounds on top of the run's own output, and a client that reads gets every
byte in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from test_serving import Server, python_hook, run_owner_pids, worker_pids
from test_stream_output import others_answered_meanwhile, read_timed, send, split

MiB = 1024 * 1024
PIECES = 50

#: 50 MiB in numbered pieces of 1 MiB (so order shows), written as fast as the pipe takes them.
FLOOD = (
    "import sys\nout = sys.stdout.buffer\n"
    f"for n in range({PIECES}):\n    out.write(b'%07d\\n' % n * 131072)\nout.write(b'END')\n"
)
#: The same, a piece every 20 ms: a client at normal speed keeps up (the command does not outrun the server).
PACED = FLOOD.replace("out.write(b'%07d", "time.sleep(0.02); out.write(b'%07d").replace(
    "import sys", "import sys, time"
)
EXPECTED = b"".join(b"%07d\n" % n * 131072 for n in range(PIECES)) + b"END"


def hooks() -> list[dict[str, object]]:
    return [
        python_hook("flood", FLOOD, **{"stream-command-output": True}),
        python_hook("paced", PACED, **{"stream-command-output": True}),
        python_hook("quick", "pass", **{"response-message": "ok"}),
    ]


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The body of a chunked answer, and whether it ended with the last chunk (in linear time: 50 MiB)."""
    pieces, at = [], 0
    while at < len(body):
        end = body.find(b"\r\n", at)
        if end < 0:
            break
        size = int(body[at:end], 16)
        if size == 0:
            return b"".join(pieces), body[end + 2 :] == b"\r\n"
        pieces.append(body[end + 2 : end + 2 + size])
        at = end + 4 + size
    return b"".join(pieces), False


def rss(pid: int) -> int:
    """VmRSS of `pid`, in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Peak:
    """The highest RSS of some processes, sampled every 5 ms on a thread until stopped."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.most = dict.fromkeys(pids, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            for pid in self.pids:
                self.most[pid] = max(self.most[pid], rss(pid))
            time.sleep(0.005)

    def stop(self) -> dict[int, int]:
        self._done.set()
        self._thread.join()
        return self.most


def test_a_stopped_client_of_a_50_mib_stream_is_cut_off_and_bounds_what_is_held(
    tmp_path: Path, servers: list[Server]
) -> None:
    server = Server(tmp_path, hooks())
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/quick")[::2] == (200, b"ok")
    owner = run_owner_pids(server.process.pid)[0]
    worker = worker_pids(server.process.pid)[0]
    time.sleep(0.5)
    rest = {owner: rss(owner), worker: rss(worker)}
    peak = Peak([owner, worker])
    stopped = send(server.port, "flood", rcvbuf=4096)  # reads nothing
    try:
        answered = others_answered_meanwhile(server, "flood: the client fell 4194304 bytes behind")
        assert answered >= 1
        assert server.wait_for_log("finished handling flood", 30)
        time.sleep(0.3)
    finally:
        stopped.close()
    most = peak.stop()
    grown = {pid: most[pid] - rest[pid] for pid in rest}
    print(
        f"rest owner {rest[owner] / MiB:.1f} MiB worker {rest[worker] / MiB:.1f} MiB; grown owner "
        f"{grown[owner] / MiB:.1f} MiB worker {grown[worker] / MiB:.1f} MiB; {answered} pushes answered"
    )
    # The worker holds a window of the stream (before credit it took the whole stream as fast as the owner
    # sent it: 95 MiB more for these 50 MiB). The owner's growth is the run's own output, which every run
    # keeps (run/spawn.py's Output, joined at its end), not the stream's: measured, not bounded here.
    assert grown[worker] < 16 * MiB, grown
    assert server.request("POST", "/hooks/quick")[::2] == (200, b"ok")
    assert "Traceback" not in server.log and "Error handling request" not in server.log


def test_a_client_that_reads_gets_every_byte_of_a_50_mib_stream_in_order(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A command that writes 50 MiB as fast as it can to a client that reads at full speed, the stream's bound
    raised so that only the wire could cut it (before credit the owner queued the stream for the worker
    until the worker's whole connection was cut off at 8 MiB); and one paced as a client keeps up with."""
    server = Server(tmp_path, hooks(), "-stream-buffer", "64MiB")
    servers.append(server)
    server.ready()
    for hook in ("flood", "paced"):
        began = time.monotonic()
        status, _, body = split(b"".join(data for _, data in read_timed(send(server.port, hook))))
        print(f"{hook}: 50 MiB streamed in {time.monotonic() - began:.1f}s")
        assert status == "HTTP/1.1 200 OK"
        assert dechunk(body) == (EXPECTED, True)
        assert server.request("POST", "/hooks/quick")[::2] == (200, b"ok")
    assert "cutting it off" not in server.log and "fell" not in server.log, server.log
    assert "Traceback" not in server.log
