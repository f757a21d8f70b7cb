"""Tests for hookrunner.hooks.request: header names."""

from __future__ import annotations

import pytest

from hookrunner.hooks.request import canonical_header_key

# --- header names ---

CANONICAL_CASES: list[tuple[str, str]] = [
    ("x-hub-signature", "X-Hub-Signature"),
    ("X-HUB-SIGNATURE", "X-Hub-Signature"),
    ("content-type", "Content-Type"),
    ("x_forwarded_for", "X_forwarded_for"),
    ("-x--y-", "-X--Y-"),
    ("a1-b2", "A1-B2"),
    ("", ""),
    ("x hub", "x hub"),  # a space is not a token character: the name stays as it is
    ("x:y", "x:y"),
    ("ü-name", "ü-name"),
    ("x.y~z", "X.y~z"),
]


@pytest.mark.parametrize(("name", "canonical"), CANONICAL_CASES)
def test_canonical_header_key(name: str, canonical: str) -> None:
    assert canonical_header_key(name) == canonical
