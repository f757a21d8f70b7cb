"""The command runner: path lookup, argv[0], HOOK_ environment, private temp files, Go's error texts."""

import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.command import resolve_command
from hookrunner.hooks.model import Hook, Limits
from hookrunner.hooks.request import Request
from hookrunner.run.executor import CommandRunner
from hookrunner.run.prepare import _decode_base64
from hookrunner.run.processes import identify
from hookrunner.state.journal import Journal
from hookrunner.state.slots import Busy


def request(rid: str = "abc123", **payload: object) -> Request:
    return Request(id=rid, method="POST", remote_addr="127.0.0.1:1", payload=dict(payload), body=b"raw")


def shell_script(path: Path, body: str) -> Path:
    """An executable /bin/sh script at `path`."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    """A command that prints its argv, its HOOK_/custom env and the mode and content of file env vars."""
    script = tmp_path / "probe"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import os, stat, sys
            print("argv:", sys.argv)
            print("cwd:", os.getcwd())
            for key in sorted(os.environ):
                if key.startswith(("HOOK_", "MY_")):
                    value = os.environ[key]
                    print(f"env {{key}}={{value}}")
                    if os.path.isfile(value):
                        mode = stat.S_IMODE(os.stat(value).st_mode)
                        print(f"file {{key}} mode={{mode:o}} data={{open(value, 'rb').read()!r}}")
            print("to stderr", file=sys.stderr, flush=True)
            sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
            """
        )
    )
    script.chmod(0o755)
    return script


def test_argv_env_and_files(probe: Path, tmp_path: Path) -> None:
    hook = Hook(
        id="h",
        execute_command=str(probe),
        pass_arguments=(
            Argument("payload", "ref"),
            Argument("payload", "missing"),
            Argument("string", "lit"),
        ),
        pass_environment=(Argument("payload", "ref"), Argument("payload", "ref", envname="MY_REF")),
        pass_file=(
            Argument("payload", "blob", base64decode=True),
            Argument("payload", "ref", envname="MY_FILE"),
        ),
    )
    result = CommandRunner().run(hook, request(ref="refs/heads/main", blob="aGVsbG8="))
    out = result.output.decode()
    assert result.ok
    assert f"argv: ['{probe}', 'refs/heads/main', '', 'lit']" in out  # a missing value is ""
    assert "env HOOK_ref=refs/heads/main" in out
    assert "env MY_REF=refs/heads/main" in out
    assert "file HOOK_BLOB mode=600 data=b'hello'" in out  # upper-cased name, decoded, private
    assert "file MY_FILE mode=600 data=b'refs/heads/main'" in out
    assert "to stderr" in out  # stdout and stderr combined
    leftovers = [p for p in Path("/tmp").glob("HOOK_BLOB*")] + list(tmp_path.glob("MY_FILE*"))
    assert leftovers == []


def test_temp_files_go_to_the_working_directory_and_are_removed(probe: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    hook = Hook(
        id="h",
        execute_command=str(probe),
        command_working_directory=str(workdir),
        pass_file=(Argument("payload", "ref", envname="MY_FILE"),),
    )
    result = CommandRunner().run(hook, request(ref="x"))
    assert f"env MY_FILE={workdir}/MY_FILE" in result.output.decode()
    assert f"cwd: {workdir}" in result.output.decode()
    assert list(workdir.iterdir()) == []


def test_exit_status_is_an_error(probe: Path) -> None:
    hook = Hook(id="h", execute_command=str(probe), pass_arguments=(Argument("string", "3"),))
    result = CommandRunner().run(hook, request())
    assert result.error == "exit status 3"
    assert b"argv:" in result.output


def test_killed_by_a_signal(tmp_path: Path) -> None:
    script = shell_script(tmp_path / "die", "kill -9 $$\n")
    result = CommandRunner().run(Hook(id="h", execute_command=str(script)), request())
    assert result.error == "signal: killed"


def test_relative_command_is_taken_from_the_working_directory(probe: Path) -> None:
    hook = Hook(id="h", execute_command="probe", command_working_directory=str(probe.parent))
    assert resolve_command(hook) == str(probe)
    result = CommandRunner().run(hook, request())
    assert result.ok
    assert f"cwd: {probe.parent}" in result.output.decode()


def test_argv0_is_execute_command_as_written() -> None:
    hook = Hook(
        id="h",
        execute_command="bash",
        pass_arguments=(Argument("string", "-c"), Argument("string", "echo $0")),
    )
    assert CommandRunner().run(hook, request()).output == b"bash\n"


def test_missing_command_is_a_result_not_an_exception() -> None:
    result = CommandRunner().run(Hook(id="h", execute_command="/nonexistent/cmd"), request())
    assert not result.ok
    assert result.output == b""


def test_background_commands_are_waited_for_and_killed_after_the_grace(tmp_path: Path) -> None:
    marker = tmp_path / "done"
    script = shell_script(tmp_path / "slow", f"sleep 0.3\ntouch {marker}\n")
    runner = CommandRunner()
    runner.start(Hook(id="h", execute_command=str(script)), request())
    runner.shutdown(grace=5)
    assert marker.exists()

    forever = shell_script(tmp_path / "forever", "sleep 30 &\nwait\n")
    runner.start(Hook(id="h", execute_command=str(forever)), request())
    deadline = time.monotonic() + 5
    while runner.running == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    runner.shutdown(grace=0.2)
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while runner.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.running == 0


def test_file_mode_is_private(probe: Path) -> None:
    assert stat.S_IMODE(os.stat(probe).st_mode) == 0o755  # sanity: the probe itself is executable


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "stubborn"
    # The leader ignores TERM; its child sleeps: both must be gone after the timeout and the grace.
    script.write_text(f"#!/bin/sh\ntrap '' TERM\nsleep 30 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    runner = CommandRunner(kill_grace=0.3)
    hook = Hook(id="h", execute_command=str(script), command_timeout=0.5)
    started = time.monotonic()
    result = runner.run(hook, request())
    assert time.monotonic() - started < 5
    assert result.error is not None and result.error.startswith("command timed out after 0.5s")
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    # A zombie is gone for every purpose but its pid entry; anything else would be an orphan.
    if Path(f"/proc/{child}").exists():
        assert Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_global_timeout_applies_when_the_hook_sets_none(tmp_path: Path) -> None:
    runner = CommandRunner(command_timeout=0.2, kill_grace=0.2)
    result = runner.run(Hook(id="h", execute_command="/bin/sleep", pass_arguments=(Argument("string", "5"),)), request())
    assert result.error == "command timed out after 0.2s (signal: terminated)"


def test_python_locale_coercion_does_not_leak_into_commands(tmp_path: Path) -> None:
    # Start a real hookrunner-like interpreter under the C locale and look at what its command gets.
    import subprocess

    code = (
        "from hookrunner.run.prepare import inherited_environment; import os;"
        "print(os.environ.get('LC_CTYPE'), inherited_environment().get('LC_CTYPE'))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "LANG": "C"}, capture_output=True, text=True)
    coerced, passed_on = out.stdout.split()
    assert passed_on == "None"
    explicit = subprocess.run(
        [sys.executable, "-c", code], env={**env, "LANG": "en_US.UTF-8", "LC_CTYPE": "C.UTF-8"}, capture_output=True, text=True
    )
    assert explicit.stdout.split() == ["C.UTF-8", "C.UTF-8"]  # a locale the user chose is kept


def test_the_inherited_environment_follows_every_change_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookrunner.run.prepare import inherited_environment

    monkeypatch.setenv("HOOKRUNNER_TEST_VAR", "one")
    first = inherited_environment()
    assert first["HOOKRUNNER_TEST_VAR"] == "one"
    first["HOOKRUNNER_TEST_VAR"] = "changed by a caller"  # each caller gets a dict of its own
    assert inherited_environment()["HOOKRUNNER_TEST_VAR"] == "one"
    monkeypatch.setenv("HOOKRUNNER_TEST_VAR", "two")
    assert inherited_environment()["HOOKRUNNER_TEST_VAR"] == "two"
    monkeypatch.delenv("HOOKRUNNER_TEST_VAR")
    assert "HOOKRUNNER_TEST_VAR" not in inherited_environment()


def test_with_the_log_off_a_run_builds_no_log_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookrunner.ops.log import log
    from hookrunner.run import executor

    def refuse(text: str) -> str:
        raise AssertionError("quoted for a log that is off")

    monkeypatch.setattr(executor, "go_quote", refuse)
    monkeypatch.setattr(log, "enabled", False)
    hook = Hook(id="h", execute_command="/bin/echo", pass_arguments=(Argument("string", "a b"),))
    result = CommandRunner().run(hook, request())
    assert (result.output, result.error) == (b"a b\n", None)


def test_runs_still_queued_when_shutdown_gives_up_start_nothing(tmp_path: Path) -> None:
    # Before the fix a queued run started its command right after shutdown killed the running one, and
    # the exiting server left it behind in its own session.
    record = tmp_path / "started"
    script = shell_script(tmp_path / "slow", f"echo $$ >> {record}\nsleep 30\n")
    hook = Hook(id="serial", execute_command=str(script), limits=Limits(max_concurrency=1, max_queue=3))
    runner = CommandRunner()
    futures = [runner.submit(hook, request()) for _ in range(3)]
    deadline = time.monotonic() + 5
    while runner.running == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.queued == 2
    runner.shutdown(grace=0.2)
    results = [future.result(timeout=10) for future in futures]
    assert results[0].error == "signal: killed"
    assert [r.error for r in results[1:]] == ["not started: hookrunner is shutting down"] * 2
    assert len(record.read_text().split()) == 1  # only the first command ever ran
    assert runner.running == 0


def test_with_a_journal_a_run_refused_as_busy_is_finished_and_never_replayed(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    script = shell_script(tmp_path / "wait", f"while [ ! -e {gate} ]; do sleep 0.01; done\n")
    hook = Hook(id="one", execute_command=str(script), limits=Limits(max_concurrency=1, max_queue=0))
    runner = CommandRunner()
    runner.journal = Journal(str(tmp_path / "state"), "boot-1")
    try:
        accepted = runner.submit(hook, request("kept"))
        with pytest.raises(Busy):
            runner.submit(hook, request("refused"))
        # Both were written down before they were admitted; only the accepted one is left for a replay.
        left = Journal(str(tmp_path / "state"), "boot-2")
        assert [x.spec.request_id for x in left.claim_left_overs()] == ["kept"]
        left.close()
        gate.touch()
        assert accepted.result(timeout=10).ok
    finally:
        gate.touch()
        runner.shutdown(grace=0.2)


@pytest.mark.parametrize(
    ("text", "decoded"),
    [
        ("aGVsbG8=", b"hello"),
        ("aGVs\nbG8=", b"hello"),  # Go's decoder skips line breaks anywhere, padding included
        ("aGVs\r\nbG8=\r\n", b"hello"),
        ("aGVsbG8\n=", b"hello"),
        ("\naGVsbG8=", b"hello"),
        ("aGVs bG8=", b"hel"),  # corrupt: the whole quanta before the error are kept
        ("aGVsbG8", b"hel"),  # missing padding is corrupt too
        ("aGU=aGVs", b"he"),  # data after the padding: the padded quantum is kept
        ("aGVs\tbG8=", b"hel"),  # only \r and \n are skipped
        ("", b""),
    ],
)
def test_base64_decodes_as_go_std_encoding(text: str, decoded: bytes) -> None:
    assert _decode_base64(text) == decoded



ESCAPING = """
import os, sys, time
print("started", flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "w") as out:
            out.write(str(os.getpid()))
        time.sleep(60)  # holds stdout and stderr
    os._exit(0)
time.sleep(60)
"""


def test_a_timeout_ends_a_grandchild_that_left_the_session_and_holds_the_output(tmp_path: Path) -> None:
    pidfile = tmp_path / "escaped.pid"
    hook = Hook(
        id="h",
        execute_command=sys.executable,
        pass_arguments=(Argument("string", "-c"), Argument("string", ESCAPING), Argument("string", str(pidfile))),
        command_timeout=1.0,
    )
    runner = CommandRunner()
    started = time.monotonic()
    result = runner.run(hook, request())
    took = time.monotonic() - started
    assert 1.0 <= took <= 2.0, took
    assert result.output == b"started\n"
    assert result.error == "command timed out after 1s (signal: terminated)"
    escaped = int(pidfile.read_text())
    assert identify(escaped) is None  # gone (at most a zombie of init is left)
    assert runner.running == 0


def test_a_timeout_holds_for_a_command_that_closed_its_output_and_runs_on(tmp_path: Path) -> None:
    script = shell_script(tmp_path / "quiet", "echo bye\nexec >&- 2>&-\nsleep 30\n")
    runner = CommandRunner(kill_grace=0.3)
    started = time.monotonic()
    result = runner.run(Hook(id="h", execute_command=str(script), command_timeout=0.5), request())
    assert time.monotonic() - started < 2.0
    assert (result.output, result.error) == (b"bye\n", "command timed out after 0.5s (signal: terminated)")


def test_a_queued_run_keeps_its_argv_not_the_request(tmp_path: Path) -> None:
    """Issue 21: a run waiting in the queue holds what its command needs, and the request (with its body
    and parsed payload) is freed as soon as it is answered."""
    import gc
    import weakref

    from hookrunner.hooks.model import Limits

    hook = Hook(
        id="serial",
        execute_command="/bin/sleep",
        pass_arguments=(Argument("payload", "s"),),
        limits=Limits(max_concurrency=1, max_queue=5),
    )
    runner = CommandRunner()
    first = runner.submit(hook, request(s="0.5"))
    queued = Request(
        id="q",
        method="POST",
        remote_addr="127.0.0.1:1",
        payload={"s": "0", "pad": "x" * 100_000},
        body=b"x" * 100_000,
    )
    gone = weakref.ref(queued)
    second = runner.submit(hook, queued)
    del queued
    gc.collect()
    assert runner.queued == 1
    assert gone() is None  # nothing in the queue refers to the request any more
    assert first.result(timeout=10).error is None
    assert second.result(timeout=10).error is None


def test_submit_tells_on_output_each_chunk_of_its_run_and_the_result_keeps_the_whole(tmp_path: Path) -> None:
    script = shell_script(tmp_path / "talk", "echo one\nsleep 0.3\necho two\n")
    heard: list[bytes] = []
    future = CommandRunner().submit(Hook(id="h", execute_command=str(script)), request(), on_output=heard.append)
    result = future.result(timeout=10)
    assert result.ok
    assert len(heard) == 2  # two writes 0.3 s apart: two chunks, each as it came
    assert b"".join(heard) == result.output == b"one\ntwo\n"
