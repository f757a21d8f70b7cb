"""A throwaway PostgreSQL for tests: Debian's `postgresql` binaries (/usr/lib/postgresql/*/bin), a cluster made
by initdb in a temporary folder, listening only on 127.0.0.1 on a free port and on a Unix socket in that folder,
stopped and removed at the end. As root (CI), every PostgreSQL command runs as the `postgres` user, since
PostgreSQL refuses to run as root. It imports nothing of pytest: scripts/bench-state starts one too (with fsync
on, through `settings`).

Tests that need it must fail, not skip, where it should be: they skip only when this is not root and no
binaries are installed (a developer's machine without the package); .ci/run installs the package and sets
HOOKRUNNER_REQUIRE_POSTGRES, which turns a missing cluster into a failure."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: The role the tests connect as, with a password (scram-sha-256 over TCP), so that redaction can be tested.
USER = "hookrunner"
PASSWORD = "s3cret-pg-test-password"


def bindir() -> Path | None:
    """The newest installed PostgreSQL's bin folder, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def unavailable_reason() -> str | None:
    """Why no cluster can be made here (a reason to skip), or None when one can (or must)."""
    if os.environ.get("HOOKRUNNER_REQUIRE_POSTGRES") or os.geteuid() == 0:
        return None  # CI runs as root: a missing PostgreSQL is a failure there, not a skip
    if bindir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql); .ci/run installs it"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """One initdb'd cluster in `root`: start, stop, a crash (`-m immediate`) and a start again. `settings`
    are written to postgresql.conf over the tests' own (a benchmark turns fsync back on)."""

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        found = bindir()
        if found is None:
            raise RuntimeError(
                "PostgreSQL binaries are missing: /usr/lib/postgresql/*/bin (apt-get install postgresql)"
            )
        self.bin = found
        self.as_root = os.geteuid() == 0
        # As root, in /tmp whatever TMPDIR says: the postgres user must reach the folder's path.
        self.root = Path(tempfile.mkdtemp(prefix="hookrunner-pg-", dir="/tmp" if self.as_root else None))
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.port = _free_port()
        self._databases = 0
        if self.as_root:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        os.chmod(self.root, 0o700)
        pwfile = self.root / "pwfile"
        pwfile.write_text("unused-superuser-password\n")
        if self.as_root:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--pwfile", str(pwfile),
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        pwfile.unlink()
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",  # a test cluster: a crash of the server (not the OS) loses nothing anyway
            "shared_buffers": "16MB",
            "max_connections": "60",
            "logging_collector": "off",
            **(settings or {}),
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self.start()
        self.psql("postgres", f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")

    # --- commands, as the postgres user when root ---

    def _argv(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bin / tool), *args]
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self._argv(tool, *args), capture_output=True, text=True, timeout=120, cwd="/", check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}{self.log_tail()}"
            )
        return done

    def log_tail(self) -> str:
        try:
            return "\n--- server log ---\n" + self.logfile.read_text()[-4000:]
        except OSError:
            return ""

    def psql(self, database: str, sql: str) -> str:
        """Run `sql` over the Unix socket as the superuser; its output, unaligned."""
        done = self._run(
            "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.root), "-p", str(self.port),
            "-U", "postgres", "-d", database, "-c", sql,
        )  # fmt: skip
        return done.stdout.strip()

    # --- the server ---

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.logfile))

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    @contextmanager
    def crashed(self) -> Iterator[None]:
        """The server stopped with `-m immediate` (as a crash would, no checkpoint, every connection cut) for
        the block, then started again (it recovers from its WAL)."""
        self.stop("immediate")
        try:
            yield
        finally:
            self.start()

    def running(self) -> bool:
        return self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False).returncode == 0

    def destroy(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- databases ---

    def create_database(self) -> str:
        """A new, empty database owned by the test role; returns its conninfo (TCP, with the password)."""
        self._databases += 1
        name = f"test_{self._databases}"
        self.psql("postgres", f"CREATE DATABASE {name} OWNER {USER}")
        return self.conninfo(name)

    def conninfo(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={database} user={USER} password={PASSWORD} connect_timeout=5"

    def unix_conninfo(self, database: str) -> str:
        """The test role's conninfo over the cluster's Unix socket (trusted there: no password)."""
        return f"host={self.root} port={self.port} dbname={database} user={USER} connect_timeout=5"

    def url(self, database: str) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"
