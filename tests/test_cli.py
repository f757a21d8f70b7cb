"""The CLI's own pieces: early exits, listening as Go does, systemd variables, the pidfile."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hookrunner import cli
from hookrunner.flags import usage_text
from hookrunner.serve import tls


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-version"]) == 0
    assert capsys.readouterr().out == "hookrunner version 0.1.0 (webhook 2.8.2 compatible)\n"


def test_version_comes_from_the_installed_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import version

    assert cli.hookrunner_version() == version("hookrunner")  # the dev install: through importlib.metadata
    # A wheel's install: the METADATA file of the one hookrunner .dist-info beside the package.
    package = tmp_path / "hookrunner"
    package.mkdir()
    info = tmp_path / "hookrunner-9.8.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hookrunner\nVersion: 9.8.7\n\nVersion: 1\n")
    cli.hookrunner_version.cache_clear()  # read once per process; read again for this install
    monkeypatch.setattr(cli, "__file__", str(package / "cli.py"))
    assert cli.hookrunner_version() == "9.8.7"


def test_a_deferred_module_runs_on_its_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    name = "colorsys"
    monkeypatch.delitem(sys.modules, name, raising=False)
    deferred = cli._DeferredModule(name)
    deferred.__spec__ = importlib.util.find_spec(name)
    monkeypatch.setitem(sys.modules, name, deferred)
    import colorsys  # an import statement alone does not run it

    assert colorsys is deferred
    assert "rgb_to_hsv" not in vars(deferred)
    assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    real = sys.modules[name]
    assert real is not deferred
    assert deferred.rgb_to_hsv is real.rgb_to_hsv


def test_a_deferred_module_another_thread_has_loaded_is_not_loaded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    name = "colorsys"
    monkeypatch.delitem(sys.modules, name, raising=False)
    deferred = cli._DeferredModule(name)
    deferred.__spec__ = importlib.util.find_spec(name)
    # What a second thread sees: it read a name that was missing, while the first thread's read replaced
    # the deferred module in sys.modules by the real one.
    real = importlib.import_module(name)
    assert deferred.rgb_to_hsv is real.rgb_to_hsv
    assert sys.modules[name] is real


LOADED_CHILD = """
import json, sys
from hookrunner.cli import load_server_code
from hookrunner.flags import parse_args
load_server_code(parse_args(sys.argv[1:]))
print(json.dumps(sorted(sys.modules)))
"""

#: What the worker and the run owner need, and what a reload or a flag may need later.
WORKER_CODE = {
    "flask",
    "gevent",
    "hookrunner.serve.app",
    "hookrunner.serve.greenworker",
    "hookrunner.run.executor",
}
OWNER_CODE = {"gevent", "hookrunner.serve.ownerprocess", "hookrunner.run.owner", "hookrunner.run.executor"}
LATER = {"re2", "sqlite3", "watchdog", "prometheus_client"}


def loaded_by_the_master(*flags: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED_CHILD, *flags], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_master_loads_the_worker_and_owner_code_once_for_all(workers: str) -> None:
    # The master builds the app before it forks the run owner and the workers, which share those pages
    # (docs/performance.md, memory at rest); what a flag or a reload may bring is still left to it.
    loaded = loaded_by_the_master("-workers", workers, "-hotreload", "-metrics", "-state-dir", "/nonexistent")
    assert WORKER_CODE | OWNER_CODE <= loaded
    assert loaded & LATER == set()
    # werkzeug's development server is the stand-in (serve/devserver.py): http.server is never loaded.
    assert "werkzeug.serving" in loaded and "http.server" not in loaded


def test_the_master_loads_the_threaded_worker_for_gthread() -> None:
    loaded = loaded_by_the_master("-worker-class", "gthread")
    assert {"flask", "hookrunner.serve.threadworker", "hookrunner.serve.ownerprocess"} <= loaded
    assert "hookrunner.serve.greenworker" not in loaded


def test_with_setuid_the_master_loads_everything_before_the_privileges_go() -> None:
    # After -setuid the interpreter's files may be unreadable: the worker, a reload bringing the first
    # regex, the journal and the flags' libraries must all be in memory already.
    loaded = loaded_by_the_master(
        "-setuid", "1", "-setgid", "1", "-hotreload", "-metrics", "-state-dir", "/x"
    )
    assert WORKER_CODE | LATER <= loaded


def test_help_and_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-h"]) == 0
    assert capsys.readouterr().err == usage_text()
    assert cli.main(["-nope"]) == 2
    assert capsys.readouterr().err == "flag provided but not defined: -nope\n" + usage_text()


@pytest.mark.parametrize("argv", [["-setuid", "1000"], ["-setgid", "1000"]])
def test_setuid_and_setgid_go_together(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 1
    assert capsys.readouterr().out == "error: setuid and setgid options must be used together\n"


def test_list_cipher_suites(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-list-cipher-suites", "-tls-min-version", "1.3"]) == 0
    assert capsys.readouterr().out.splitlines() == tls.supported_cipher_names("1.3")
    assert cli.main(["-list-cipher-suites", "-tls-min-version", "9"]) == 1
    assert capsys.readouterr().err.endswith(" error: unknown minimum TLS version: 9\n")


@pytest.mark.parametrize(
    ("address", "expected"),
    [("0.0.0.0:9000", ("0.0.0.0", "9000")), (":80", ("", "80")), ("[::1]:9000", ("::1", "9000"))],
)
def test_split_host_port(address: str, expected: tuple[str, str]) -> None:
    assert cli._split_host_port(address) == expected


@pytest.mark.parametrize(
    ("ip", "port", "message"),
    [
        ("::1", 9000, "listen tcp: address ::1:9000: too many colons in address"),
        ("127.0.0.1", -5, "listen tcp: address -5: invalid port"),
        ("127.0.0.1", 70000, "listen tcp: address 70000: invalid port"),
        ("256.0.0.1", 9000, "listen tcp: lookup 256.0.0.1: no such host"),
    ],
)
def test_listen_errors_use_gos_words(ip: str, port: int, message: str) -> None:
    with pytest.raises(cli.ListenError, match=f"^{message}$"):
        cli.listen_tcp(ip, port)


def test_busy_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(cli.ListenError) as caught:
            cli.listen_tcp("127.0.0.1", port)
    assert str(caught.value) == f"listen tcp 127.0.0.1:{port}: bind: address already in use"


def test_wildcard_listens_on_ipv4_and_ipv6() -> None:
    listener = cli.listen_tcp("0.0.0.0", 0)
    with listener.sock:
        port = listener.sock.getsockname()[1]
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family, socket.SOCK_STREAM) as client:
                client.connect((host, port))
                accepted, _ = listener.sock.accept()
                accepted.close()
    assert listener.address == "0.0.0.0:0"


def test_unix_socket_stale_is_replaced_live_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    listener = cli.listen_unix(path)
    with listener.sock:
        assert (listener.address, listener.unix_path) == (f"{{unix:{path}}}", path)
        with pytest.raises(cli.ListenError, match=f"^listen unix {path}: bind: address already in use$"):
            cli.listen_unix(path)
    assert os.path.exists(path)  # a live server's socket is never removed by a second one


def test_systemd_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTEN_PID", str(os.getpid() + 1))
    monkeypatch.setenv("LISTEN_FDS", "1")
    assert cli.systemd_listener() is None  # meant for another process
    monkeypatch.setenv("LISTEN_PID", str(os.getpid()))
    monkeypatch.setenv("LISTEN_FDS", "2")
    with pytest.raises(cli.ListenError, match="received 2 sockets from systemd, but only 1 is supported"):
        cli.systemd_listener()
    assert "LISTEN_PID" not in os.environ and "LISTEN_FDS" not in os.environ


def test_pidfile(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "run" / "hr.pid"
    cli.create_pidfile(str(path))
    assert path.read_text() == str(os.getpid())
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    # A running process's pid refuses a second start.
    path.write_text(str(os.getppid()))
    with pytest.raises(OSError, match=f"pid file found, ensure webhook is not running or delete {path}"):
        cli.create_pidfile(str(path))
    assert path.read_text() == str(os.getppid())
    # Our own pid is stale: a restarted container gets the same pid again.
    path.write_text(str(os.getpid()))
    cli.create_pidfile(str(path))
    # A pid nobody has any more (a finished child) is stale and overwritten.
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    path.write_text(done.stdout.strip())
    cli.create_pidfile(str(path))
    assert path.read_text() == str(os.getpid())
