"""Go's text/template language, split as Go splits text/template and its parse package: literals, lex,
nodes, numbers and parse (the parser); values, fmtfloat and printf (Go's fmt), funcs (the built-in
functions) and exec (the executor and Template). webhook's own functions and its rendering of hooks files
are the hook engine's (hooks/template.py).

Checked against output and error text recorded from Go (tests/data/gotemplate/vectors.json)."""

from hookrunner.golang.template.exec import Template

__all__ = ["Template"]
