"""Hot reload for the whole host, in the run owner (issue 32 step 9, docs/run-state.md): the one hooks
watcher (-hotreload) and the reload signals (the master forwards SIGHUP and SIGUSR1 here alone). Each file
is read and checked once, here; a reload that changes the hooks is sent to every worker as the next
generation, the shared counter is bumped once each worker serves it (or after READY_WAIT: a worker that has
not catches up before its next request), and only then are webhook's lines for the reload logged, once. So
once a reload is logged, no worker serves the hooks it replaced."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
import gevent.event

from hookrunner.hooks.generation import SharedGeneration, pack
from hookrunner.hooks.load import HookRegistry
from hookrunner.ops.log import log
from hookrunner.run.owner import Owner
from hookrunner.run.wire import EVENT

if TYPE_CHECKING:
    # Loaded only with -hotreload (docs/performance.md, memory at rest).
    from hookrunner.ops.watcher import HooksWatcher

#: How long a reload waits for every worker to serve its generation before it is logged anyway.
READY_WAIT = 1.0

#: One reload: it writes its lines to the list it is given.
Job = Callable[[list[str]], object]


class HostReloads:
    """The run owner's reloads, one at a time, in the order they were asked for, on a greenlet of the
    owner's loop; a file's read and parse run on the loop's thread pool, so runs go on meanwhile."""

    def __init__(self, registry: HookRegistry, owner: Owner, shared: SharedGeneration) -> None:
        self._registry = registry
        if registry.texts is None:
            registry.texts = {}
        self._owner = owner
        self._shared = shared
        self.ready_wait = READY_WAIT
        self._jobs: deque[Job] = deque()
        self._work = gevent.event.Event()
        # Asked from the watcher's threads too: an async watcher wakes the loop from any thread.
        self._wake = gevent.get_hub().loop.async_()
        self._wake.start(self._work.set)
        self._watcher: HooksWatcher | None = None

    def start(self, hotreload: bool) -> None:
        """Serve the reloads asked for from now on; with `hotreload`, watch the hooks files."""
        gevent.spawn(self._serve)
        if hotreload:
            from hookrunner.ops.watcher import HooksWatcher

            self._watcher = HooksWatcher(self._registry.files, self.changed, self.removed)
            # What the master (or an earlier reload here) read: a change since is reloaded at once.
            self._watcher.start(self._registry.read_digests)

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    # --- what can be asked, from any thread ---------------------------------------------------------

    def changed(self, path: str, data: bytes | None) -> None:
        """The watcher saw `path` change: reload it from `data`, the bytes it saw complete."""

        def job(lines: list[str]) -> object:
            lines.append(f"hooks file {path} modified")
            return self._registry.reload_file(path, data)

        self._ask(job)

    def removed(self, path: str) -> None:
        def job(lines: list[str]) -> object:
            lines.append(f"hooks file {path} removed, removing hooks that were loaded from it")
            return self._registry.remove_file(path)

        self._ask(job)

    def reload_all(self) -> None:
        """A reload signal: every file read again."""
        self._ask(lambda lines: self._registry.reload_all())

    def _ask(self, job: Job) -> None:
        self._jobs.append(job)
        self._wake.send()

    # --- on the loop ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            self._work.wait()
            self._work.clear()
            while self._jobs:
                self.run(self._jobs.popleft())

    def run(self, job: Job) -> None:
        """Do one reload now: its lines held until every worker serves what it published."""
        registry = self._registry
        lines: list[str] = []
        registry.say = lines.append
        swaps = registry.publishes
        try:
            gevent.get_hub().threadpool.apply(job, (lines,))
        except Exception as exc:  # noqa: BLE001 - one reload's fault, never the owner's end
            lines.append(f"run owner: a reload failed: {exc!r}")
        finally:
            registry.say = log.output
        if registry.publishes != swaps:
            self._publish()
        for line in lines:
            log.output(line)

    def _publish(self) -> None:
        """The registry's hooks as the next generation: sent to every worker, waited for, then counted."""
        registry = self._registry
        generation = max(self._shared.value, registry.generation) + 1
        registry.generation = generation
        fields, data = pack(registry.files_now())
        late = self._owner.publish_hooks(generation, dict(fields), data, self.ready_wait)
        self._shared.set(generation)
        if late:
            workers = ", ".join(map(str, late))
            log.output(
                f"run owner: worker(s) {workers} not serving hooks generation {generation} after "
                f"{self.ready_wait:g}s; each takes it before its next request",
                level="warn",
                event=EVENT,
            )
