"""The finish ledger (hookrunner/state/finishledger.py): made private and at its full size, so that recording a
finish on a full disk takes no new space; ids added, read and freed, shared by the workers of a start."""

from __future__ import annotations

import os
import resource
import signal
import stat
from pathlib import Path

from hookrunner.state.finishledger import NAME, SIZE, SLOTS, FinishLedger


def test_it_is_made_private_at_its_full_size_and_an_existing_one_is_kept(tmp_path: Path) -> None:
    ledger = FinishLedger(str(tmp_path))
    path = tmp_path / NAME
    assert path.stat().st_size == SIZE
    assert path.stat().st_blocks * 512 >= SIZE  # the blocks are there, not a hole
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ledger.ids() == set()
    assert ledger.add([7, 9])
    ledger.close()
    again = FinishLedger(str(tmp_path))  # the next start reads what the last one left
    assert again.ids() == {7, 9}
    again.close()


def test_ids_are_added_once_and_freed(tmp_path: Path) -> None:
    ledger = FinishLedger(str(tmp_path))
    assert ledger.add([3, 4, 3])
    assert ledger.add([4, 5])
    assert ledger.ids() == {3, 4, 5}
    assert sum(1 for value in (tmp_path / NAME).read_bytes()[::8] if value) == 3  # each id in one slot
    assert ledger.remove([4, 6])
    assert ledger.ids() == {3, 5}
    ledger.close()


def test_it_refuses_what_does_not_fit_and_writes_none_of_it(tmp_path: Path) -> None:
    ledger = FinishLedger(str(tmp_path))
    assert ledger.add(range(1, SLOTS))  # one slot left
    assert not ledger.add([SLOTS + 1, SLOTS + 2])
    assert len(ledger.ids()) == SLOTS - 1
    assert ledger.add([SLOTS + 1])
    ledger.close()


def test_recording_takes_no_new_space(tmp_path: Path) -> None:
    ledger = FinishLedger(str(tmp_path))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (SIZE, hard))  # no file may grow past the ledger's size
    try:
        assert ledger.add([11, 12])
        assert ledger.remove([11])
        with open(tmp_path / "grows", "wb", buffering=0) as out:  # while growing a file fails
            assert out.write(bytes(SIZE + 1)) == SIZE
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert ledger.ids() == {12}
    ledger.close()


def test_the_workers_of_a_start_share_it(tmp_path: Path) -> None:
    first, second = FinishLedger(str(tmp_path)), FinishLedger(str(tmp_path))
    assert first.add([1]) and second.add([2])
    assert first.ids() == second.ids() == {1, 2}
    assert second.remove([1])
    assert first.ids() == {2}
    first.close()
    second.close()
    assert os.path.getsize(tmp_path / NAME) == SIZE
