"""What the run owner holds of a big run's output, against the installed `hookrunner` (docs/run-state.md,
"Capture output and streamed answers"): one copy of it, whatever the hook answers with, and bounded buffers.

The owner keeps a run's whole output until the run ends (webhook logs it then, and a capture answers with it,
also to the requests coalesced onto the run). Before, it held about five copies at once: the chunks and their
join, then the log's decoded text, its message, its line and the line's bytes. Its peak memory is read from
/proc (VmHWM, the kernel's own high-water mark, so no sampling can miss the peak)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_serving import Server, run_owner_pids
from test_stream_credit import dechunk
from test_stream_output import read_timed, send, split

MiB = 1024 * 1024
SIZE = 50 * MiB

#: The command: 50 MiB of `a`, as fast as the pipe takes them (a script file: argv only, no shell string).
SCRIPT = f"#!/bin/sh\nexec head -c {SIZE} /dev/zero | tr '\\0' a\n"

#: The owner's growth allowed for one run of SIZE bytes: the one copy it keeps (grown in place as the
#: output comes, up to an eighth over its size: CPython's BytesIO), the log's pieces (1 MiB at a time) and
#: the pipe's and the wire's bounded buffers, with room for the allocator's slack and the interpreter's own
#: churn. The code before held 5 copies at its peak with -verbose (4.5-5x measured), 2 without.
BOUND = 2.5 * SIZE

ANSWERS = {
    "capture": {"include-command-output-in-response": True},
    "stream": {"stream-command-output": True},
    "async": {"response-message": "started"},
}


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_the_run_owner_holds_one_copy_of_a_50_mib_output(
    tmp_path: Path, servers: list[Server], kind: str
) -> None:
    script = tmp_path / "flood.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    hooks = [
        {"id": "flood", "execute-command": str(script), **ANSWERS[kind]},
        {"id": "quick", "execute-command": "/bin/true", "response-message": "ok"},
    ]
    server = Server(tmp_path, hooks)
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/quick")[::2] == (200, b"ok")
    assert server.wait_for_log("finished handling quick")
    (owner,) = run_owner_pids(server.process.pid)
    time.sleep(0.3)
    rest_kib = max(status_kib(owner, "VmRSS"), status_kib(owner, "VmHWM"))

    status, headers, body = split(b"".join(data for _, data in read_timed(send(server.port, "flood"))))
    assert status == "HTTP/1.1 200 OK", (status, body[:200])
    if kind == "capture":  # Go's server chunks an answer this big
        assert headers.get("Transfer-Encoding") == "chunked"
        assert dechunk(body) == (b"a" * SIZE, True)
    elif kind == "stream":  # a client this slow may fall -stream-buffer behind and be cut off: its part
        streamed, _whole = dechunk(body)
        assert streamed == b"a" * len(streamed) and streamed, body[:200]
    else:
        assert body == b"started"
    assert server.wait_for_log("finished handling flood", 60)
    grown = (status_kib(owner, "VmHWM") - rest_kib) * 1024
    print(
        f"{kind}: the run owner rested at {rest_kib / 1024:.1f} MiB and grew {grown / SIZE:.2f}x the output"
    )
    assert grown < BOUND, f"the run owner grew {grown / MiB:.1f} MiB for a {SIZE / MiB:.0f} MiB output"
    # The log has the output, whole, on its line.
    assert f"command output: {'a' * 64}" in server.log
    assert "a" * SIZE + "\n" in server.log
    assert server.request("POST", "/hooks/quick")[::2] == (200, b"ok")
    assert "Traceback" not in server.log
