"""pass-file-to-command's files: Go's names and errors, and a file written whole or not at all."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from hookrunner.run import tempfiles
from hookrunner.run.tempfiles import create_temp, write_temp


def test_temp_files_are_named_as_go_names_them(tmp_path: Path) -> None:
    names = []
    for _ in range(50):
        fd, name = create_temp(str(tmp_path), "HOOK_DATA")
        os.close(fd)
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
        digits = name.removeprefix(f"{tmp_path}/HOOK_DATA")
        # os.CreateTemp: the decimal digits of a random uint32, no padding.
        assert digits.isdigit() and str(int(digits)) == digits and int(digits) < 2**32, name
        names.append(name)
    assert len(set(names)) == 50
    fd, name = create_temp(str(tmp_path) + "/", "pre*.json")  # the last * is replaced, the folder's / kept
    os.close(fd)
    assert re.fullmatch(re.escape(f"{tmp_path}/pre") + r"\d+\.json", name), name


def test_temp_file_errors_are_gos(tmp_path: Path) -> None:
    with pytest.raises(OSError) as missing:
        create_temp(str(tmp_path / "nope"), "HOOK_X")
    assert re.fullmatch(re.escape(f"open {tmp_path}/nope/HOOK_X") + r"\d+: no such file or directory",
                        missing.value.strerror), missing.value.strerror
    with pytest.raises(OSError) as separator:
        create_temp(str(tmp_path), "A/B")
    assert separator.value.strerror == "createtemp A/B: pattern contains path separator"


def test_without_a_folder_temp_files_go_to_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    fd, name = create_temp("", "HOOK_X")
    os.close(fd)
    assert name.startswith(f"{tmp_path}/HOOK_X")


def test_a_file_that_cannot_be_written_is_removed_with_gos_error(tmp_path: Path) -> None:
    # /dev/full answers every write ENOSPC, as a full TMPDIR does; webhook 2.8.0 logs
    # `error writing file <name> [write <name>: no space left on device]` and hands the command no file.
    fd, name = create_temp(str(tmp_path), "HOOK_DATA")
    os.close(fd)
    with pytest.raises(OSError) as caught:
        write_temp(os.open("/dev/full", os.O_WRONLY), name, b"payload")
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.strerror == f"write {name}: no space left on device"
    assert not os.path.exists(name)


def test_short_writes_go_on_until_all_is_written_and_a_file_cut_short_is_not_left_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls: list[int] = []
    room = [100]  # bytes the disk still takes

    def three_bytes_at_a_time(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if room[0] == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = real_write(fd, bytes(data[: min(3, room[0])]))
        room[0] -= written
        return written

    monkeypatch.setattr(tempfiles.os, "write", three_bytes_at_a_time)
    fd, name = create_temp(str(tmp_path), "WHOLE")
    write_temp(fd, name, b"0123456789")  # os.File.Write: short writes go on until all is written
    assert Path(name).read_bytes() == b"0123456789"
    assert calls == [10, 7, 4, 1]
    with pytest.raises(OSError):
        os.fstat(fd)  # closed

    room[0] = 3  # the disk fills after three more bytes
    fd, cut = create_temp(str(tmp_path), "CUT")
    with pytest.raises(OSError) as caught:
        write_temp(fd, cut, b"0123456789")
    assert caught.value.strerror == f"write {cut}: no space left on device"
    assert not os.path.exists(cut)
    assert list(tmp_path.iterdir()) == [Path(name)]
