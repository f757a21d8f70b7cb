"""Go's text/template language for `-template` hooks files, split as Go splits text/template and its parse
package: literals, lex, nodes, numbers and parse (the parser); values, fmtfloat and printf (Go's fmt), funcs
(the built-in functions), exec (the executor and Template) and webhook (webhook's own functions and the
hooks-file rendering).

Checked against output and error text recorded from Go (tests/data/gotemplate/vectors.json)."""

from hookrunner.golang.template.exec import Template
from hookrunner.golang.template.webhook import WEBHOOK_FUNCS, render_hooks_template

__all__ = ["Template", "WEBHOOK_FUNCS", "render_hooks_template"]
