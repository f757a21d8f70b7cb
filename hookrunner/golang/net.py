"""Go's net.ParseIP, net.ParseCIDR and IPNet.Contains, on raw bytes: what an address or a network is,
and which addresses a network holds, exactly as Go decides it."""

from __future__ import annotations

from dataclasses import dataclass

_V4_IN_V6 = bytes(10) + b"\xff\xff"
_BIG = 0xFFFFFF


@dataclass(frozen=True)
class IPNet:
    ip: bytes
    mask: bytes


def _dtoi(s: str) -> tuple[int, int, bool]:
    n = i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        n = n * 10 + ord(s[i]) - 0x30
        if n >= _BIG:
            return _BIG, i, False
        i += 1
    return (n, i, True) if i else (0, 0, False)


def _xtoi(s: str) -> tuple[int, int, bool]:
    n = i = 0
    while i < len(s) and s[i] in "0123456789abcdefABCDEF":
        n = n * 16 + int(s[i], 16)
        if n >= _BIG:
            return 0, i, False
        i += 1
    return (n, i, True) if i else (0, i, False)


def _parse_ipv4(s: str) -> bytes | None:
    octets = bytearray()
    for index in range(4):
        if not s:
            return None
        if index > 0:
            if s[0] != ".":
                return None
            s = s[1:]
        n, consumed, ok = _dtoi(s)
        if not ok or n > 0xFF or (consumed > 1 and s[0] == "0"):
            return None
        s = s[consumed:]
        octets.append(n)
    return _V4_IN_V6 + bytes(octets) if not s else None


def _parse_ipv6(s: str) -> bytes | None:
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return bytes(ip)
    i = 0
    while i < 16:
        n, consumed, ok = _xtoi(s)
        if not ok or n > 0xFFFF:
            return None
        if consumed < len(s) and s[consumed] == ".":
            if (ellipsis < 0 and i != 12) or i + 4 > 16:
                return None
            v4 = _parse_ipv4(s)
            if v4 is None:
                return None
            ip[i : i + 4] = v4[12:]
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = n >> 8, n & 0xFF
        i += 2
        s = s[consumed:]
        if not s:
            break
        if s[0] != ":" or len(s) == 1:
            return None
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        gap = 16 - i
        ip[ellipsis + gap : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + gap] = bytes(gap)
    elif ellipsis >= 0:
        return None
    return bytes(ip)


def parse_ip(s: str) -> bytes | None:
    """Go's net.ParseIP: 16 bytes (IPv4 in its v4-in-v6 form), or None."""
    for c in s:
        if c == ".":
            return _parse_ipv4(s)
        if c == ":":
            return _parse_ipv6(s)
    return None


def _to4(ip: bytes) -> bytes | None:
    if len(ip) == 4:
        return ip
    if len(ip) == 16 and ip[:12] == _V4_IN_V6:
        return ip[12:]
    return None


def parse_cidr(s: str) -> IPNet | str:
    """Go's net.ParseCIDR as an IPNet, or the text of its error."""
    error = f"invalid CIDR address: {s}"
    addr, slash, mask_text = s.partition("/")
    if not slash:
        return error
    bits = 32
    ip = _parse_ipv4(addr)
    if ip is None:
        bits, ip = 128, _parse_ipv6(addr)
    n, consumed, ok = _dtoi(mask_text)
    if ip is None or not ok or consumed != len(mask_text) or n > bits:
        return error
    mask = ((1 << bits) - 1 ^ ((1 << (bits - n)) - 1)).to_bytes(bits // 8, "big")
    if bits == 32:
        ip = ip[12:]
    return IPNet(bytes(a & b for a, b in zip(ip, mask, strict=True)), mask)


def net_contains(net: IPNet, ip: bytes) -> bool:
    number = _to4(net.ip) or net.ip
    mask = net.mask
    if len(mask) == 16 and len(number) == 4:
        mask = mask[12:]  # an IPv4-mapped IPv6 network is an IPv4 network
    elif len(mask) == 4 and len(number) != 4:
        return False
    ip = _to4(ip) or ip
    if len(ip) != len(number):
        return False
    return all(a & m == b & m for a, b, m in zip(number, ip, mask, strict=True))
