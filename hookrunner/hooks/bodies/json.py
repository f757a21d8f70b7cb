"""webhook's JSON body parser: an object, or an array wrapped as `{"root": [...]}`."""

from __future__ import annotations

from typing import Any

from hookrunner.errors import PayloadParseError
from hookrunner.golang.json import GoJSONError, NilMap, decode_json_map, loads_json

__all__ = ["parse_json_payload"]


# unicode.IsSpace on a single byte taken as a rune: this is how webhook spots a top-level array.
_GO_SPACE_BYTES = frozenset(b"\t\n\v\f\r \x85\xa0")


def parse_json_payload(body: bytes) -> dict[str, Any] | None:
    """webhook's ParseJSONPayload: an object, or `{"root": [...]}` when the body is an array.

    A top-level scalar fails (`json: cannot unmarshal string into Go value of type ...`), while `null`
    succeeds and leaves no payload (None), as decoding `null` into a Go map does. Only the first JSON
    value is read; anything after it is ignored.
    """
    first = next((b for b in body if b not in _GO_SPACE_BYTES), None)
    if first == 0x5B:
        try:
            value = loads_json(body)
        except GoJSONError as exc:
            raise PayloadParseError(f"error parsing JSON array payload {exc}") from exc
        return {"root": value}
    try:
        payload = decode_json_map(body)
    except GoJSONError as exc:
        raise PayloadParseError(f"error parsing JSON payload {exc}") from exc
    # Go decodes `null` into a nil map: no payload at all.
    return None if isinstance(payload, NilMap) else payload
