"""What the master hands to the processes it forks: the hooks registry, the settings, and the app it builds
before the first fork (`ctx`); what serving needs of the registry and the runner; the signals held across
the fork. Kept light (no Flask, gevent or werkzeug): importing it loads none of them."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from hookrunner.config import Config
from hookrunner.hooks.generation import SharedGeneration
from hookrunner.hooks.load import HookRegistry
from hookrunner.hooks.model import Hook

if TYPE_CHECKING:
    import ssl

    from hookrunner.run.spawn import Waits


class Registry(Protocol):
    """What serving needs of hooks.HookRegistry."""

    @property
    def files(self) -> tuple[str, ...]: ...

    def reload_all(self) -> object: ...

    def reload_file(self, path: str, data: bytes | None = None) -> object: ...

    def remove_file(self, path: str) -> object: ...

    def match(self, hook_id: str) -> Hook | None: ...

    def hooks_of(self, path: str) -> tuple[Hook, ...]: ...

    def __len__(self) -> int: ...

    loaded_at: dict[str, float]

    on_publish: Callable[[], None] | None


class Runner(Protocol):
    """What serving needs of its runner: run/ownerclient.py's OwnerClient, which hands every run to the
    run owner."""

    wait_for: Callable[[Future[Any]], Any]
    #: The hooks generation the worker serves, told to the owner; and how one the owner sends is applied.
    hooks_generation: Callable[[], int]
    on_reload: Callable[[int, dict[str, object], bytes], None] | None

    def shutdown(self, grace: float) -> object: ...

    def use(self, waits: Waits) -> None: ...

    @property
    def waits(self) -> Waits: ...

    def connect(
        self,
        generation: int = 0,
        sock: socket.socket | None = None,
        spawn: Callable[[Callable[[], None]], None] | None = None,
    ) -> None: ...


#: Threads of the threaded worker (threadworker.py): each request that captures a command's output holds
#: one while it runs. The master gives gunicorn this number.
THREADS = 64

#: The reload signals, which the master forwards to the run owner alone (serve/ownerreload.py); the owner
#: holds them from its fork until its reloads are served, so that none sent meanwhile is lost.
RELOAD_SIGNALS = {signal.SIGHUP, signal.SIGUSR1}

#: Signals the master holds back across the fork of a worker, until the worker's handlers are in place.
HELD_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1}

#: net/http's bound on a request's head, the request line and the headers together: DefaultMaxHeaderBytes
#: (1 MB) plus the 4096 bytes its buffered reader may hold on top. A longer head is answered 431
#: (protocol.py); the master gives gunicorn the same bound.
MAX_HEAD_BYTES = (1 << 20) + 4096


class _Context:
    """What the worker needs after the fork; set once by serve.serve() before gunicorn starts."""

    config: Config
    registry: HookRegistry
    runner: Runner
    ssl_context: ssl.SSLContext | None = None
    #: One start of hookrunner (made in the master): the run journal tells a dead worker's runs by it.
    boot_id: str = ""
    #: The hooks generation the run owner last published, shared by every process of the tree
    #: (hooks/generation.py); made by the master before any fork.
    hooks_generation: SharedGeneration
    #: The lock on -state-dir (journal.lock_state_dir); None: no journal for this start. Held by the master;
    #: the run owner opens the journal (serve/ownerprocess.py).
    state_lock: int | None = None
    #: The admin listener's event feed (serve/adminserver.py): its socket path and key; "" for none.
    history_feed: str = ""
    history_key: bytes = b""
    #: This worker's end of its connection to the run owner (serve/runowner.py), made by the master just
    #: before the fork; None in the master (between forks) and where no owner runs.
    owner_link: socket.socket | None = None
    #: Builds the WSGI app and the runner behind it through load_app, once, in the master before it forks
    #: the run owner and the workers: they all share its pages, which a memory cgroup charges once
    #: (docs/operations.md, "Process model"; docs/performance.md, memory at rest).
    build: Callable[[], tuple[Any, Runner]]
    wsgi_app: Any = None

    def load_app(self) -> Any:
        """The WSGI app, built on the first call (which sets `runner`)."""
        if self.wsgi_app is None:
            self.wsgi_app, self.runner = self.build()
        return self.wsgi_app


ctx = _Context()
