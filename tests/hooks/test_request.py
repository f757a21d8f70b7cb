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


def test_a_long_name_is_canonicalised_without_being_remembered() -> None:
    from hookrunner.hooks import request

    long_name = "x-" + "a" * 200
    before = request._remembered_canonical.cache_info().currsize
    assert canonical_header_key(long_name) == "X-A" + "a" * 199
    assert canonical_header_key(long_name.upper()) == "X-A" + "a" * 199
    assert request._remembered_canonical.cache_info().currsize == before


def test_the_names_remembered_stay_few_whatever_a_client_sends() -> None:
    from hookrunner.hooks import request

    for n in range(5000):
        assert canonical_header_key(f"x-name-{n}") == f"X-Name-{n}"
    info = request._remembered_canonical.cache_info()
    assert info.maxsize == 512
    assert info.currsize <= 512
    assert canonical_header_key("x-name-4999") == "X-Name-4999"  # remembered or not, the same answer
