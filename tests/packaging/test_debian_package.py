"""The Debian package (scripts/deb), installed into a Debian 12 container that boots real systemd.

scripts/deb builds the package from the checkout, as a user would; lintian must report no error on it. A
podman container of a debootstrapped bookworm (scripts/debootstrap-base) runs /lib/systemd/systemd as its
first process, with no network: the package and its dependencies are installed with dpkg from what is
already on disk, and every request is sent from inside the container to its own loopback. There:

- the units pass `systemd-analyze verify`, and `systemd-analyze security` rates hookrunner.service's
  exposure below Debian's webhook.service;
- with /etc/webhook.conf present, `systemctl start hookrunner` serves a hook, `systemctl reload` reloads
  it, `journalctl -u hookrunner` has the verbose log;
- a run accepted before `systemctl restart` runs after it (the journal in StateDirectory=);
- with hookrunner.socket, connections made during restarts are all answered;
- `systemctl stop` ends every process of the commands, those that left their group included;
- `apt-get remove` leaves /etc/webhook.conf, and `purge` removes the state;
- without systemd, /usr/bin/hookrunner runs and serves;
- the bundled psycopg (the `postgres` extra) serves `-state-url`.

Where podman or the packaging tools are missing the tests are skipped with a loud reason;
HOOKRUNNER_REQUIRE_DEB (.ci/run sets it) turns that into a failure.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import resource
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("podman", "dpkg-buildpackage", "dh_virtualenv", "lintian", "debootstrap", "man")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
if os.environ.get("HOOKRUNNER_REQUIRE_DEB") and MISSING:
    raise RuntimeError(f"HOOKRUNNER_REQUIRE_DEB is set but these are missing: {MISSING}")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"{MISSING} MISSING: the Debian package is NOT tested (see .ci/run for the packages)",
    ),
]

#: A bookworm that boots systemd and has the package's dependencies, so dpkg needs no network.
BASE = "localhost/hookrunner-systemd:bookworm"
BASE_PACKAGES = "systemd,systemd-sysv,python3.11,libyaml-0-2,curl,ca-certificates,procps,man-db"


def _hard_limit(which: int, cap: int) -> int:
    hard = resource.getrlimit(which)[1]
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


# As scripts/image runs podman: runc and cgroupfs, and rlimits at or below what this VM allows.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
ULIMITS = [
    "--ulimit", f"nofile={_hard_limit(resource.RLIMIT_NOFILE, 1 << 20)}:{_hard_limit(resource.RLIMIT_NOFILE, 1 << 20)}",
    "--ulimit", f"nproc={_hard_limit(resource.RLIMIT_NPROC, 32768)}:{_hard_limit(resource.RLIMIT_NPROC, 32768)}",
]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"podman {args[:3]}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "deb"), str(out)], capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (package,) = out.glob("hookrunner_*.deb")
    return package


@pytest.fixture(scope="module")
def base() -> str:
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "debootstrap-base"), BASE, BASE_PACKAGES],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return BASE


@dataclass
class Machine:
    """A container whose first process is systemd, with the package installed."""

    name: str

    def sh(self, script: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, "sh", "-c", script, timeout=timeout, check=check)

    def wait(self, script: str, timeout: float = 30) -> str:
        """Runs script until it succeeds; its output."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.sh(script, check=False)
            if done.returncode == 0:
                return done.stdout
            assert time.monotonic() < deadline, f"{script!r} never succeeded: {done.stdout}{done.stderr}"
            time.sleep(0.3)

    def write(self, path: str, text: str) -> None:
        done = subprocess.run(
            [*PODMAN, "exec", "-i", self.name, "sh", "-c", f"cat > '{path}'"],
            input=text, capture_output=True, text=True, timeout=30,
        )
        assert done.returncode == 0, done.stderr


def boot(base: str, deb: Path) -> Machine:
    name = f"hookrunner-deb-{uuid.uuid4().hex[:8]}"
    # --privileged: without CAP_SYS_ADMIN systemd sets up no mount namespace and would leave the unit's
    # sandbox (ProtectSystem, PrivateTmp, ...) out, "assuming containerized execution".
    podman("run", "-d", "--name", name, "--privileged", "--systemd=always", "--network=none", *ULIMITS,
           "-v", f"{deb}:/tmp/{deb.name}:ro", base, "/lib/systemd/systemd")
    machine = Machine(name)
    state = machine.wait("state=$(systemctl is-system-running); echo $state; "
                         "[ $state = running ] || [ $state = degraded ]", timeout=60)
    assert state.strip() == "running", machine.sh("systemctl --failed --no-pager", check=False).stdout
    machine.sh(f"dpkg -i /tmp/{deb.name}", timeout=120)
    return machine


@pytest.fixture(scope="module")
def machine(base: str, deb: Path) -> Iterator[Machine]:
    booted = boot(base, deb)
    try:
        yield booted
    finally:
        podman("rm", "-f", "-t", "0", booted.name, check=False)


HOOKS = """[
  {"id": "hello", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "url", "name": "who"}]},
  {"id": "slow", "execute-command": "/usr/local/bin/slow", "max-concurrency": 1, "max-queue": 10,
   "pass-arguments-to-command": [{"source": "url", "name": "n"}]},
  {"id": "escape", "execute-command": "/usr/local/bin/escape"},
  {"id": "sandbox", "execute-command": "/usr/local/bin/sandbox", "include-command-output-in-response": true}
]
"""

# Appends its start and end to /srv/runs.log and takes 5 s.
SLOW = """#!/bin/sh
echo "start $1" >> /srv/runs.log
sleep 5
echo "end $1" >> /srv/runs.log
"""

# Leaves a grandchild in a session of its own (out of the command's process group), then waits.
ESCAPE = """#!/bin/sh
setsid sleep 301 &
exec sleep 302
"""


# Says what the unit's sandbox lets a command do.
SANDBOX = """#!/bin/sh
for path in /usr/x /etc/x /home/x /var/lib/x; do
  if touch "$path" 2>/dev/null; then echo "$path writable"; rm -f "$path"; else echo "$path refused"; fi
done
echo "private" > /tmp/sandbox-probe
ls /dev | wc -l
"""


def configure(machine: Machine, hooks: str = HOOKS, opts: str = "-verbose") -> None:
    machine.write("/etc/webhook.conf", hooks)
    for name, text in (("slow", SLOW), ("escape", ESCAPE), ("sandbox", SANDBOX)):
        machine.write(f"/usr/local/bin/{name}", text)
    machine.write("/etc/default/hookrunner", f'HOOKRUNNER_OPTS="{opts}"\n')
    machine.sh("chmod +x /usr/local/bin/slow /usr/local/bin/escape /usr/local/bin/sandbox; rm -f /srv/runs.log")


def restart_and_wait(machine: Machine) -> None:
    machine.sh("systemctl restart hookrunner.service")
    machine.wait("curl -sf -o /dev/null http://127.0.0.1:9000/hooks/hello")


def deb_members(deb: Path) -> dict[str, tarfile.TarInfo]:
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {member.name.removeprefix("."): member for member in archive.getmembers()}


def test_the_package_holds_the_command_the_units_the_man_page_and_no_opt(deb: Path) -> None:
    members = deb_members(deb)
    link = members["/usr/bin/hookrunner"]
    assert link.issym() and link.linkname == "../lib/hookrunner/bin/hookrunner"
    assert members["/usr/lib/hookrunner/bin/hookrunner"].isfile()
    for unit in ("hookrunner.service", "hookrunner.socket"):
        assert members[f"/lib/systemd/system/{unit}"].isfile()
    assert "/usr/share/man/man1/hookrunner.1.gz" in members
    assert "/etc/default/hookrunner" in members
    assert not [name for name in members if name.startswith("/opt")]
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends", "Version"], capture_output=True, text=True,
                            check=True).stdout
    assert "python3.11" in fields and "libyaml-0-2" in fields
    conffiles = subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert conffiles == ["/etc/default/hookrunner"]
    # The bundled versions are the lock's, and the build folder is named nowhere.
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        def text(name: str) -> str:
            member = archive.extractfile(name)
            assert member is not None
            return member.read().decode()

        bundled = text("./usr/share/doc/hookrunner/bundled-requirements.txt").splitlines()
        pyvenv = text("./usr/lib/hookrunner/pyvenv.cfg")
    lock = (REPO_ROOT / "packaging" / "requirements.lock").read_text().splitlines()
    assert bundled == [line for line in lock if not line.startswith("#")]
    assert "gunicorn==" in "\n".join(bundled) and "/.local/" not in pyvenv and "command" not in pyvenv
    assert not [name for name in members if name.startswith("/usr/lib/hookrunner/include")]


def test_lintian_reports_no_error(deb: Path) -> None:
    done = subprocess.run(["lintian", "--fail-on", "error", str(deb)], capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if line.startswith("E:")]
    assert done.returncode == 0 and not errors, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_man_page_renders_without_a_warning_and_has_every_flag_of_help(deb: Path, machine: Machine,
                                                                          tmp_path: Path) -> None:
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        page = archive.extractfile("./usr/share/man/man1/hookrunner.1.gz")
        assert page is not None
        (tmp_path / "hookrunner.1").write_bytes(gzip.decompress(page.read()))
    done = subprocess.run(["man", "--warnings", "-l", str(tmp_path / "hookrunner.1")], capture_output=True,
                          text=True, env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""}, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rendered = done.stdout
    # The installed command's -help, in the container: every flag it lists is on the page.
    usage = machine.sh("hookrunner -help 2>&1; true").stdout
    flags = re.findall(r"^  -([a-z0-9-]+)", usage, re.MULTILINE)
    assert len(flags) > 40
    missing = [flag for flag in flags if not re.search(rf"^\s+-{re.escape(flag)}\b", rendered, re.MULTILINE)]
    assert missing == []
    for section in ("SIGNALS", "EXIT STATUS", "FILES", "HOOK FIELDS"):
        assert f"\n{section}\n" in rendered
    # `man hookrunner` finds the installed page.
    installed = " ".join(machine.sh("MANWIDTH=80 man hookrunner | cat").stdout.split())
    assert "NAME hookrunner - run commands from HTTP hooks" in installed


def test_the_units_verify(machine: Machine) -> None:
    done = machine.sh("systemd-analyze verify /lib/systemd/system/hookrunner.service "
                      "/lib/systemd/system/hookrunner.socket 2>&1", check=False)
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout


def exposure(machine: Machine, unit: str) -> float:
    out = machine.sh(f"systemd-analyze security --offline=true --no-pager {unit} 2>&1").stdout
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
    assert found, out[-2000:]
    return float(found.group(1))


def test_hardening_exposes_less_than_debians_webhook_service(machine: Machine) -> None:
    # Debian's webhook.service as the webhook package ships it (bookworm's webhook 2.8.0-2).
    machine.write("/tmp/webhook.service", (REPO_ROOT / "tests" / "data" / "webhook.service").read_text())
    ours, theirs = exposure(machine, "/lib/systemd/system/hookrunner.service"), exposure(machine, "/tmp/webhook.service")
    assert theirs > 9.0  # "UNSAFE": no sandboxing at all
    assert ours <= 3.5, ours  # "OK"


def test_start_needs_the_webhook_conf_and_then_serves_reloads_and_logs(machine: Machine) -> None:
    machine.sh("systemctl stop hookrunner.service hookrunner.socket; rm -f /etc/webhook.conf")
    machine.sh("systemctl start hookrunner.service")
    condition = machine.sh("systemctl show -p ConditionResult --value hookrunner.service").stdout.strip()
    assert condition == "no"
    assert machine.sh("systemctl is-active hookrunner.service", check=False).stdout.strip() == "inactive"

    configure(machine)
    restart_and_wait(machine)
    assert machine.sh("curl -s 'http://127.0.0.1:9000/hooks/hello?who=world'").stdout == "world\n"
    assert machine.sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9000/hooks/later").stdout == "404"

    machine.write("/etc/webhook.conf", HOOKS.replace('"id": "hello"', '"id": "later"'))
    machine.sh("systemctl reload hookrunner.service")
    machine.wait("curl -sf 'http://127.0.0.1:9000/hooks/later?who=again'")
    assert machine.sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9000/hooks/hello").stdout == "404"

    log = machine.sh("journalctl -u hookrunner.service --no-pager -o cat").stdout
    assert "serving hooks on http://0.0.0.0:9000/hooks/{id}" in log
    assert "caught USR1 signal" in log
    assert re.search(r"\[webhook\] \S+ \S+ \[[0-9a-f]{6}\] later got matched", log), log[-3000:]


def test_the_journal_lines_are_the_terminals(machine: Machine) -> None:
    configure(machine)
    restart_and_wait(machine)
    machine.sh("curl -s 'http://127.0.0.1:9000/hooks/hello?who=journal'")
    # The same command in a terminal (no systemd), on another port.
    terminal = machine.sh(
        "hookrunner -verbose -hooks /etc/webhook.conf -port 9100 > /tmp/terminal.log 2>&1 & pid=$!; "
        "for i in $(seq 50); do curl -sf -o /dev/null 'http://127.0.0.1:9100/hooks/hello?who=journal' && break; "
        "sleep 0.2; done; kill $pid; wait $pid; cat /tmp/terminal.log"
    ).stdout
    journal = machine.sh("journalctl -u hookrunner.service --no-pager -o cat").stdout

    def messages(text: str) -> list[str]:
        # Without the date, time and request id, which differ between the two runs.
        lines = re.findall(r"^\[webhook\] \S+ \S+ (?:\[[0-9a-f]{6}\] )?(.*)$", text, re.MULTILINE)
        return [re.sub(r"[0-9.]+[µm]?s\b|127\.0\.0\.1:\d+", "X", line) for line in lines]

    terminal_lines = messages(terminal)
    for line in ("hello got matched", "executing /bin/echo (/bin/echo) with arguments "
                 '["/bin/echo" "journal"] and environment [] using  as cwd', "command output: journal"):
        assert line in terminal_lines
        assert line in messages(journal)


def test_the_units_sandbox_holds_for_commands(machine: Machine) -> None:
    configure(machine)
    restart_and_wait(machine)
    machine.sh("rm -f /tmp/sandbox-probe")
    seen = machine.sh("curl -s http://127.0.0.1:9000/hooks/sandbox").stdout.splitlines()
    # ProtectSystem=full, ProtectHome=read-only; /var stays writable for what hooks deploy.
    assert seen[:4] == ["/usr/x refused", "/etc/x refused", "/home/x refused", "/var/lib/x writable"], seen
    assert int(seen[4]) < 30  # PrivateDevices: a handful of pseudo-devices
    # PrivateTmp: the command's /tmp is not the host's.
    assert machine.sh("test -e /tmp/sandbox-probe || echo private").stdout == "private\n"


def test_a_run_accepted_before_a_restart_runs_after_it(machine: Machine) -> None:
    # Three 5 s runs, one at a time; the stop's grace (1 s) ends the first and leaves two queued. The pushes
    # and the restart are one script, so that no delay of podman's between them lets the first one end.
    configure(machine, opts="-verbose -shutdown-timeout 1s")
    restart_and_wait(machine)
    out = machine.sh(
        "for n in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' \"http://127.0.0.1:9000/hooks/slow?n=$n\"; done; "
        "systemctl restart hookrunner.service; echo; cat /srv/runs.log"
    ).stdout
    assert out.startswith("200 200 200 \n") and "end" not in out, out  # none ran to its end before the restart
    machine.wait("grep -q 'end 3' /srv/runs.log", timeout=60)
    time.sleep(5.5)  # a second copy of any run would have ended by now
    runs = machine.sh("cat /srv/runs.log").stdout.splitlines()
    assert [line for line in runs if line.startswith("end")] == ["end 1", "end 2", "end 3"], runs
    log = machine.sh("journalctl -u hookrunner.service --no-pager -o cat").stdout
    assert len(re.findall(r"replaying run \d+ of hook slow", log)) == 3, log[-3000:]


LOAD = """
import socket, sys, threading, time
counts = {"ok": 0, "refused": 0, "other": 0}
lock = threading.Lock()
stop = time.monotonic() + float(sys.argv[1])
def client():
    while time.monotonic() < stop:
        try:
            with socket.create_connection(("127.0.0.1", 9000), timeout=30) as s:
                s.sendall(b"GET /hooks/hello?who=x HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            kind = "ok" if data.startswith(b"HTTP/1.1 200") else "other"
        except ConnectionRefusedError:
            kind = "refused"
        except OSError:
            kind = "other"
        with lock:
            counts[kind] += 1
threads = [threading.Thread(target=client) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(counts["ok"], counts["refused"], counts["other"])
"""


def load(machine: Machine, seconds: float, restarts: int) -> tuple[int, int, int]:
    machine.write("/tmp/load.py", LOAD)
    out = machine.sh(
        f"python3.11 /tmp/load.py {seconds} > /tmp/load.out & pid=$!; sleep 1.5; "
        f"for i in $(seq {restarts}); do systemctl restart hookrunner.service; sleep 1.5; done; "
        "wait $pid; cat /tmp/load.out",
        timeout=seconds + 60,
    ).stdout
    ok, refused, other = (int(word) for word in out.split())
    return ok, refused, other


def test_with_the_socket_unit_a_restart_under_load_refuses_no_connection(machine: Machine) -> None:
    configure(machine)
    machine.sh("systemctl stop hookrunner.service; systemctl enable --now hookrunner.socket")
    try:
        restart_and_wait(machine)
        serving = machine.sh("journalctl -u hookrunner.service --no-pager -o cat | grep 'serving hooks on' | tail -n 1")
        assert "http://[::]:9000/" in serving.stdout  # systemd's socket (both families), not -ip's 0.0.0.0
        ok, refused, other = load(machine, seconds=9, restarts=3)
        assert refused == 0 and other == 0 and ok > 50, (ok, refused, other)
    finally:
        machine.sh("systemctl disable --now hookrunner.socket; systemctl restart hookrunner.service")
    # The control: without the socket unit the same restarts refuse connections.
    machine.wait("curl -sf -o /dev/null http://127.0.0.1:9000/hooks/hello")
    _, refused, _ = load(machine, seconds=6, restarts=2)
    assert refused > 0


def test_stop_ends_every_process_of_the_commands(machine: Machine) -> None:
    # With KillMode=process systemd kills nothing but the main process: what is gone after the stop,
    # hookrunner ended itself (the unit's KillMode=mixed would SIGKILL leftovers on top).
    machine.sh("mkdir -p /etc/systemd/system/hookrunner.service.d && printf '[Service]\\nKillMode=process\\n' "
               "> /etc/systemd/system/hookrunner.service.d/test.conf && systemctl daemon-reload")
    try:
        configure(machine, opts="-verbose -shutdown-timeout 1s")
        restart_and_wait(machine)
        machine.sh("curl -s http://127.0.0.1:9000/hooks/escape")
        # (The brackets keep the pattern from matching this shell's own command line.)
        machine.wait("pgrep -f 'sleep 30[1]' && pgrep -f 'sleep 30[2]'")
        began = time.monotonic()
        machine.sh("systemctl stop hookrunner.service")
        assert time.monotonic() - began < 20
        assert machine.sh("pgrep -f 'sleep 30[12]'", check=False).stdout == ""
        assert machine.sh("systemctl show -p Result --value hookrunner.service").stdout.strip() == "success"
        log = machine.sh("journalctl -u hookrunner.service --no-pager -o cat").stdout
        assert "shutdown: killing the process group of command" in log, log[-2000:]
    finally:
        machine.sh("rm -rf /etc/systemd/system/hookrunner.service.d && systemctl daemon-reload")


def test_remove_keeps_the_config_and_purge_removes_the_state(base: str, deb: Path) -> None:
    machine = boot(base, deb)
    try:
        configure(machine)
        restart_and_wait(machine)
        assert machine.sh("test -f /var/lib/hookrunner/journal.sqlite3 && echo yes").stdout == "yes\n"
        machine.sh("hookrunner -help >/dev/null 2>&1; true")  # as root, outside the sandbox: may write bytecode
        # An upgrade (the same package again) leaves the opt-in socket listening, the service behind it.
        machine.sh("systemctl stop hookrunner.service; systemctl enable --now hookrunner.socket; "
                   "systemctl start hookrunner.service")
        machine.sh(f"dpkg -i /tmp/{deb.name}", timeout=120)
        assert machine.sh("systemctl is-active hookrunner.socket").stdout.strip() == "active"
        machine.wait("curl -sf -o /dev/null http://127.0.0.1:9000/hooks/hello")
        machine.sh("apt-get remove -y hookrunner", timeout=120)
        assert machine.sh("test -e /usr/bin/hookrunner || echo gone").stdout == "gone\n"
        assert machine.sh("systemctl is-active hookrunner.socket", check=False).stdout.strip() != "active"
        assert machine.sh("curl -s -o /dev/null http://127.0.0.1:9000/ || echo closed").stdout == "closed\n"
        assert json.loads(machine.sh("cat /etc/webhook.conf").stdout)[0]["id"] == "hello"
        assert machine.sh("test -d /var/lib/hookrunner && echo kept").stdout == "kept\n"
        machine.sh("apt-get purge -y hookrunner", timeout=120)
        assert machine.sh("test -e /var/lib/hookrunner || echo purged").stdout == "purged\n"
        assert machine.sh("test -e /usr/lib/hookrunner || echo purged").stdout == "purged\n"
        assert machine.sh("test -e /etc/default/hookrunner || echo purged").stdout == "purged\n"
        assert machine.sh("test -f /etc/webhook.conf && echo kept").stdout == "kept\n"
    finally:
        podman("rm", "-f", "-t", "0", machine.name, check=False)


def test_without_systemd_the_command_runs_and_serves(base: str, deb: Path) -> None:
    script = (
        "test ! -d /run/systemd/system && "  # no systemd in this container
        f"dpkg -i /tmp/{deb.name} >/dev/null && "
        "echo '[{\"id\": \"hello\", \"execute-command\": \"/bin/echo\", "
        "\"include-command-output-in-response\": true}]' > /tmp/hooks.json && "
        "(hookrunner -hooks /tmp/hooks.json -ip 127.0.0.1 &) && "
        "for i in $(seq 100); do curl -sf http://127.0.0.1:9000/hooks/hello && exit 0; sleep 0.2; done; exit 1"
    )
    done = podman("run", "--rm", "--network=none", *ULIMITS, "-v", f"{deb}:/tmp/{deb.name}:ro", base,
                  "sh", "-c", script, timeout=180, check=False)
    assert done.returncode == 0 and done.stdout == "\n", done.stdout[-2000:] + done.stderr[-2000:]


def test_the_bundled_shared_libraries_are_the_packages_own(deb: Path) -> None:
    """psycopg-binary's libpq, libssl and the rest are private to the environment: no shlibs file offers them
    to other packages, and no ldconfig trigger is activated for them."""
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    members = set(re.findall(r"^ +\d+ bytes, +\d+ lines +\*? *(\S+)", info, re.M))
    assert {"control", "postinst"} <= members and not {"shlibs", "triggers"} & members, info


def test_the_packages_hookrunner_can_use_a_postgresql_run_state(base: str, deb: Path) -> None:
    """The `postgres` extra is bundled (packaging/requirements.lock): -state-url reaches psycopg, whose binary
    build (libpq in its wheel; Debian's libpq5 is not a dependency) is the one loaded, and a database that
    is not there is the error, not a missing extra."""
    script = (
        f"dpkg -i /tmp/{deb.name} >/dev/null && echo '[]' > /tmp/hooks.json && "
        "/usr/lib/hookrunner/bin/python -c 'import psycopg; print(psycopg.pq.__impl__)' && "
        "timeout 60 hookrunner -hooks /tmp/hooks.json -ip 127.0.0.1 "
        "-state-url postgresql://hookrunner@127.0.0.1:1/none 2>&1; echo exit $?"
    )
    mount = f"{deb}:/tmp/{deb.name}:ro"
    done = podman(
        "run", "--rm", "--network=none", *ULIMITS, "-v", mount, base, "sh", "-c", script, timeout=180
    )
    out = done.stdout
    assert out.startswith("binary\n") and "PostgreSQL is unavailable: connection failed" in out, (
        out + done.stderr
    )
    assert "needs the postgres extra" not in out and out.endswith("exit 1\n"), out
