"""The real `hookrunner` command serving: TCP, TLS, Unix and systemd sockets, pidfile, logfile, signals."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme
from command_under_test import HOOKRUNNER_BIN
from integration_harness import HOOKRUNNER_TEST_FLAGS, free_port
from waiting import eventually

HOOKRUNNER = HOOKRUNNER_BIN
LOG_LINE = re.compile(r"^\[webhook\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d ")



def wait_until(check: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll `check` until it holds or `timeout` passes; never a fixed sleep."""
    return eventually(check, timeout, interval)


def python_hook(hook_id: str, code: str, **extra: object) -> dict[str, object]:
    """A hook running `python -c code` (no shell), answering at once unless extra says otherwise."""
    return {
        "id": hook_id,
        "execute-command": sys.executable,
        "pass-arguments-to-command": [{"source": "string", "name": "-c"}, {"source": "string", "name": code}],
        **extra,
    }


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=10)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self._path)


#: The run owner's process name (serve/runowner.py): the master's other children are its workers (and,
#: with -admin-addr, the admin listener).
RUN_OWNER_NAME = "run-owner"


#: Log lines of the run owner, the master about it, or a worker about it: hookrunner's own, never webhook's.
RUN_OWNER_LINE = re.compile(r"\brun owner\b")


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def master_children(master: int) -> list[int]:
    try:
        return [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
    except OSError:
        return []


def run_owner_pids(master: int) -> list[int]:
    return [pid for pid in master_children(master) if process_name(pid) == RUN_OWNER_NAME]


def worker_pids(master: int) -> list[int]:
    """The master's children but the run owner: its workers (and, with -admin-addr, the admin listener)."""
    return [pid for pid in master_children(master) if process_name(pid) != RUN_OWNER_NAME]


class Server:
    """One `hookrunner` process started as a user would, with its stderr captured to a file."""

    def __init__(self, tmp: Path, hooks: object, *flags: str, port: int | None = None,
                 hooks_name: str = "hooks.json", tcp: bool = True,
                 popen: Callable[..., subprocess.Popen[bytes]] | None = None) -> None:
        self.tmp = tmp
        self.hooks_path = tmp / hooks_name
        if hooks is not None:
            self.write_hooks(hooks)
        self.port = port or free_port()
        self.stderr_path = tmp / f"stderr-{self.port}.txt"
        self.argv = [HOOKRUNNER, "-hooks", str(self.hooks_path), "-verbose", *HOOKRUNNER_TEST_FLAGS, *flags]
        if tcp:
            self.argv += ["-ip", "127.0.0.1", "-port", str(self.port)]
        with open(self.stderr_path, "wb") as err:
            starter = popen or subprocess.Popen
            self.process = starter(self.argv, stdout=subprocess.PIPE, stderr=err, cwd=tmp)

    def write_hooks(self, hooks: object) -> None:
        text = hooks if isinstance(hooks, str) else json.dumps(hooks)
        self.hooks_path.write_text(text)

    @property
    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def worker_pid(self) -> int:
        """The pid of the worker process: the master's one child that is not the run owner."""
        workers = worker_pids(self.process.pid)
        assert len(workers) == 1, workers
        return workers[0]

    def wait_for_log(self, text: str, timeout: float = 10.0) -> bool:
        return wait_until(lambda: text in self.log, timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                conn: http.client.HTTPConnection | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body)
            answer = conn.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            conn.close()

    def ready(self, conn_factory: Callable[[], http.client.HTTPConnection] | None = None) -> None:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"hookrunner exited with {self.process.returncode}:\n{self.log}")
            try:
                status = self.request("GET", "/", conn=conn_factory() if conn_factory else None)[0]
            except OSError:
                return False
            return status == 200

        assert wait_until(answers, timeout=15), self.log

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 40) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.stdout:
                self.process.stdout.close()


def tls_files(tmp_path: Path) -> tuple[trustme.CA, list[str]]:
    """A test CA, and the -secure flags for a certificate it issued for 127.0.0.1 (files in tmp_path)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    return ca, ["-secure", "-cert", str(tmp_path / "cert.pem"), "-key", str(tmp_path / "key.pem")]


ECHO_HOOK = {"id": "hello", "execute-command": "/bin/echo", "response-message": "hi there"}


def test_serves_http_with_webhooks_startup_log(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path, [ECHO_HOOK])
    servers.append(server)
    server.ready()
    status, headers, body = server.request("GET", "/")
    assert (status, body) == (200, b"OK")
    assert "server" not in headers  # webhook's Go server sends no Server header
    assert server.request("POST", "/hooks/hello")[::2] == (200, b"hi there")
    assert server.request("POST", "/hooks/nope")[::2] == (404, b"Hook not found.")
    lines = server.log.splitlines()
    assert all(LOG_LINE.match(line) or line.startswith("please check") for line in lines if line), lines
    messages = [LOG_LINE.sub("", line) for line in lines]
    expected = [
        "version 0.1.0 starting",
        "setting up os signal watcher",
        f"attempting to load hooks from {server.hooks_path}",
        "found 1 hook(s) in file",
        "\tloaded: hello",
        f"serving hooks on http://127.0.0.1:{server.port}/hooks/{{id}}",
    ]
    assert messages[: len(expected)] == expected
    assert server.stop() == 0
    assert "caught terminated signal; exiting" in server.log


def test_tls_request(tmp_path: Path, servers: list[Server]) -> None:
    ca, flags = tls_files(tmp_path)
    server = Server(tmp_path, [ECHO_HOOK], *flags, "-tls-min-version", "1.3")
    servers.append(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    client.set_alpn_protocols(["h2", "http/1.1"])

    def connect() -> http.client.HTTPConnection:
        return http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10)

    server.ready(connect)
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10)
    status, _, body = server.request("POST", "/hooks/hello", conn=conn)
    assert (status, body) == (200, b"hi there")
    assert f"serving hooks on https://127.0.0.1:{server.port}/hooks/{{id}}" in server.log
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls_conn:
            assert tls_conn.version() == "TLSv1.3"
            assert tls_conn.selected_alpn_protocol() in (None, "http/1.1")  # never HTTP/2
    old = ssl.create_default_context()
    ca.configure_trust(old)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            old.wrap_socket(raw, server_hostname="127.0.0.1").close()


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("secure", [False, True], ids=["http", "https"])
def test_kept_alive_connection_with_and_without_pauses(tmp_path: Path, servers: list[Server], secure: bool) -> None:
    # Requests that follow at once, after short and long pauses, and more than 64 of them (a number a
    # worker could count per connection): all are answered on the one connection. (A worker thread that
    # kept serving its connection itself was tried and measured: docs/performance.md.)
    ca, flags = tls_files(tmp_path) if secure else (None, [])
    server = Server(tmp_path, [ECHO_HOOK], *flags)
    servers.append(server)
    client = ssl.create_default_context()
    if ca is not None:
        ca.configure_trust(client)

    def connect() -> http.client.HTTPConnection:
        if secure:
            return http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10)
        return http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

    server.ready(connect)
    conn = connect()
    pauses = [0.0, 0.0, 0.05, 0.0, 0.3, 0.0] + [0.0] * 70
    first_socket = None
    for n, pause in enumerate(pauses):
        time.sleep(pause)
        conn.request("POST", "/hooks/hello")
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"hi there"), n
        first_socket = first_socket or conn.sock
        assert conn.sock is first_socket, f"request {n} needed a new connection"
    conn.close()

    # Two requests in separate writes (separate TLS records under -secure) before the first is answered.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        sock = client.wrap_socket(raw, server_hostname="127.0.0.1") if secure else raw
        try:
            sock.sendall(b"POST /hooks/hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            sock.sendall(b"GET /hooks/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = _read_until_closed(sock)
        finally:
            sock.close()
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\n\r\nhi there" in data
    second = data.split(b"hi there", 1)[1]
    assert second.startswith(b"HTTP/1.1 404 Not Found\r\n") and second.endswith(b"\r\n\r\nHook not found.")


def test_unix_socket_request_and_cleanup(tmp_path: Path, servers: list[Server]) -> None:
    path = str(tmp_path / "hooks.sock")
    # A stale socket file left by a dead process is replaced, not an error.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    server = Server(tmp_path, [ECHO_HOOK], "-socket", path, tcp=False)
    servers.append(server)
    server.ready(lambda: UnixHTTPConnection(path))
    status, _, body = server.request("POST", "/hooks/hello", conn=UnixHTTPConnection(path))
    assert (status, body) == (200, b"hi there")
    assert f"serving hooks on http://{{unix:{path}}}/hooks/{{id}}" in server.log
    assert server.stop() == 0
    assert not os.path.exists(path)


def test_systemd_socket_activation(tmp_path: Path, servers: list[Server]) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    # systemd passes the socket as fd 3 and names the receiving pid; a tiny exec wrapper keeps the pid.
    wrapper = (
        "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); os.close(fd); os.set_inheritable(3, True); "
        "os.environ['LISTEN_PID'] = str(os.getpid()); os.environ['LISTEN_FDS'] = '1'; "
        "os.execv(sys.argv[2], sys.argv[2:])"
    )
    fd = listener.fileno()

    def popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", wrapper, str(fd), *argv], pass_fds=(fd,), **kwargs)  # type: ignore[call-overload]

    server = Server(tmp_path, [ECHO_HOOK], "-port", "1", port=port, tcp=False, popen=popen)
    servers.append(server)
    listener.close()
    server.ready()
    assert server.request("POST", "/hooks/hello")[::2] == (200, b"hi there")
    assert f"serving hooks on http://127.0.0.1:{port}/hooks/{{id}}" in server.log
    assert server.stop() == 0


def test_pidfile_lifecycle(tmp_path: Path, servers: list[Server]) -> None:
    pidfile = tmp_path / "run" / "hookrunner.pid"
    server = Server(tmp_path, [ECHO_HOOK], "-pidfile", str(pidfile))
    servers.append(server)
    server.ready()
    assert pidfile.read_text() == str(server.process.pid)
    # A second instance with the same pidfile refuses to start while the first runs.
    second = subprocess.run([HOOKRUNNER, "-hooks", str(server.hooks_path), "-verbose", "-ip", "127.0.0.1",
                             "-port", str(free_port()), "-pidfile", str(pidfile)],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 1
    assert f"Error creating pidfile: pid file found, ensure webhook is not running or delete {pidfile}" in (
        second.stderr
    )
    assert pidfile.read_text() == str(server.process.pid)
    assert server.stop() == 0
    assert not pidfile.exists()


def test_logfile_receives_the_log(tmp_path: Path, servers: list[Server]) -> None:
    logfile = tmp_path / "hookrunner.log"
    server = Server(tmp_path, [ECHO_HOOK], "-logfile", str(logfile))
    servers.append(server)
    server.ready()
    server.request("POST", "/hooks/hello")
    assert server.stop() == 0
    lines = logfile.read_text().splitlines()
    assert lines and all(LOG_LINE.match(line) for line in lines if line and not line.startswith("please"))
    text = logfile.read_text()
    assert "version 0.1.0 starting" in text
    assert "\tloaded: hello" in text
    assert "caught terminated signal; exiting" in text
    assert "starting" not in server.log  # the log went to the file, not to stderr


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGUSR1, "USR1"), (signal.SIGHUP, "HUP")])
def test_signal_reloads_hooks(tmp_path: Path, servers: list[Server], signum: int, name: str) -> None:
    server = Server(tmp_path, [ECHO_HOOK])
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/added")[0] == 404
    added = {"id": "added", "execute-command": "/bin/echo", "response-message": "new"}
    server.write_hooks([ECHO_HOOK, added])
    server.signal(signum)
    served = wait_until(lambda: server.request("POST", "/hooks/added")[::2] == (200, b"new"), timeout=5)
    assert served, server.log
    assert f"caught {name} signal" in server.log
    assert f"attempting to reload hooks from {server.hooks_path}" in server.log
    # The process is still the same one, serving: a reload is not a restart.
    assert server.process.poll() is None
    assert server.stop() == 0


def test_sigterm_lets_a_running_background_command_finish(tmp_path: Path, servers: list[Server]) -> None:
    marker = tmp_path / "finished"
    code = f"import pathlib, time; time.sleep(2); pathlib.Path({str(marker)!r}).write_text('done')"
    server = Server(tmp_path, [python_hook("slow", code, **{"response-message": "started"})])
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/slow")[::2] == (200, b"started")
    # The command is running in the background when the stop request comes.
    time.sleep(0.3)
    started = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.stop(timeout=30) == 0
    assert marker.read_text() == "done"
    assert time.monotonic() - started < 15
    assert "caught terminated signal; exiting" in server.log


def test_sigint_is_graceful_too(tmp_path: Path, servers: list[Server]) -> None:
    marker = tmp_path / "finished"
    code = f"import pathlib, time; time.sleep(1); pathlib.Path({str(marker)!r}).write_text('done')"
    server = Server(tmp_path, [python_hook("slow", code)])
    servers.append(server)
    server.ready()
    server.request("POST", "/hooks/slow")
    time.sleep(0.2)
    server.signal(signal.SIGINT)
    assert server.stop(timeout=30) == 0
    assert marker.read_text() == "done"
    assert "caught interrupt signal; exiting" in server.log


def test_worker_replaced_after_a_crash_serves_the_hosts_current_hooks(tmp_path: Path, servers: list[Server]) -> None:
    # The hooks are the host's (the run owner reloads them, issue 32 step 9): a worker the master starts in
    # place of a dead one serves, from its very first answer, the hooks the host last loaded, not those of
    # start-up time; and a file changed with no reload (no -hotreload, no signal) is no more served by it
    # than by any other worker, as webhook serves such a file only once told to reload.
    server = Server(tmp_path, [ECHO_HOOK])
    servers.append(server)
    server.ready()
    server.write_hooks([{"id": "later", "execute-command": "/bin/echo", "response-message": "later"}])
    server.signal(signal.SIGUSR1)
    assert wait_until(lambda: _quiet_request(server, "/hooks/later") == 200, timeout=10), server.log
    server.write_hooks([{"id": "unreloaded", "execute-command": "/bin/echo"}])
    os.kill(server.worker_pid(), signal.SIGKILL)
    answers: list[int] = []
    assert wait_until(lambda: answers.append(_quiet_request(server, "/hooks/hello")) or answers[-1] != 0,
                      timeout=15), server.log
    assert answers[-1] == 404  # start-up's hook: gone with the reload
    assert _quiet_request(server, "/hooks/later") == 200
    assert _quiet_request(server, "/hooks/unreloaded") == 404
    assert server.stop() == 0


def test_commands_start_with_no_blocked_signals(tmp_path: Path, servers: list[Server]) -> None:
    code = "print([l for l in open('/proc/self/status') if l.startswith('SigBlk')][0].split()[1])"
    server = Server(tmp_path, [python_hook("mask", code, **{"include-command-output-in-response": True})])
    servers.append(server)
    server.ready()
    assert server.request("POST", "/hooks/mask")[::2] == (200, b"0000000000000000\n")


@pytest.mark.parametrize("attempt", range(3))
def test_stop_right_after_start_is_not_lost(tmp_path: Path, servers: list[Server], attempt: int) -> None:
    # SIGTERM as soon as the start-up log ends: the worker may still be booting.
    server = Server(tmp_path, [ECHO_HOOK])
    servers.append(server)
    assert server.wait_for_log("os signal watcher ready")
    time.sleep(0.05 * attempt)
    server.signal(signal.SIGTERM)
    assert server.process.wait(timeout=10) == 0


def _quiet_request(server: Server, path: str) -> int:
    try:
        return server.request("POST", path)[0]
    except OSError:
        return 0


def _free_privileged_port() -> int:
    for port in range(900, 1024):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 1024")


@pytest.mark.skipif(os.geteuid() != 0, reason="binding a low port and dropping privileges needs root")
def test_setuid_setgid_drop_privileges_after_binding(servers: list[Server]) -> None:
    folder = Path(tempfile.mkdtemp(prefix="hookrunner-setuid-"))
    try:
        folder.chmod(0o755)  # hooks are read after the drop, as nobody
        whoami = {"id": "whoami", "execute-command": "/usr/bin/id", "include-command-output-in-response": True,
                  "pass-arguments-to-command": [{"source": "string", "name": "-u"}]}
        server = Server(folder, [whoami], "-setuid", "65534", "-setgid", "65534", port=_free_privileged_port())
        servers.append(server)
        server.hooks_path.chmod(0o644)
        server.ready()
        assert server.request("POST", "/hooks/whoami")[::2] == (200, b"65534\n")
        # The master, and the run owner it forked after the drop (docs/run-state.md, "Why after -setuid").
        owners = run_owner_pids(server.process.pid)
        assert len(owners) == 1
        for pid in (server.process.pid, *owners):
            status = Path(f"/proc/{pid}/status").read_text()
            assert re.search(r"^Uid:\s+65534\s+65534\s+65534\s+65534$", status, re.M), status
            assert re.search(r"^Gid:\s+65534\s+65534\s+65534\s+65534$", status, re.M), status
        assert server.stop() == 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------------------ start-up failures


def run_once(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HOOKRUNNER, *argv], capture_output=True, text=True, timeout=30, cwd=tmp)


def test_version() -> None:
    done = subprocess.run([HOOKRUNNER, "-version"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "hookrunner version 0.1.0 (webhook 2.8.2 compatible)\n")


def test_setuid_without_setgid(tmp_path: Path) -> None:
    done = run_once(tmp_path, "-setuid", "1000")
    assert (done.returncode, done.stdout) == (1, "error: setuid and setgid options must be used together\n")


def test_no_hooks_is_fatal_without_verbose(tmp_path: Path) -> None:
    # Port 0: why, in test_exit_codes_match_the_reference. Python's dev mode turns an unclosed socket on this
    # early exit (the listener is bound before hooks load) into a warning on stderr.
    done = subprocess.run(
        [HOOKRUNNER, "-hooks", str(tmp_path / "missing.json"), "-port", "0"],
        capture_output=True, text=True, timeout=30, cwd=tmp_path, env={**os.environ, "PYTHONDEVMODE": "1"},
    )
    assert done.stderr == ""
    assert done.returncode == 1
    assert LOG_LINE.match(done.stdout)
    assert LOG_LINE.sub("", done.stdout) == (
        "couldn't load any hooks from file!\n"
        "aborting webhook execution since the -verbose flag is set to false.\n"
        "If, for some reason, you want webhook to start without the hooks, "
        "either use -verbose flag, or -nopanic\n"
    )


def test_duplicate_hook_id_is_fatal(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([ECHO_HOOK]))
    (tmp_path / "b.json").write_text(json.dumps([ECHO_HOOK]))
    done = run_once(tmp_path, "-hooks", "a.json", "-hooks", "b.json", "-verbose", "-port", str(free_port()))
    assert done.returncode == 1
    message = "error: hook with the id hello has already been loaded!\nplease check your hooks file"
    assert message in done.stderr


def test_port_in_use(tmp_path: Path) -> None:
    (tmp_path / "hooks.json").write_text(json.dumps([ECHO_HOOK]))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = run_once(tmp_path, "-ip", "127.0.0.1", "-port", str(port))
    assert done.returncode == 1
    assert LOG_LINE.sub("", done.stderr) == (
        f"error listening on port: listen tcp 127.0.0.1:{port}: bind: address already in use\n"
    )


@pytest.mark.reference
@pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")
@pytest.mark.parametrize(
    "argv", [["-setuid", "5"], ["-setgid", "5"], ["-version"], ["-hooks", "/nonexistent"]]
)
def test_exit_codes_match_the_reference(tmp_path: Path, argv: list[str]) -> None:
    # Port 0: both bind before they load hooks, and a port from free_port() is closed again before the
    # command binds it, so another socket could take it first. Then that side fails to listen and prints
    # nothing while the other prints the no-hooks message (seen once under load). The kernel's own pick at
    # bind time cannot be taken.
    theirs = subprocess.run(["webhook", *argv, "-port", "0"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    ours = run_once(tmp_path, *argv, "-port", "0")
    assert ours.returncode == theirs.returncode
    if "-version" not in argv:
        # webhook's signal-watching goroutine logs "os signal watcher ready" while main logs the no-hooks
        # message and exits: now and then the goroutine's line is written before the exit (seen once in CI),
        # usually not. That one line is left out of the comparison, on both sides.
        racy = "os signal watcher ready\n"
        ours_text = LOG_LINE.sub("", ours.stdout).replace(racy, "")
        assert ours_text == LOG_LINE.sub("", theirs.stdout).replace(racy, "")


@pytest.mark.reference
@pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")
def test_startup_log_matches_the_reference(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([ECHO_HOOK, {"id": "second", "execute-command": "/bin/echo"}]))
    (tmp_path / "b.yaml").write_text("- id: third\n  execute-command: /bin/echo\n")
    flags = ["-hooks", "a.json", "-hooks", "b.yaml", "-verbose", "-hotreload", "-ip", "127.0.0.1"]

    def startup_log(program: str) -> list[str]:
        port = free_port()
        err = tmp_path / f"{Path(program).name}.err"
        with open(err, "wb") as handle:
            process = subprocess.Popen([program, *flags, "-port", str(port)], stderr=handle, cwd=tmp_path)
        try:
            assert wait_until(lambda: "serving hooks on" in err.read_text(), timeout=15)
        finally:
            process.terminate()
            process.wait(timeout=30)
        lines = [LOG_LINE.sub("", line) for line in err.read_text().splitlines()]
        lines = lines[: next(i for i, line in enumerate(lines) if "serving hooks on" in line) + 1]
        # The version differs by design and the port by necessity; Go logs `os signal watcher ready`
        # from a goroutine, so where that line lands is a race.
        return [
            "version starting" if line.startswith("version ") else line.replace(f":{port}/", ":PORT/")
            for line in lines
            if line != "os signal watcher ready"
        ]

    assert startup_log(HOOKRUNNER) == startup_log("webhook")


def test_missing_certificate(tmp_path: Path) -> None:
    (tmp_path / "hooks.json").write_text(json.dumps([ECHO_HOOK]))
    port = free_port()
    done = run_once(tmp_path, "-verbose", "-secure", "-ip", "127.0.0.1", "-port", str(port))
    # Like webhook: the address is announced, then the certificate turns out to be missing.
    assert [LOG_LINE.sub("", line) for line in done.stderr.splitlines()[-2:]] == [
        f"serving hooks on https://127.0.0.1:{port}/hooks/{{id}}",
        "open cert.pem: no such file or directory",
    ]
    assert done.returncode == 1  # webhook exits 0 here; a failed start must not look like success


@pytest.mark.reference
@pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1])
def test_reload_log_matches_the_reference(tmp_path: Path, signum: int) -> None:
    def reload_log(program: str) -> list[str]:
        folder = tmp_path / Path(program).name
        folder.mkdir()
        hooks = folder / "hooks.json"
        hooks.write_text(json.dumps([ECHO_HOOK]))
        err = folder / "stderr.txt"
        with open(err, "wb") as handle:
            process = subprocess.Popen([program, "-hooks", str(hooks), "-verbose", "-ip", "127.0.0.1",
                                        "-port", str(free_port())], stderr=handle, cwd=folder)
        try:
            assert wait_until(lambda: "os signal watcher ready" in err.read_text(), timeout=15)
            hooks.write_text(json.dumps([ECHO_HOOK, {"id": "more", "execute-command": "/bin/echo"}]))
            process.send_signal(signum)
            assert wait_until(lambda: "\tloaded: more" in err.read_text(), timeout=10)
        finally:
            process.terminate()
            process.wait(timeout=30)
        lines = [LOG_LINE.sub("", line) for line in err.read_text().splitlines()]
        start = next(i for i, line in enumerate(lines) if line.startswith("caught "))
        # The run owner's lines are hookrunner's own (a worker booting late greets it after the signal).
        return [line.replace(str(hooks), "HOOKS") for line in lines[start:] if not RUN_OWNER_LINE.search(line)]

    assert reload_log(HOOKRUNNER) == reload_log("webhook")


# ------------------------------------------------------------------- the protocol as net/http speaks it

PLAIN = b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
PROTOCOL_CASES = [
    ("no-host", b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: missing required Host header\r\n" + PLAIN
     + b"400 Bad Request: missing required Host header"),
    ("malformed-host", b"GET / HTTP/1.0\r\nHost: a b\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: malformed Host header\r\n" + PLAIN + b"400 Bad Request: malformed Host header"),
    ("two-hosts", b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
     b"HTTP/1.1 400 Bad Request\r\n" + PLAIN + b"400 Bad Request"),
    ("garbage", b"GARBAGE\r\n\r\n", b"HTTP/1.1 400 Bad Request\r\n" + PLAIN + b"400 Bad Request"),
    ("http-2.0", b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
     b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version\r\n" + PLAIN
     + b"505 HTTP Version Not Supported: unsupported protocol version"),
    ("bad-header-name", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: invalid header name\r\n" + PLAIN + b"400 Bad Request: invalid header name"),
    # net/http's checks of header names and values come after its Host checks and after the framing and
    # Expect checks of its parser; textproto skips a line with an empty name.
    ("control-byte-in-value", b"GET / HTTP/1.1\r\nHost: x\r\nX-Env: a\x01b\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: invalid header value\r\n" + PLAIN + b"400 Bad Request: invalid header value"),
    ("del-in-value", b"GET / HTTP/1.0\r\nX-Env: a\x7fb\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: invalid header value\r\n" + PLAIN + b"400 Bad Request: invalid header value"),
    ("bare-cr-in-folded-value", b"GET / HTTP/1.1\r\nHost: x\r\nX-Env: a\r\n b\rc\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: invalid header value\r\n" + PLAIN + b"400 Bad Request: invalid header value"),
    ("control-byte-in-host", b"GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: malformed Host header\r\n" + PLAIN + b"400 Bad Request: malformed Host header"),
    ("no-host-before-bad-name", b"GET / HTTP/1.1\r\nBad(Name: y\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: missing required Host header\r\n" + PLAIN
     + b"400 Bad Request: missing required Host header"),
    ("malformed-host-before-bad-value", b"GET / HTTP/1.1\r\nX-Env: a\x01b\r\nHost: a b\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: malformed Host header\r\n" + PLAIN + b"400 Bad Request: malformed Host header"),
    ("bad-content-length-before-bad-value",
     b"POST / HTTP/1.1\r\nHost: x\r\nX-Env: a\x01b\r\nContent-Length: x\r\n\r\n",
     b"HTTP/1.1 400 Bad Request\r\n" + PLAIN + b"400 Bad Request"),
    ("unknown-coding-before-bad-value",
     b"POST / HTTP/1.1\r\nHost: x\r\nX-Env: a\x01b\r\nTransfer-Encoding: gzip\r\n\r\n",
     b"HTTP/1.1 501 Not Implemented\r\n" + PLAIN + b"Unsupported transfer encoding"),
    ("bad-value-before-expect",
     b"POST / HTTP/1.1\r\nHost: x\r\nX-Env: a\x01b\r\nExpect: foo\r\nContent-Length: 0\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: invalid header value\r\n" + PLAIN + b"400 Bad Request: invalid header value"),
    ("no-host-before-expect", b"POST / HTTP/1.1\r\nExpect: foo\r\nContent-Length: 0\r\n\r\n",
     b"HTTP/1.1 400 Bad Request: missing required Host header\r\n" + PLAIN
     + b"400 Bad Request: missing required Host header"),
    ("line-without-colon-before-bad-name", b"GET / HTTP/1.1\r\nHost: x\r\nBad(Name: y\r\nNoColon\r\n\r\n",
     b"HTTP/1.1 400 Bad Request\r\n" + PLAIN + b"400 Bad Request"),
    ("folded-first-header-line", b"GET / HTTP/1.1\r\n X-A: a\r\nHost: x\r\n\r\n",
     b"HTTP/1.1 400 Bad Request\r\n" + PLAIN + b"400 Bad Request"),
    ("empty-header-name-skipped", b"GET / HTTP/1.1\r\nHost: x\r\n: a\x01b\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nDate: DATE\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Content-Length: 2\r\n\r\nOK"),
    # No 100 Continue when the handler reads no body, or an empty one (integration_cases.py has the case
    # that gets one); no length on an empty HEAD answer; a redirect keeps the raw query.
    ("continue-not-sent-for-unknown-hook",
     b"POST /hooks/nope HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 404 Not Found\r\nDate: DATE\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Content-Length: 15\r\n\r\nHook not found."),
    ("continue-not-sent-for-empty-body",
     b"POST /hooks/hello HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nDate: DATE\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Content-Length: 8\r\n\r\nhi there"),
    ("expect-unknown-on-head", b"HEAD / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n",
     b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: DATE\r\n\r\n"),
    ("head-without-body-has-no-length", b"HEAD //hooks/hello?\xe9=[x] HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 301 Moved Permanently\r\nDate: DATE\r\nConnection: close\r\nLocation: /hooks/hello?\xe9=[x]\r\n\r\n"),
    ("header-over-1mb", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 1_100_000 + b"\r\n\r\n",
     b"HTTP/1.1 431 Request Header Fields Too Large\r\n" + PLAIN + b"431 Request Header Fields Too Large"),
    ("transfer-encoding-gzip", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
     b"HTTP/1.1 501 Not Implemented\r\n" + PLAIN + b"Unsupported transfer encoding"),
    ("expect-unknown", b"POST / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 0\r\n\r\n",
     b"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: DATE\r\nContent-Length: 0\r\n\r\n"),
    ("http-1.0-closes-silently", b"GET / HTTP/1.0\r\n\r\n",
     b"HTTP/1.0 200 OK\r\nDate: DATE\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nOK"),
    ("http-1.0-keep-alive", b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
     b"HTTP/1.0 200 OK\r\nDate: DATE\r\nConnection: keep-alive\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Content-Length: 2\r\n\r\nOK"),
    ("http-1.1-keep-alive-implicit", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nDate: DATE\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nOK"),
    ("folded-header-accepted", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nConnection: close\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nDate: DATE\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
     b"Content-Length: 2\r\n\r\nOK"),
]
DATE = re.compile(rb"Date: [^\r]+\r\n")


def raw_exchange(port: int, request: bytes) -> bytes:
    """Send raw bytes; read until the server closes, or 1 s of silence on a kept-alive connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.settimeout(1.0)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return DATE.sub(b"Date: DATE\r\n", answer)


def _header_block_sorted(answer: bytes) -> bytes:
    # Go writes its headers sorted, gunicorn in its own order; the order carries no meaning.
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *headers = head.split(b"\r\n")
    return b"\r\n".join([status, *sorted(headers)]) + b"\r\n\r\n" + body


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("protocol"), [ECHO_HOOK])
    server.ready()
    yield server
    server.stop()


@pytest.mark.parametrize(("name", "request_bytes", "expected"), PROTOCOL_CASES, ids=[c[0] for c in PROTOCOL_CASES])
def test_protocol_answers_are_net_https(plain_server: Server, name: str, request_bytes: bytes,
                                        expected: bytes) -> None:
    assert _header_block_sorted(raw_exchange(plain_server.port, request_bytes)) == _header_block_sorted(expected)


@pytest.mark.reference
@pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")
def test_protocol_answers_match_the_reference(tmp_path: Path) -> None:
    (tmp_path / "hooks.json").write_text(json.dumps([ECHO_HOOK]))
    port = free_port()
    reference = subprocess.Popen(["webhook", "-hooks", "hooks.json", "-ip", "127.0.0.1", "-port", str(port)],
                                 cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: _answers(port), timeout=10)
        for name, request_bytes, expected in PROTOCOL_CASES:
            answer = _header_block_sorted(raw_exchange(port, request_bytes))
            assert answer == _header_block_sorted(expected), name
    finally:
        reference.terminate()
        reference.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
