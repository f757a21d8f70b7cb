"""Trigger rules: and / or / not / match, with webhook's error semantics."""

# Interface filled in by the rules work:
#   class Rule: evaluate(req: Request) -> bool   raises ParameterNodeError, SignatureError, RuleError
#   parse_rule(data: Mapping[str, Any] | None) -> Rule | None
