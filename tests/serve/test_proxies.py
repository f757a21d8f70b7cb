"""-trusted-proxies: which X-Forwarded-For address is the client, and when the header is believed at all."""

from __future__ import annotations

import pytest

from hookrunner.serve.proxies import forwarded_client, is_trusted, parse_networks

TRUSTED = parse_networks(["10.0.0.0/8", "172.17.0.1/32", "::1/128"])


@pytest.mark.parametrize(
    ("peer", "values", "client"),
    [
        # The proxy says who connected to it.
        ("10.0.0.5", ["203.0.113.7"], ("203.0.113.7", "0")),
        # Trusted hops are skipped from the right; what the client wrote further left is not used.
        ("10.0.0.5", ["198.51.100.1, 203.0.113.7, 10.9.9.9"], ("203.0.113.7", "0")),
        ("10.0.0.5", ["203.0.113.7", "10.9.9.9"], ("203.0.113.7", "0")),  # repeated headers, in order
        # Every hop trusted: the left-most is the closest to the client there is.
        ("10.0.0.5", ["10.1.1.1, 10.2.2.2"], ("10.1.1.1", "0")),
        # An entry that is not an address stops the walk; the address right of it is used.
        ("10.0.0.5", ["203.0.113.7, garbage, 10.2.2.2"], ("10.2.2.2", "0")),
        ("10.0.0.5", ["garbage"], None),
        ("10.0.0.5", [""], None),
        # Ports, IPv6 and IPv4-mapped peers (what a dual-stack listener reports).
        ("10.0.0.5", ["203.0.113.7:5678"], ("203.0.113.7", "5678")),
        ("10.0.0.5", ["[2001:db8::1]:443"], ("2001:db8::1", "443")),
        ("10.0.0.5", ["2001:db8::1"], ("2001:db8::1", "0")),
        ("::ffff:10.0.0.5", ["203.0.113.7"], ("203.0.113.7", "0")),
        ("::1", [" 203.0.113.7 "], ("203.0.113.7", "0")),
        # A peer that is not trusted: the header is ignored, whatever it says.
        ("192.0.2.10", ["203.0.113.7"], None),
        ("172.17.0.2", ["203.0.113.7"], None),
    ],
)
def test_forwarded_client(peer: str, values: list[str], client: tuple[str, str] | None) -> None:
    assert forwarded_client(TRUSTED, peer, values) == client


def test_no_trusted_networks_means_no_forwarding() -> None:
    assert forwarded_client((), "10.0.0.5", ["203.0.113.7"]) is None


def test_is_trusted_takes_bracketed_and_bad_hosts() -> None:
    assert is_trusted(TRUSTED, "[::1]")
    assert not is_trusted(TRUSTED, "not-an-ip")
