"""Reading a hooks file safely: regular files only, opened without blocking, up to the cap."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from hookrunner.errors import HooksFileError, HooksFileTooLarge, NotRegularFileError
from hookrunner.ops.regularfile import (
    HOOKS_FILE_CAP,
    open_for_writing,
    read_regular_file,
    read_regular_file_probed,
)


def test_a_regular_file_is_read_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_bytes(b"[]")
    os.symlink(tmp_path / "t.json", tmp_path / "l.json")
    assert read_regular_file(str(tmp_path / "l.json")) == b"[]"


def test_the_cap_is_inclusive(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(str(path), cap=10) == b"x" * 10
    with pytest.raises(HooksFileTooLarge, match=r"read .*h.json: file is larger than the 0 MiB hooks-file cap"):
        read_regular_file(str(path), cap=9)


def test_a_file_over_the_default_cap_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as handle:
        handle.truncate(HOOKS_FILE_CAP + 1)
    with pytest.raises(HooksFileTooLarge, match="larger than the 16 MiB hooks-file cap"):
        read_regular_file(str(path))


def test_a_fifo_with_no_writer_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegularFileError, match=r"not a regular file \(a named pipe\)"):
        read_regular_file(str(tmp_path / "fifo"))


def test_dev_zero_is_not_read(tmp_path: Path) -> None:
    os.symlink("/dev/zero", tmp_path / "zero")
    with pytest.raises(NotRegularFileError, match=r"read .*zero: not a regular file \(a character device\)"):
        read_regular_file(str(tmp_path / "zero"))


def test_a_directory_and_a_socket_give_gos_errors(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(NotRegularFileError) as refused:
        read_regular_file(str(tmp_path / "dir"))
    assert str(refused.value) == f"read {tmp_path / 'dir'}: is a directory"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        with pytest.raises(HooksFileError) as failed:
            read_regular_file(str(tmp_path / "sock"))
    assert str(failed.value) == f"open {tmp_path / 'sock'}: no such device or address"


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HooksFileError, match="open .*nope.json: no such file or directory"):
        read_regular_file(str(tmp_path / "nope.json"))


def test_the_probe_sees_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(b"[]")
    assert read_regular_file_probed(str(path))[1:] == (b"[]", False)
    writer = os.open(path, os.O_WRONLY)
    try:
        assert read_regular_file_probed(str(path))[2] is True
        reader = os.open(path, os.O_RDONLY)
        try:
            assert open_for_writing(reader) is True
        finally:
            os.close(reader)
    finally:
        os.close(writer)
    assert read_regular_file_probed(str(path))[2] is False
