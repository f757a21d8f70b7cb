"""The admin listener's set-up: HOST:PORT, the loopback guard (no token, no -admin-insecure: loopback only),
the token file, and a socket of its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hookrunner.config import Config
from hookrunner.serve.adminserver import AdminSetupError, is_loopback, open_admin, read_token, split_addr


@pytest.mark.parametrize(
    ("addr", "host", "port"),
    [("127.0.0.1:9001", "127.0.0.1", 9001), ("[::1]:80", "::1", 80), (":9001", "", 9001), ("localhost:0", "localhost", 0)],
)
def test_split_addr(addr: str, host: str, port: int) -> None:
    assert split_addr(addr) == (host, port)


@pytest.mark.parametrize("addr", ["9001", "host:", "host:port", "host:70000", ""])
def test_split_addr_refuses(addr: str) -> None:
    with pytest.raises(AdminSetupError, match="HOST:PORT"):
        split_addr(addr)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.5.6.7", True), ("::1", True), ("localhost", True), ("", False),
     ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("192.0.2.1", False), ("no-such-host.invalid", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_refuses_a_non_loopback_address_without_a_token() -> None:
    for addr in ("0.0.0.0:0", ":0"):
        with pytest.raises(AdminSetupError, match="not a loopback address.*-admin-token-file.*-admin-insecure"):
            open_admin(Config(admin_addr=addr))


def test_binds_anywhere_with_a_token_or_when_told(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok\n")
    for config in (Config(admin_addr="0.0.0.0:0", admin_token_file=str(token)),
                   Config(admin_addr="0.0.0.0:0", admin_insecure=True)):
        admin = open_admin(config)
        try:
            assert admin.sock.getsockname()[0] == "0.0.0.0" and admin.port > 0
            assert admin.token == (b"tok" if config.admin_token_file else None)
        finally:
            admin.sock.close()


def test_loopback_needs_nothing() -> None:
    admin = open_admin(Config(admin_addr="127.0.0.1:0"))
    try:
        with socket.create_connection(("127.0.0.1", admin.port), timeout=5):
            pass
    finally:
        admin.sock.close()


def test_a_taken_port_is_an_error() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(AdminSetupError, match="listen tcp 127.0.0.1:"):
            open_admin(Config(admin_addr=f"127.0.0.1:{taken.getsockname()[1]}"))
    finally:
        taken.close()


def test_token_file_problems(tmp_path: Path) -> None:
    with pytest.raises(AdminSetupError, match="cannot read"):
        read_token(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(AdminSetupError, match="is empty"):
        read_token(str(empty))


def test_a_state_dir_that_cannot_hold_the_history_falls_back_to_memory(tmp_path: Path) -> None:
    from hookrunner.serve.adminserver import open_store

    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    store = open_store(Config(state_dir=str(blocked)))
    assert store.path == ""
    usable = open_store(Config(state_dir=str(tmp_path / "state")))
    assert usable.path == str(tmp_path / "state" / "journal.sqlite3")
