"""Why a hook's trigger rule was not satisfied: the deciding clauses, their parameters and the values seen.

Secrets never appear: a signature's value is `<redacted>`, a `value` match's configured value is never
shown, credential-looking parameters are redacted, and any text that contains a secret or a configured
value of the rule is redacted as a last guard. Long values are cut short.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hookrunner.errors import HookrunnerError, ParameterNodeError, SignatureError
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.hooks.params import argument_value
from hookrunner.hooks.request import Request
from hookrunner.hooks.rules import (
    DEPRECATED_TWINS,
    MATCH_IP_WHITELIST,
    MATCH_REGEX,
    MATCH_SCALR_SIGNATURE,
    MATCH_VALUE,
    SIGNATURE_TYPES,
    AndRule,
    EmptyRule,
    MatchRule,
    NotRule,
    OrRule,
    Rule,
)

REDACTED = "<redacted>"
#: Values longer than this many characters are cut (the log is for people, not for payloads).
MAX_VALUE_CHARS = 80
#: A rule with dozens of alternatives would make an unreadable line; the rest is counted.
MAX_CLAUSES = 8

#: Parameters whose name says they carry a credential: their value is never shown.
_CREDENTIAL_WORDS = (
    "token", "secret", "signature", "password", "passwd", "authorization", "api-key", "apikey"
)


@dataclass(frozen=True)
class Clause:
    """One leaf that decided the outcome: where it is in the rule, what it read, and why it decided."""

    path: str  # e.g. `and[1].or[0].match`
    type: str  # the match type, or `{}` for an empty rule
    parameter: str  # `source:name`, `request:remote-addr` for ip-whitelist, "" when there is none
    value: str | None  # the value seen, quoted, redacted and cut; None when nothing was read
    reason: str
    leaf_id: int = dataclasses.field(default=0, compare=False, repr=False)

    def text(self) -> str:
        out = f"{self.path} {self.type}"
        if self.parameter:
            out += f" {self.parameter}"
        if self.value is not None:
            out += f" saw {self.value}"
        return f"{out}: {self.reason}"


def explain(rule: Rule, req: Request) -> list[Clause]:
    """The clauses that made `rule` false for `req` (an `and` stops at one, an `or` lists them all)."""
    renamed: dict[int, str] = {}
    quiet = _quiet(rule, renamed)
    secrets = sorted(_secrets(rule), key=len, reverse=True)
    clauses = _why_false(quiet, req, "")
    # Show the type as the hooks file spells it, not the quiet twin it was evaluated as.
    clauses = [dataclasses.replace(c, type=renamed.get(c.leaf_id, c.type)) for c in clauses]
    return [_guard(clause, secrets) for clause in clauses]


def explanation_text(hook_id: str, clauses: list[Clause]) -> str:
    """The one log line added after webhook's `... the trigger rules were not satisfied` line."""
    shown = [clause.text() for clause in clauses[:MAX_CLAUSES]]
    if len(clauses) > MAX_CLAUSES:
        shown.append(f"and {len(clauses) - MAX_CLAUSES} more clause(s)")
    return f"{hook_id} trigger rules not satisfied because: " + "; ".join(shown)


# --- walking the rule -------------------------------------------------------------------------------


def _join(path: str, step: str) -> str:
    return f"{path}.{step}" if path else step


def _why_false(rule: Rule, req: Request, path: str) -> list[Clause]:
    if isinstance(rule, AndRule):
        for index, sub in enumerate(rule.rules):
            ok, error = sub.check(req)
            if error is not None or not ok:  # the first clause that stopped the `and`
                return _why_false(sub, req, _join(path, f"and[{index}]"))
        return []
    if isinstance(rule, OrRule):
        out: list[Clause] = []
        for index, sub in enumerate(rule.rules):
            out += _why_false(sub, req, _join(path, f"or[{index}]"))
        return out
    if isinstance(rule, NotRule):
        ok, error = rule.rule.check(req)
        step = _join(path, "not")
        if error is not None:
            # `not` passes its clause's error along; the error, not the result, decided.
            return _why_false(rule.rule, req, step)
        return _why_true(rule.rule, req, step) if ok else []
    if isinstance(rule, MatchRule):
        return [_leaf(rule, req, _join(path, "match"), negated=False)]
    if isinstance(rule, EmptyRule):
        return [Clause(path or "rule", "{}", "", None, "an empty rule is never satisfied")]
    return [Clause(path or "rule", type(rule).__name__, "", None, "not satisfied")]


def _why_true(rule: Rule, req: Request, path: str) -> list[Clause]:
    """Why a clause under a `not` was satisfied (so the `not` was false)."""
    if isinstance(rule, AndRule):
        out: list[Clause] = []
        for index, sub in enumerate(rule.rules):
            out += _why_true(sub, req, _join(path, f"and[{index}]"))
        return out
    if isinstance(rule, OrRule):
        for index, sub in enumerate(rule.rules):
            ok, _ = sub.check(req)
            if ok:
                return _why_true(sub, req, _join(path, f"or[{index}]"))
        return []
    if isinstance(rule, NotRule):
        return _why_false(rule.rule, req, _join(path, "not"))
    if isinstance(rule, MatchRule):
        return [_leaf(rule, req, _join(path, "match"), negated=True)]
    return []


def _leaf(rule: MatchRule, req: Request, path: str, negated: bool) -> Clause:
    ok, error = rule.check(req)
    kind = rule.type
    if kind == MATCH_IP_WHITELIST:
        return Clause(
            path, kind, "request:remote-addr", _show(req.remote_addr),
            _reason(ok, error, negated, f"not in {go_quote(rule.ip_range)}"),
        )
    if kind == MATCH_SCALR_SIGNATURE:
        return Clause(
            path, kind, "header:X-Signature", REDACTED,
            _reason(ok, error, negated, "the X-Signature or Date header is missing"),
        )
    parameter = f"{rule.parameter.source}:{rule.parameter.name}"
    leaf_id = id(rule)
    try:
        seen: str | None = argument_value(rule.parameter, req)
    except HookrunnerError:
        seen = None
    if seen is None:
        shown = None
    elif kind in SIGNATURE_TYPES or _looks_like_credential(rule.parameter.name):
        shown = REDACTED
    elif kind == MATCH_VALUE and ok:
        shown = REDACTED  # equal to the configured value, which is never shown
    else:
        shown = _show(seen)
    if kind == MATCH_VALUE:
        mismatch = "not the configured value"
    elif kind == MATCH_REGEX:
        mismatch = f"no match for regex {go_quote(rule.regex)}"
    else:
        mismatch = f"unknown match type {go_quote(kind)}"
    return Clause(path, kind, parameter, shown, _reason(ok, error, negated, mismatch), leaf_id)


def _reason(ok: bool, error: HookrunnerError | None, negated: bool, mismatch: str) -> str:
    if isinstance(error, ParameterNodeError):
        return "parameter not found"
    if isinstance(error, SignatureError):
        return "signature mismatch"
    if error is not None:
        return f"error: {error}"
    if ok:
        return "matched, and a `not` above negates it" if negated else "matched"
    return mismatch


def _looks_like_credential(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _CREDENTIAL_WORDS)


def _show(value: str) -> str:
    # Keep non-UTF-8 bytes (carried as surrogates) printable; Go's %q escapes them.
    if len(value) > MAX_VALUE_CHARS:
        return f"{go_quote(value[:MAX_VALUE_CHARS])}... ({len(value)} chars)"
    return go_quote(value)


# --- redaction and quiet evaluation -------------------------------------------------------------------


def _secrets(rule: Rule) -> set[str]:
    """Every secret, and every configured `value`, in the rule: none of them may reach the log."""
    found: set[str] = set()
    if isinstance(rule, AndRule | OrRule):
        for sub in rule.rules:
            found |= _secrets(sub)
    elif isinstance(rule, NotRule):
        found |= _secrets(rule.rule)
    elif isinstance(rule, MatchRule):
        for text in (rule.secret, rule.value if rule.type == MATCH_VALUE else ""):
            if text:
                found.add(text)
    return found


def _guard(clause: Clause, secrets: list[str]) -> Clause:
    """Redact any appearance of a secret in what the clause would print (a last line of defence)."""
    changes: dict[str, Any] = {}
    for name in ("value", "reason", "parameter"):
        text = getattr(clause, name)
        if text is None:
            continue
        for secret in secrets:
            if name != "value" and len(secret) < 4:
                continue  # a very short secret would mangle names and patterns that merely contain it
            if secret in text or go_quote(secret)[1:-1] in text:
                text = text.replace(secret, REDACTED).replace(go_quote(secret)[1:-1], REDACTED)
        changes[name] = text
    return dataclasses.replace(clause, **changes)


def _quiet(rule: Rule, renamed: dict[int, str]) -> Rule:
    """The same rule, with deprecated payload-hash-* leaves renamed so re-evaluating does not log again.

    `renamed` receives the id of each renamed leaf and its original type.
    """
    if isinstance(rule, AndRule | OrRule):
        subs = tuple(_quiet(sub, renamed) for sub in rule.rules)
        if all(a is b for a, b in zip(subs, rule.rules, strict=True)):
            return rule
        return dataclasses.replace(rule, rules=subs)
    if isinstance(rule, NotRule):
        sub = _quiet(rule.rule, renamed)
        return rule if sub is rule.rule else dataclasses.replace(rule, rule=sub)
    if isinstance(rule, MatchRule) and rule.type in DEPRECATED_TWINS:
        # The deprecated names evaluate as their payload-hmac-* twins, which do not log a warning.
        twin = dataclasses.replace(rule, type=DEPRECATED_TWINS[rule.type])
        renamed[id(twin)] = rule.type
        return twin
    return rule
