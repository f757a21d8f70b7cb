"""The client behind trusted reverse proxies (-trusted-proxies): who X-Forwarded-For says sent a request.

webhook ignores X-Forwarded-For, so behind Traefik or nginx every request seems to come from the proxy
(upstream #505). With -trusted-proxies, and only when the direct peer is one of them, the chain of
addresses the proxies appended is walked from the right, past proxies that are trusted too, to the first
address that is not: anything left of it was written by the client and proves nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The port shown for a forwarded client: X-Forwarded-For rarely carries one, and the proxy's own port
#: next to the client's address would describe a connection that does not exist.
UNKNOWN_PORT = "0"


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """Networks from `-trusted-proxies` entries (already checked by the flag parser)."""
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def _address(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d; trust is written in IPv4 terms.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_trusted(networks: Sequence[Network], host: str) -> bool:
    address = _address(host.strip("[]"))
    return address is not None and any(address in network for network in networks)


def _entry(text: str) -> tuple[str, str] | None:
    """One X-Forwarded-For entry as (address, port): `1.2.3.4`, `1.2.3.4:5678`, `[::1]:80` or `::1`."""
    text = text.strip().strip('"')
    port = UNKNOWN_PORT
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        if rest:
            port = rest[1:]
        text = host
    elif text.count(":") == 1:
        text, port = text.split(":")
        if not port.isdigit():
            return None
    address = _address(text)
    if address is None:
        return None
    return str(address), port


def forwarded_client(
    networks: Sequence[Network], peer_host: str, forwarded_for: Iterable[str]
) -> tuple[str, str] | None:
    """The client's (address, port) when the peer is a trusted proxy and the header names one, else None.

    `forwarded_for` is every X-Forwarded-For value in arrival order (a header may repeat). An entry that
    is not an address ends the walk: the chain cannot be believed past it.
    """
    if not networks or not is_trusted(networks, peer_host):
        return None
    entries = [item for value in forwarded_for for item in value.split(",") if item.strip()]
    client: tuple[str, str] | None = None
    for item in reversed(entries):
        entry = _entry(item)
        if entry is None:
            break
        client = entry
        if not is_trusted(networks, entry[0]):
            return client
    # Every address was a trusted proxy's: the left-most one is as close to the client as it gets.
    return client
