"""-template: a hooks file rendered as webhook renders it, by Go's text/template (golang/template/) with nil
data and webhook's own functions, getenv, cat and credential."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable

from hookrunner.golang.template.exec import Template


def getenv(name: str) -> str:
    """The environment variable NAME, or "" when unset."""
    return os.environ.get(name, "")


def cat(path: str) -> str:
    """The text of a file with one trailing newline cut, or "" if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except (OSError, ValueError):
        return ""
    text = data.decode("utf-8", "surrogateescape")
    return text[:-1] if text.endswith("\n") else text


def credential(name: str) -> str:
    """systemd's LoadCredential: $CREDENTIALS_DIRECTORY/NAME, or the environment variable NAME without it."""
    directory = getenv("CREDENTIALS_DIRECTORY")
    if directory == "":
        return getenv(name)
    return cat(posixpath.join(directory, name))


WEBHOOK_FUNCS: dict[str, Callable[[str], str]] = {"cat": cat, "credential": credential, "getenv": getenv}
def render_hooks_template(text: str, name: str = "hooks") -> str:
    """Render a hooks file as webhook's -template does: Go text/template, nil data, getenv/cat/credential."""
    return Template.parse(text, name, WEBHOOK_FUNCS).execute(None)
