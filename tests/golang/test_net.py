"""Go's net.ParseIP, net.ParseCIDR and IPNet.Contains on raw bytes.

The cases checked against the reference run through the `ip-whitelist` match rule in
tests/hooks/test_rules.py; these pin the module's own contract on a few of those cases.
"""

from __future__ import annotations

import pytest

from hookrunner.golang.net import IPNet, net_contains, parse_cidr, parse_ip


def test_parse_ip() -> None:
    assert parse_ip("127.0.0.1") == bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1])
    assert parse_ip("::1") == bytes(15) + b"\x01"
    for bad in ("127.0.0.01", "fe80::1%eth0", "@", ""):
        assert parse_ip(bad) is None


@pytest.mark.parametrize("text", ["10.0.0.0/33", "bad/32", "127.0.0.01/32", "10.0.0.0/+8", "::/129", "1.2.3.4"])
def test_parse_cidr_errors(text: str) -> None:
    assert parse_cidr(text) == f"invalid CIDR address: {text}"


@pytest.mark.parametrize(
    ("cidr", "ip", "expected"),
    [
        ("10.0.0.0/8", "10.20.30.40", True),
        ("10.0.0.0/8", "11.0.0.1", False),
        ("10.0.0.0/08", "10.1.1.1", True),  # Go accepts leading zeros in the prefix length
        ("0.0.0.0/0", "::1", False),  # families never mix
        ("::/0", "127.0.0.1", False),
        ("2001:db8::/32", "2001:db8:1::7", True),
        ("127.0.0.1/32", "::ffff:127.0.0.1", True),  # a v4-mapped address is an IPv4 address
        ("::ffff:127.0.0.0/104", "127.0.0.1", True),  # and a v4-mapped network an IPv4 one
    ],
)
def test_net_contains(cidr: str, ip: str, expected: bool) -> None:
    net = parse_cidr(cidr)
    address = parse_ip(ip)
    assert isinstance(net, IPNet) and address is not None
    assert net_contains(net, address) is expected
