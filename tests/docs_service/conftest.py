"""Fixtures for the docs-rebuild service tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from docs_support import Standin, start_standin, stop


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Standin]:
    """A stand-in that allows dev and prod and records Jobs without running them."""
    server = start_standin(tmp_path)
    yield server
    stop(server.proc)
