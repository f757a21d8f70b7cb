"""Values read the way Go reads them: durations as time.ParseDuration accepts them."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds from a Go duration (`30s`, `1m30s`, `1.5h`, `250ms`; a bare `0` is zero). ValueError if bad."""
    source = text
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{source}"')
    total = 0.0
    position = 0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None:
            if re.match(r"\d+\.?\d*|\.\d+", text[position:]) and not re.search(r"[a-zµμ]", text[position:]):
                raise ValueError(f'time: missing unit in duration "{source}"')
            raise ValueError(f'time: invalid duration "{source}"')
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    return sign * total
