"""Which run state a start of hookrunner uses (open_state): the embedded one, with the journal when
-state-dir is set, or, for a `postgresql://` URL, PostgreSQL's, whose module (and psycopg, the `postgres`
extra) is imported only then, so that `import hookrunner` and the embedded path never load psycopg. A module
of its own, above both backends: state/backend.py is what every backend imports, so a choice there would be
an import circle, and state/embedded.py should not know PostgreSQL."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from hookrunner.config import Config
from hookrunner.errors import HookrunnerError
from hookrunner.hooks.model import Limits
from hookrunner.ops.log import log
from hookrunner.state.backend import RunState
from hookrunner.state.embedded import EmbeddedState
from hookrunner.state.journal import Journal
from hookrunner.state.model import Event

#: The URL schemes of PostgreSQL, as libpq reads them.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StateURLError(HookrunnerError):
    """The run state's URL cannot be used as given (an unknown scheme, the `postgres` extra missing): a
    start-up error, told in one line that never holds the URL's password."""


def resolve_state_url(config: Config) -> str:
    """The run state's URL: -state-url, or the contents of -state-url-file (surrounding white space dropped),
    or "" for the embedded state. Read once at start, before -setuid (a Secret's file may be root's only).
    Raises StateURLError, in one line that never holds the URL, when both flags are given, the file cannot
    be read or is empty, the URL's scheme is not PostgreSQL's, or -state-dir is given too (the journal of
    a shared run state is the database)."""
    if config.state_url and config.state_url_file:
        raise StateURLError("-state-url and -state-url-file cannot be used together")
    url = config.state_url
    if config.state_url_file:
        try:
            with open(config.state_url_file, encoding="utf-8") as handle:
                url = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise StateURLError(f"-state-url-file: cannot read {config.state_url_file}: {why}") from None
        if not url:
            raise StateURLError(f"-state-url-file: {config.state_url_file} is empty")
    if not url:
        return ""
    if not url.startswith(POSTGRES_SCHEMES):
        scheme = url.partition(":")[0] if ":" in url else "(none)"
        raise StateURLError(f"the run state URL's scheme {scheme!r} is not postgresql://")
    if config.state_dir:
        raise StateURLError("-state-dir and -state-url cannot be used together: the database is the journal")
    return url


def replica_name(config: Config) -> str:
    """This replica's name with a shared run state: -state-replica, or the host's name (a pod's name)."""
    return config.state_replica or socket.gethostname()


def check_state(config: Config) -> bool:
    """Whether the shared run state at config.state_url can be used now (reached, and taking writes): one
    attempt, its failure told in one line that never holds the password (the backend's own line, or one
    naming only the kind of error). Run in a child process of its own at start (psycopg must not be loaded
    in the master: the run owner applies gevent's patching before it loads it)."""
    try:
        state = open_state(config, replica_name(config), url=config.state_url)
    except StateURLError as err:
        log.output(f"error setting up the run state: {err}")
        return False
    try:
        if not state.ready():
            return False
    except Exception as exc:  # noqa: BLE001 - a malformed URL, say: named by kind only (it may hold the password)
        log.output(f"error setting up the run state: the database cannot be used ({type(exc).__name__})")
        return False
    finally:
        state.close()
    return True


def open_state(
    config: Config,
    boot_id: str,
    feed: Callable[[Event], None] | None = None,
    limits: Callable[[str], Limits] | None = None,
    url: str = "",
) -> RunState:
    """The run state the config asks for. Without `url`: the embedded one, with the journal in
    `config.state_dir` when set (raises state.journal.JournalError when it cannot be used); `boot_id` is who
    claims, `feed` where the history's events go, `limits` a replayed run's hook's limits now. With a
    `postgresql://` (or `postgres://`) URL: PostgresState on that database, `boot_id` then naming this
    replica, with -state-lease and -state-grace (its history events go to the database; `feed` and
    `limits` are not used: each run's row keeps its hook's limits). Raises StateURLError for any other URL,
    or when psycopg is not installed."""
    if not url:
        journal = Journal(config.state_dir, boot_id, config.state_keep) if config.state_dir else None
        hooks: dict[str, Any] = {"feed": feed, "limits": limits}
        given = {name: value for name, value in hooks.items() if value is not None}
        return EmbeddedState(journal, config.max_concurrent_commands, boot_id, **given)
    if not url.startswith(POSTGRES_SCHEMES):
        scheme = url.partition(":")[0] if ":" in url else "(none)"
        raise StateURLError(f"the run state URL's scheme {scheme!r} is not postgresql://")
    try:
        from hookrunner.state.postgres import PostgresState  # psycopg: the postgres extra, loaded only here
    except ImportError as exc:
        raise StateURLError(
            f"a postgresql:// run state needs the postgres extra (pip install 'hookrunner[postgres]'): {exc}"
        ) from None
    return PostgresState(
        url, boot_id, config.max_concurrent_commands, lease=config.state_lease, grace=config.state_grace
    )
