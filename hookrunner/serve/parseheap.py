"""Where a big request body's parse puts its objects: in glibc's heap, not in Python's small-object
allocator, so that their memory can go back to the system once they are freed (docs/limits.md, "Hostile
XML")."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: PyMemAllocatorDomain (Python's pymem.h): the raw domain (malloc itself), PyMem_Malloc's and
#: PyObject_Malloc's.
_RAW, _MEM, _OBJ = 0, 1, 2


class _Allocator(ctypes.Structure):
    """PyMemAllocatorEx: a context handed to four functions."""

    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("malloc", ctypes.c_void_p),
        ("calloc", ctypes.c_void_p),
        ("realloc", ctypes.c_void_p),
        ("free", ctypes.c_void_p),
    ]

    def same(self, other: _Allocator) -> bool:
        return all(getattr(self, field[0]) == getattr(other, field[0]) for field in self._fields_)


def _allocator_api() -> tuple[Callable[[int, _Allocator], None], Callable[[int, _Allocator], None]] | None:
    try:
        get, put = ctypes.pythonapi.PyMem_GetAllocator, ctypes.pythonapi.PyMem_SetAllocator
    except AttributeError:
        return None
    for function in (get, put):
        # ctypes.pythonapi calls keep the GIL, which the two domains require of whoever changes them.
        function.argtypes = (ctypes.c_int, ctypes.POINTER(_Allocator))
        function.restype = None
    return get, put


class ParseHeap:
    """Python's small-object allocator (pymalloc) takes memory from the system in blocks of 1 MiB and gives
    a block back only once every object in it is freed. A big body's parse fills hundreds of blocks (25
    MiB of nested XML: some 800), and whatever the other requests served meanwhile make and keep (a read's
    deadline, the event loop's own objects) lands in those blocks too, one object pinning a whole block:
    120-140 MB stayed after the parse was freed. So while a parse runs (`outside_pools`), the allocator of
    the two object domains allocates with malloc; pymalloc's own free and realloc are kept, since they
    hand anything that is not theirs to malloc's, so objects made before and after the parse are freed
    alike. Once the parse's objects are freed, malloc_trim gives back every free page of glibc's heap
    (worker.ParseTrim, counting `events`): what outlives the parse pins a page, not a block. Outside a
    parse nothing changes. Only where the allocator is pymalloc as Python starts it: under tracemalloc,
    debug hooks or PYTHONMALLOC=malloc it is left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        #: Parses ended and parses freed: each may have left free memory in glibc's heap.
        self.events = 0
        self._api = _allocator_api()
        self._pools: tuple[_Allocator, _Allocator] | None = None
        self._direct = _Allocator()
        if self._api is None:
            return
        get, _ = self._api
        raw, mem, obj = _Allocator(), _Allocator(), _Allocator()
        get(_RAW, raw)
        get(_MEM, mem)
        get(_OBJ, obj)
        pymalloc = mem.same(obj) and not obj.ctx and not raw.ctx and obj.malloc != raw.malloc
        if pymalloc:
            self._pools = mem, obj
            self._direct = _Allocator(raw.ctx, raw.malloc, raw.calloc, obj.realloc, obj.free)

    @property
    def available(self) -> bool:
        return self._pools is not None

    def outside_pools(self, work: Callable[[], T]) -> T:
        """`work()` (a parse) with every object allocated meanwhile, by any thread, taken from malloc."""
        self._enter()
        try:
            return work()
        finally:
            self._leave()

    def freed(self) -> None:
        """A parse's objects have been freed."""
        with self._lock:
            self.events += 1

    def _enter(self) -> None:
        with self._lock:
            self._open += 1
            if self._open == 1 and self._pools is not None and self._api is not None:
                get, put = self._api
                now = _Allocator()
                get(_OBJ, now)
                if not now.same(self._pools[1]):
                    self._pools = None  # someone else's hooks since (tracemalloc): left alone for good
                    return
                put(_MEM, self._direct)
                put(_OBJ, self._direct)

    def _leave(self) -> None:
        with self._lock:
            self._open -= 1
            self.events += 1
            if not self._open and self._pools is not None and self._api is not None:
                _, put = self._api
                put(_MEM, self._pools[0])
                put(_OBJ, self._pools[1])


#: The worker's one heap: the allocator is the whole process's.
PARSE_HEAP = ParseHeap()
