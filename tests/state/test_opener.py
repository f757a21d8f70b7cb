"""Which run state a start uses (hookrunner/state/opener.py's open_state): the embedded one without a URL,
PostgresState for a postgresql:// URL, and a one-line error for anything else; psycopg is loaded only on
the PostgreSQL path, never by `import hookrunner` or the embedded one (a fresh interpreter's modules)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import PASSWORD, Cluster

from hookrunner.config import Config
from hookrunner.hooks.model import Limits
from hookrunner.state.embedded import EmbeddedState
from hookrunner.state.model import Outcome, RunSpec
from hookrunner.state.opener import StateURLError, open_state, resolve_state_url
from hookrunner.state.slots import STARTED

SPEC = RunSpec("h", "req-1", "/bin/true", ("/bin/true",), (), (), "/")

#: Run in a fresh interpreter: builds the embedded state (with a journal) and prints which of the named
#: modules are loaded, so that what the test process itself imported does not count.
EMBEDDED_PATH = """
import sys
import hookrunner, hookrunner.cli, hookrunner.state.backend
from hookrunner.config import Config
from hookrunner.hooks.model import Limits
from hookrunner.state.model import Outcome, RunSpec
from hookrunner.state.opener import open_state
state = open_state(Config(state_dir=sys.argv[1]), "boot-1")
state.admit(RunSpec("h", "r", "/bin/true", ("/bin/true",), (), (), "/"), Limits(), None, 0.0)
state.close()
print(type(state).__name__, sorted(m for m in sys.modules if m.split(".")[0] == "psycopg"
      or m in ("hookrunner.state.postgres", "hookrunner.state.pgconn", "hookrunner.state.pgwake")))
"""


def test_the_embedded_path_never_loads_psycopg(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED_PATH, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split(maxsplit=1) == ["EmbeddedState", "[]\n"]
    assert (tmp_path / "state" / "journal.sqlite3").exists()  # the path did run


def test_without_a_url_the_embedded_state_with_the_configs_cap() -> None:
    state = open_state(Config(max_concurrent_commands=1), "boot-1")
    assert isinstance(state, EmbeddedState) and state.replica == "boot-1"
    assert state.admit(SPEC, Limits(), None, time.time()).claim is not None
    assert state.admit(SPEC, Limits(), None, time.time()).claim is None  # the cap of 1
    state.close()


def test_a_postgresql_url_builds_the_postgres_state(pg_cluster: Cluster, pg_database: str) -> None:
    from hookrunner.state.postgres import PostgresState

    url = pg_cluster.url(pg_database.split("dbname=")[1].split()[0])
    state = open_state(Config(max_concurrent_commands=1, state_dir="/nonexistent"), "replica-a", url=url)
    try:
        assert isinstance(state, PostgresState) and state.replica == "replica-a"
        first = state.admit(SPEC, Limits(), None, time.time())
        assert first.how == STARTED and first.claim is not None
        assert state.admit(SPEC, Limits(), None, time.time()).claim is None  # the cap of 1, in the database
        assert state.finish(first.claim, Outcome("exit status 0"))
    finally:
        state.close()
    again = open_state(Config(), "replica-b", url=url.replace("postgresql://", "postgres://"))
    try:
        assert isinstance(again, PostgresState) and again.counts().running == 1  # the same database
    finally:
        again.close()


@pytest.mark.parametrize("url", ["mysql://u:secret@db/x", "secret", "sqlite:///tmp/x"])
def test_any_other_url_is_refused_in_one_line_without_its_password(url: str) -> None:
    with pytest.raises(StateURLError) as refused:
        open_state(Config(), "boot-1", url=url)
    text = str(refused.value)
    assert "secret" not in text and PASSWORD not in text and "\n" not in text
    assert "postgresql://" in text


def test_without_the_postgres_extra_a_postgresql_url_says_what_to_install(tmp_path: Path) -> None:
    # A fresh interpreter in which psycopg cannot be imported (as in a plain install, without the extra).
    script = """
import sys
sys.modules["psycopg"] = None  # an import of it raises ImportError
from hookrunner.config import Config
from hookrunner.state.opener import StateURLError, open_state, resolve_state_url
try:
    open_state(Config(), "r", url="postgresql://u:secret@127.0.0.1:1/x")
except StateURLError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'hookrunner[postgres]'" in done.stdout
    assert "secret" not in done.stdout


def _config(**fields: Any) -> Config:
    return Config(**fields)


def test_resolve_state_url_reads_the_file_and_strips_it(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("  postgresql://hookrunner:s3cret@db/hooks\n")
    assert resolve_state_url(_config(state_url_file=str(secret))) == "postgresql://hookrunner:s3cret@db/hooks"
    assert resolve_state_url(_config(state_url="postgres://db/x")) == "postgres://db/x"
    assert resolve_state_url(_config()) == ""


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"state_url": "postgresql://u:s3cret@db/x", "state_url_file": "/x"}, "cannot be used together"),
        ({"state_url": "mysql://u:s3cret@db/x"}, "'mysql' is not postgresql://"),
        ({"state_url": "u:s3cret@db"}, "is not postgresql://"),
        ({"state_url": "postgresql://u:s3cret@db/x", "state_dir": "/var/lib/x"}, "-state-dir and -state-url"),
        ({"state_url_file": "/nonexistent/url"}, "cannot read /nonexistent/url: No such file or directory"),
    ],
)
def test_resolve_state_url_refuses_in_one_line_without_the_password(
    fields: dict[str, Any], says: str
) -> None:
    with pytest.raises(StateURLError) as caught:
        resolve_state_url(_config(**fields))
    text = str(caught.value)
    assert says in text
    assert "s3cret" not in text and "\n" not in text


def test_resolve_state_url_refuses_an_empty_file(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("\n")
    with pytest.raises(StateURLError, match="is empty"):
        resolve_state_url(_config(state_url_file=str(secret)))
