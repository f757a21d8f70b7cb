"""Reference cycles that hookrunner's own code leaves, told apart from garbage that other threads of the test
process make meanwhile (earlier tests' servers, pollers and stores stay alive there; a bare count of
gc.collect() once failed CI with 52 objects that were none of the code's under test)."""

from __future__ import annotations

import gc
import types
from collections.abc import Callable


def _hookrunners(thing: object) -> bool:
    if isinstance(thing, types.FrameType):
        return "/hookrunner/" in thing.f_code.co_filename
    if isinstance(thing, types.TracebackType):
        return "/hookrunner/" in thing.tb_frame.f_code.co_filename
    return type(thing).__module__.startswith("hookrunner.")


def hookrunner_garbage(work: Callable[[], object]) -> list[object]:
    """Runs work with the cyclic collector off, then collects: the unreachable objects found that are
    hookrunner's (an instance of one of its classes, or a frame or traceback of its code)."""
    gc.collect()
    gc.disable()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return [thing for thing in gc.garbage if _hookrunners(thing)]
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
        gc.enable()
