"""webhook's own template functions getenv, cat and credential, and that no others are defined."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookrunner.errors import TemplateError
from hookrunner.hooks.template import render_hooks_template


def test_getenv_reads_the_environment_at_render_time(monkeypatch: pytest.MonkeyPatch) -> None:
    text = '"secret": "{{ getenv "HR_TPL_UNIT" | js }}"'
    monkeypatch.setenv("HR_TPL_UNIT", 'a"b\\c<d>')
    assert render_hooks_template(text) == '"secret": "a\\"b\\\\c\\u003Cd\\u003E"'
    monkeypatch.delenv("HR_TPL_UNIT")
    assert render_hooks_template(text) == '"secret": ""'


def test_cat_cuts_one_trailing_newline(tmp_path: Path) -> None:
    (tmp_path / "one").write_text("pw\n")
    (tmp_path / "two").write_text("pw\n\n")
    text = '[{{cat "%s/one"}}][{{cat "%s/two"}}][{{cat "%s/absent"}}][{{cat "%s"}}]' % ((tmp_path,) * 4)
    assert render_hooks_template(text) == "[pw][pw\n][][]"


def test_credential_reads_the_credentials_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv("token", "from-env")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    assert render_hooks_template('{{credential "token"}}') == "from-env"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert render_hooks_template('{{credential "token"}}') == "from-file"
    assert render_hooks_template('[{{credential "absent"}}]') == "[]"


def test_no_other_functions_than_webhooks() -> None:
    for name in ("include", "env", "default", "toJson", "required"):
        with pytest.raises(TemplateError, match=f'function "{name}" not defined'):
            render_hooks_template("{{ " + name + " }}")
