"""Trigger rules: and / or / not / match, decoded from a hooks file once and evaluated per request.

Semantics, error texts and edge cases follow webhook 2.8 as built with Go 1.19 (the Debian reference).
hashlib and hmac (OpenSSL) are imported where a request is matched, not here: the master loads the hooks
but matches none, and stays without OpenSSL (docs/performance.md, memory at rest).
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hookrunner.errors import HookrunnerError, ParameterNodeError, RuleError, SignatureError, as_value
from hookrunner.golang.decode import fields, go_bool, go_string, type_error
from hookrunner.golang.net import IPNet, net_contains, parse_cidr, parse_ip
from hookrunner.golang.regexp import compile_go_regexp, regexp_subject
from hookrunner.golang.time import parse_scalr_date
from hookrunner.hooks.argument import Argument, plain_argument, shared_argument
from hookrunner.hooks.params import argument_value
from hookrunner.hooks.request import Request
from hookrunner.ops.log import log

__all__ = [
    "AndRule",
    "EmptyRule",
    "MatchRule",
    "NotRule",
    "OrRule",
    "Outcome",
    "Rule",
    "extract_signatures",
    "go_string",
    "parse_rule",
]

# Match types, as webhook spells them.
MATCH_VALUE = "value"
MATCH_REGEX = "regex"
MATCH_HMAC_SHA1 = "payload-hmac-sha1"
MATCH_HMAC_SHA256 = "payload-hmac-sha256"
MATCH_HMAC_SHA512 = "payload-hmac-sha512"
MATCH_HASH_SHA1 = "payload-hash-sha1"
MATCH_HASH_SHA256 = "payload-hash-sha256"
MATCH_HASH_SHA512 = "payload-hash-sha512"
MATCH_IP_WHITELIST = "ip-whitelist"
MATCH_SCALR_SIGNATURE = "scalr-signature"
#: Every match type, in the order webhook's documentation lists them.
MATCH_TYPES = (
    MATCH_VALUE, MATCH_REGEX, MATCH_HMAC_SHA1, MATCH_HMAC_SHA256, MATCH_HMAC_SHA512,
    MATCH_HASH_SHA1, MATCH_HASH_SHA256, MATCH_HASH_SHA512, MATCH_IP_WHITELIST, MATCH_SCALR_SIGNATURE,
)
#: The types that check a signature made with the rule's `secret`.
SIGNATURE_TYPES = frozenset(
    {
        MATCH_HMAC_SHA1, MATCH_HMAC_SHA256, MATCH_HMAC_SHA512,
        MATCH_HASH_SHA1, MATCH_HASH_SHA256, MATCH_HASH_SHA512, MATCH_SCALR_SIGNATURE,
    }
)
#: The deprecated payload-hash-* types and the payload-hmac-* types they are evaluated as.
DEPRECATED_TWINS = {
    MATCH_HASH_SHA1: MATCH_HMAC_SHA1,
    MATCH_HASH_SHA256: MATCH_HMAC_SHA256,
    MATCH_HASH_SHA512: MATCH_HMAC_SHA512,
}


def _go_bytes(s: str) -> bytes:
    # Request strings keep non-UTF-8 bytes as surrogate escapes (see params); Go sees the raw bytes.
    return s.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------------------------------------
# The rule tree


#: Go's (bool, error) pair: a rule can be true *and* carry an error (`not` over a missing parameter).
Outcome = tuple[bool, HookrunnerError | None]


class Rule(ABC):
    """One node of a trigger rule; immutable and shared by every request."""

    __slots__ = ()  # each node has slots: a file of 10,000 hooks holds 10,000 of them

    @abstractmethod
    def check(self, req: Request) -> Outcome:
        """webhook's Evaluate: the result and the error, exactly as Go returns them together.

        webhook triggers the hook when the result is true and the error is only a missing parameter
        (ParameterNodeError, which it logs); any other error is a 500.
        """

    def evaluate(self, req: Request) -> bool:
        """The result; raises the error if there is one (losing a true result that came with it)."""
        ok, error = self.check(req)
        if error is not None:
            try:
                raise error
            finally:
                error = None  # raised from a variable of this frame: no cycle through its traceback
        return ok

    @abstractmethod
    def describe(self) -> str:
        """A short human-readable form of the rule, for logs and explanations."""


@dataclass(frozen=True, slots=True)
class EmptyRule(Rule):
    """A rule object with none of and/or/not/match set (`{}`): webhook evaluates it to false."""

    def check(self, req: Request) -> Outcome:
        return False, None

    def describe(self) -> str:
        return "{}"


@dataclass(frozen=True, slots=True)
class AndRule(Rule):
    """True when every clause is; stops at the first false clause and passes any error up."""

    rules: tuple[Rule, ...] = ()

    def check(self, req: Request) -> Outcome:
        for rule in self.rules:
            ok, error = rule.check(req)
            if error is not None:
                return False, error
            if not ok:
                return False, None
        return True, None

    def describe(self) -> str:
        return "and(" + ", ".join(rule.describe() for rule in self.rules) + ")"


@dataclass(frozen=True, slots=True)
class OrRule(Rule):
    """True when any clause is. A missing parameter, and with soft failures a bad signature, is skipped.

    A skipped clause still counts with the result it came with, as in webhook.
    """

    rules: tuple[Rule, ...] = ()

    def check(self, req: Request) -> Outcome:
        for rule in self.rules:
            ok, error = rule.check(req)
            if error is not None and not isinstance(error, ParameterNodeError):
                if not (req.allow_signature_errors and isinstance(error, SignatureError)):
                    return False, error
            if ok:
                return True, None
        return False, None

    def describe(self) -> str:
        return "or(" + ", ".join(rule.describe() for rule in self.rules) + ")"


@dataclass(frozen=True, slots=True)
class NotRule(Rule):
    """The negation of one clause, with the clause's error passed along (so an error negates to true)."""

    rule: Rule = field(default_factory=EmptyRule)

    def check(self, req: Request) -> Outcome:
        ok, error = self.rule.check(req)
        return not ok, error

    def describe(self) -> str:
        return f"not({self.rule.describe()})"


@dataclass(frozen=True, slots=True)
class MatchRule(Rule):
    """A leaf: compare one request value (or the peer address, or the body's signature) with the rule."""

    type: str = ""
    regex: str = ""
    secret: str = field(default="", repr=False)
    value: str = field(default="", repr=False)
    parameter: Argument = field(default_factory=Argument)
    ip_range: str = ""
    # Prepared once at load time. webhook compiles and parses these on every request and only fails
    # when it reaches them, so a bad regex or CIDR is kept as an error to raise at that moment.
    _pattern: Any = field(default=None, init=False, repr=False, compare=False)
    _pattern_error: str | None = field(default=None, init=False, repr=False, compare=False)
    _networks: tuple[IPNet | str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.type == MATCH_REGEX:
            pattern, error = compile_go_regexp(self.regex)
            object.__setattr__(self, "_pattern", pattern)
            object.__setattr__(self, "_pattern_error", error)
        elif self.type == MATCH_IP_WHITELIST:
            object.__setattr__(self, "_networks", _parse_ip_ranges(self.ip_range))

    def check(self, req: Request) -> Outcome:
        try:
            return self._match(req), None
        except HookrunnerError as error:
            return False, as_value(error)

    def _match(self, req: Request) -> bool:
        if self.type == MATCH_IP_WHITELIST:
            return _check_ip_whitelist(req.remote_addr, self._networks)
        if self.type == MATCH_SCALR_SIGNATURE:
            return _check_scalr_signature(req, self.secret)

        # Every other type reads its parameter first, even an unknown type: a missing value is an error.
        arg = argument_value(self.parameter, req)
        kind = self.type
        if kind == MATCH_VALUE:
            import hmac

            return hmac.compare_digest(_go_bytes(arg), _go_bytes(self.value))
        if kind == MATCH_REGEX:
            if self._pattern_error is not None:
                raise RuleError(self._pattern_error)
            return self._pattern.search(regexp_subject(arg)) is not None
        if kind in DEPRECATED_TWINS:
            log.output(_DEPRECATED_HASHES[kind])
            kind = DEPRECATED_TWINS[kind]
        if kind in _HMAC_TYPES:
            digest, prefix = _HMAC_TYPES[kind]
            _check_payload_signature(req.body, self.secret, arg, digest, prefix)
            return True
        return False

    def describe(self) -> str:
        if self.type == MATCH_IP_WHITELIST:
            return f"match ip-whitelist {self.ip_range!r}"
        if self.type == MATCH_SCALR_SIGNATURE:
            return "match scalr-signature"
        target = f"{self.parameter.source}:{self.parameter.name}"
        if self.type == MATCH_VALUE:
            return f"match value {target}"
        if self.type == MATCH_REGEX:
            return f"match regex {self.regex!r} {target}"
        return f"match {self.type} {target}"


_DEPRECATED_HASHES = {
    MATCH_HASH_SHA1: "warn: use of deprecated option payload-hash-sha1; use payload-hmac-sha1 instead",
    MATCH_HASH_SHA256: "warn: use of deprecated option payload-hash-sha256: use payload-hmac-sha256 instead",
    MATCH_HASH_SHA512: "warn: use of deprecated option payload-hash-sha512: use payload-hmac-sha512 instead",
}
#: Each signature rule's hash (a hashlib name) and the prefix of its signatures.
_HMAC_TYPES: dict[str, tuple[str, str]] = {
    MATCH_HMAC_SHA1: ("sha1", "sha1="),
    MATCH_HMAC_SHA256: ("sha256", "sha256="),
    MATCH_HMAC_SHA512: ("sha512", "sha512="),
}


# --------------------------------------------------------------------------------------------------------
# Payload signatures


def extract_signatures(source: str, prefix: str) -> list[str]:
    """The candidate signatures in a header value, as webhook's ExtractSignatures finds them.

    Without a comma the prefix is optional; with commas only the parts carrying the prefix count.
    """
    if "," in source:
        return [part[len(prefix) :] for part in source.split(",") if part.startswith(prefix)]
    return [source[len(prefix) :] if source.startswith(prefix) else source]


def _check_payload_signature(body: bytes, secret: str, header: str, digest: str, prefix: str) -> None:
    import hmac

    if secret == "":
        raise RuleError("signature validation secret can not be empty")
    signatures = extract_signatures(header, prefix)
    expected = hmac.new(_go_bytes(secret), body, digest).hexdigest().encode("ascii")
    # Check every candidate, so the time taken does not depend on which one matched.
    matched = False
    for signature in signatures:
        matched |= hmac.compare_digest(_go_bytes(signature), expected)
    if not matched:
        raise SignatureError(signatures=signatures, empty_payload=len(body) == 0)


def _check_scalr_signature(req: Request, secret: str) -> bool:
    signature = req.headers.get("X-Signature")
    date_header = req.headers.get("Date")
    if not isinstance(signature, str) or not isinstance(date_header, str):
        return False
    if secret == "":
        raise RuleError("signature validation signing key can not be empty")
    import hmac

    mac = hmac.new(_go_bytes(secret), req.body + _go_bytes(date_header), "sha1")
    if not hmac.compare_digest(_go_bytes(signature), mac.hexdigest().encode("ascii")):
        raise SignatureError(signature=signature)
    sent = parse_scalr_date(date_header)
    if abs(time.time() - sent) > 300:
        raise SignatureError(signature="outdated")
    return True


# --------------------------------------------------------------------------------------------------------
# IP ranges, with Go's net.ParseIP / ParseCIDR / IPNet.Contains semantics on raw bytes

# Go's strings.Fields splits on Unicode white space.
_FIELDS = re.compile(r"[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


def _parse_ip_ranges(ip_range: str) -> tuple[IPNet | str, ...]:
    # A bare address means /32, even an IPv6 one (which therefore matches a whole /32 network).
    return tuple(parse_cidr(r if "/" in r else r + "/32") for r in _FIELDS.split(ip_range) if r)


def _check_ip_whitelist(remote_addr: str, networks: tuple[IPNet | str, ...]) -> bool:
    host = remote_addr.strip(" []")
    colon = host.rfind(":")
    if colon != -1:
        host = host[:colon].strip(" []")
    ip = parse_ip(host)
    if ip is None:
        raise RuleError(f"invalid IP address found in remote address '{remote_addr}'")
    for net in networks:
        if isinstance(net, str):
            raise RuleError(net)
        if net_contains(net, ip):
            return True
    return False


# --------------------------------------------------------------------------------------------------------
# Decoding a trigger rule from a hooks file: ghodss/yaml, then encoding/json into webhook's structs.


_RULE_FIELDS = ("and", "or", "not", "match")
_MATCH_FIELDS = ("type", "regex", "secret", "value", "parameter", "ip-range")
_ARGUMENT_FIELDS = ("source", "name", "envname", "base64decode")
_RULE_GO_TYPES = {
    "and": "hook.AndRule", "or": "hook.OrRule", "not": "hook.NotRule", "match": "hook.MatchRule",
}


def _decode_rules(
    target: dict[str, Any], data: Mapping[Any, Any], path: str, struct_name: str = "Rules"
) -> None:
    """Decode one rules object into `target` (and/or/not/match drafts), merging as encoding/json does.

    `struct_name` is the Go type being filled, as error messages name it: a `not` object is a NotRule.
    """
    for name, value in fields(data, _RULE_FIELDS):
        where = f"{struct_name}.{path}.{name}"
        if value is None:
            target[name] = None
        elif name in ("and", "or"):
            if not isinstance(value, list | tuple):
                raise type_error(value, where, _RULE_GO_TYPES[name])
            old = target.get(name) or []
            new = []
            for index, item in enumerate(value):
                # Go decodes into the slice's existing elements before truncating it.
                element = old[index] if index < len(old) else {}
                if item is not None:
                    if not isinstance(item, Mapping):
                        raise type_error(item, where, "hook.Rules")
                    _decode_rules(element, item, f"{path}.{name}")
                new.append(element)
            target[name] = new
        elif not isinstance(value, Mapping):
            raise type_error(value, where, _RULE_GO_TYPES[name])
        elif name == "not":
            element = target.get("not") or {}
            _decode_rules(element, value, f"{path}.not", "NotRule")
            target["not"] = element
        else:
            element = target.get("match") or {}
            _decode_match(element, value, f"{path}.match")
            target["match"] = element


def _decode_match(target: dict[str, Any], data: Mapping[Any, Any], path: str) -> None:
    for name, value in fields(data, _MATCH_FIELDS):
        where = f"MatchRule.{path}.{name}"
        if name != "parameter":
            if value is not None:
                target[name] = go_string(value, where)
            continue
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise type_error(value, where, "hook.Argument")
        argument = target.setdefault("parameter", {})
        for arg_name, arg_value in fields(value, _ARGUMENT_FIELDS):
            arg_where = f"Argument.{path}.parameter.{arg_name}"
            if arg_name == "base64decode":
                argument[arg_name] = go_bool(arg_value, arg_where, argument.get(arg_name, False))
            elif arg_value is not None:
                argument[arg_name] = go_string(arg_value, arg_where)


def _build(draft: Mapping[str, Any]) -> Rule:
    # Evaluate uses the first of and, or, not, match that is set, in that order.
    if draft.get("and") is not None:
        return AndRule(tuple(_build(item) for item in draft["and"]))
    if draft.get("or") is not None:
        return OrRule(tuple(_build(item) for item in draft["or"]))
    if draft.get("not") is not None:
        return NotRule(_build(draft["not"]))
    match = draft.get("match")
    if match is not None:
        parameter = match.get("parameter", {})
        return MatchRule(
            type=match.get("type", ""),
            regex=match.get("regex", ""),
            secret=match.get("secret", ""),
            value=match.get("value", ""),
            parameter=shared_argument(
                parameter.get("source", ""),
                parameter.get("name", ""),
                parameter.get("envname", ""),
                parameter.get("base64decode", False),
            ),
            ip_range=match.get("ip-range", ""),
        )
    return EmptyRule()


def parse_rule(data: Mapping[str, Any] | None, path: str = "trigger-rule") -> Rule | None:
    """The rule tree for a hook's decoded `trigger-rule` value; None when there is no rule.

    `{}` gives a rule that is never satisfied. Keys match case-insensitively (`AND`, `Match`, `Type`).
    A value of the wrong JSON type raises HooksFileError with encoding/json's message, e.g.
    `json: cannot unmarshal string into Go struct field Rules.trigger-rule.and of type hook.AndRule`.
    """
    if data is None:
        return None
    rule = _plain_rule(data)
    if rule is not None:
        return rule
    if not isinstance(data, Mapping):
        raise type_error(data, f"Hook.{path}", "hook.Rules")
    draft: dict[str, Any] = {}
    _decode_rules(draft, data, path)
    return _build(draft)


_MATCH_NAMES = frozenset(_MATCH_FIELDS)
_ARGUMENT_NAMES = frozenset(_ARGUMENT_FIELDS)
_MATCH_STRINGS = ("type", "regex", "secret", "value", "ip-range")


def _plain_rule(data: Any) -> Rule | None:
    """The rule the decoding above gives `data` where that is plain: each object one key named exactly
    (`and`, `or`, `not`, `match`), a match's keys named exactly with strings (or null) for values, and
    nothing to merge, convert or refuse; built without drafts, as most files' rules are (10,000 hooks:
    ~40 ms less to load). None wherever the decoding has anything to decide."""
    if type(data) is not dict or len(data) != 1:
        return None
    ((name, value),) = data.items()
    if name == "match":
        return _plain_match(value)
    if name == "not":
        rule = _plain_rule(value)
        return None if rule is None else NotRule(rule)
    if (name == "and" or name == "or") and type(value) is list:
        rules = []
        for item in value:
            rule = _plain_rule(item)
            if rule is None:
                return None
            rules.append(rule)
        return AndRule(tuple(rules)) if name == "and" else OrRule(tuple(rules))
    return None


def _plain_match(data: Any) -> MatchRule | None:
    if type(data) is not dict or not data.keys() <= _MATCH_NAMES:
        return None
    parameter = data.get("parameter")
    if parameter is None:
        argument: Argument | None = shared_argument("", "")
    elif type(parameter) is dict and parameter.keys() <= _ARGUMENT_NAMES:
        argument = plain_argument(*map(parameter.get, _ARGUMENT_FIELDS))
    else:
        return None
    texts = tuple(map(data.get, _MATCH_STRINGS))
    if argument is None or not all(type(text) is str or text is None for text in texts):
        return None
    kind, regex, secret, value, ip_range = (text or "" for text in texts)
    return MatchRule(
        type=kind, regex=regex, secret=secret, value=value, parameter=argument, ip_range=ip_range
    )
