"""werkzeug's development server, kept out of the tree that never runs it (docs/performance.md, memory at
rest). werkzeug imports `werkzeug.serving` (with `http.server`) as it is imported, for
`run_simple`, and Flask for `is_running_from_reloader`; hookrunner serves through gunicorn, so they are
only names. `install`, called by the master before it builds the app (cli.load_server_code), hands the
first import of `werkzeug.serving` a stand-in module that holds those two names as functions which load
the real module when called, and loads it as soon as anything reads any other of its names (the admin
listener's connections subclass its request handler, serve/adminconns.py). Loading it later needs the
interpreter's files, which a process that has dropped privileges may no longer read: with
-setuid/-setgid the master imports the real module before the drop and `install` is not called."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

NAME = "werkzeug.serving"

#: The threaded worker's threads may read the stand-in's first other name at once: one loads the real
#: module, the others then find it loaded.
_loading = threading.RLock()


def real() -> ModuleType:
    """The real `werkzeug.serving`, imported on the first call. The stand-in, which some module may
    still hold, is given the real module's names too."""
    with _loading:
        module = sys.modules.get(NAME)
        if not isinstance(module, _StandIn):
            return module if module is not None else importlib.import_module(NAME)
        del sys.modules[NAME]  # the finder has stepped aside: this import finds the real file
        loaded = importlib.import_module(NAME)  # and sets it on the werkzeug package
        module.__dict__.update(loaded.__dict__)
        return loaded


class _StandIn(ModuleType):
    """`werkzeug.serving` until one of its names other than the two below is read."""

    def __getattr__(self, name: str) -> Any:  # only for names not in the module
        if name.startswith("__"):
            # the import system asks for __file__, __path__ and the like while it sets the module up
            raise AttributeError(name)
        return getattr(real(), name)


def run_simple(*args: Any, **kwargs: Any) -> Any:
    """werkzeug's development server, which hookrunner never starts (Flask's `run`)."""
    return real().run_simple(*args, **kwargs)


def is_running_from_reloader() -> bool:
    """Whether werkzeug's reloader started this process (Flask's `run` and its command line ask)."""
    return bool(real().is_running_from_reloader())


class _Loader:
    """Makes the stand-in (a loader as the import system calls one; importlib.abc is not imported for it,
    as its import of importlib.resources would cost more than this module saves)."""

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return _StandIn(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__.update(run_simple=run_simple, is_running_from_reloader=is_running_from_reloader)


class _Finder:
    """Answers the first import of `werkzeug.serving` with the stand-in, then leaves sys.meta_path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != NAME:
            return None
        uninstall()
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if found is None:
            return None  # not installed where werkzeug is: the import fails as it would have
        return ModuleSpec(fullname, cast("Loader", _Loader()), origin=found.origin)


def install() -> None:
    """Before werkzeug is first imported in this process: its `serving` module comes as the stand-in."""
    if "werkzeug" in sys.modules or any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())


def uninstall() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _Finder)]
