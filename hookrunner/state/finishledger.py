"""The finish ledger (`-state-dir`): the ids of runs that finished while the run journal could not write (a
full or failing disk), written in place into a file given its full size beforehand, so that recording them
takes no new space; the next claim of left-over runs (state/journal.py) reads them and does not replay them.

The file is a fixed array of little-endian 64-bit slots; 0 is a free slot. A journal row id is never reused
(AUTOINCREMENT), so an id left in the ledger is always true: that run did finish. Every worker of a start
shares the file, each under `flock` while it reads or changes it."""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Callable, Iterable

NAME = "journal.finished"
#: How many finishes the ledger holds at once; past that, a finish is kept in memory only.
SLOTS = 4096
_SLOT = struct.Struct("<q")
SIZE = SLOTS * _SLOT.size


class FinishLedger:
    """One process's handle on the ledger; not thread-safe (the journal calls it under its own lock)."""

    def __init__(self, state_dir: str) -> None:
        """Open (creating, private, at its full size) the ledger in `state_dir`; raises OSError when it cannot
        (a disk already full at start): the journal then keeps finishes in memory only."""
        self.path = os.path.join(state_dir, NAME)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(self._fd).st_size
            if size < SIZE:
                # Zeros written, not only allocated, so that a later write only overwrites blocks it has.
                os.pwrite(self._fd, bytes(SIZE - size), size)
                os.fsync(self._fd)
        except OSError:
            os.close(self._fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def _slots(self) -> list[int]:
        data = os.pread(self._fd, SIZE, 0)
        return [value for (value,) in _SLOT.iter_unpack(data[: len(data) - len(data) % _SLOT.size])]

    def ids(self) -> set[int]:
        """The run ids the ledger holds."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            return {value for value in self._slots() if value > 0}
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def add(self, run_ids: Iterable[int]) -> bool:
        """Write `run_ids` into free slots, durably; False (nothing written) when there are too few, or the
        write fails."""
        return self._rewrite(lambda slots: _with(slots, run_ids))

    def remove(self, run_ids: Iterable[int]) -> bool:
        """Free the slots of `run_ids` (their finishes are in the journal's database now)."""
        gone = set(run_ids)
        return self._rewrite(lambda slots: {i: 0 for i, value in enumerate(slots) if value in gone})

    def _rewrite(self, change: Callable[[list[int]], dict[int, int] | None]) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                writes = change(self._slots())
                if writes is None:
                    return False
                for slot, value in writes.items():
                    os.pwrite(self._fd, _SLOT.pack(value), slot * _SLOT.size)
                if writes:
                    os.fdatasync(self._fd)
                return True
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError:
            return False


def _with(slots: list[int], run_ids: Iterable[int]) -> dict[int, int] | None:
    """The writes that put `run_ids` (those not there already) into free slots; None when they do not fit."""
    present = set(slots)
    new = [run_id for run_id in dict.fromkeys(run_ids) if run_id not in present]
    free = [i for i, value in enumerate(slots) if value == 0]
    if len(new) > len(free):
        return None
    return dict(zip(free, new, strict=False))
