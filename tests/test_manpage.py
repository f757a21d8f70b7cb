"""`man hookrunner` (hookrunner/manpage.py): written from the flags table, rendered by man without a warning."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hookrunner import manpage
from hookrunner.flags import FLAGS, usage_text
from hookrunner.hooks.model import LIMIT_FIELDS


def test_every_flag_is_an_option_with_helps_usage_and_default() -> None:
    page = manpage.render("1.2.3", "2026-11-27")
    options = page.split(".SH OPTIONS\n", 1)[1].split(".SH ", 1)[0]
    names = re.findall(r"^\.BI? \\-(\S+)", options, re.MULTILINE)
    assert [name.replace("\\-", "-") for name in names] == sorted(flag.name for flag in FLAGS)
    for flag in FLAGS:
        text = manpage.escape(" ".join((flag.usage + flag.default_text()).split()))
        assert text in options, flag.name
    assert options.count(".I (hookrunner's own)") == sum(flag.extension for flag in FLAGS)


def test_the_page_names_every_hook_field_hookrunner_adds() -> None:
    fields = [field for field, _ in manpage.HOOK_FIELDS]
    assert set(LIMIT_FIELDS) <= set(fields)
    assert {"command-timeout", "replay", "stream-command-output"} <= set(fields)


def test_escape_keeps_roff_from_reading_the_text() -> None:
    assert manpage.escape("-a \\b") == "\\-a \\eb"
    assert manpage.escape(".TH x\n'y") == "\\&.TH x\n\\&'y"


def test_the_date_is_source_date_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1795708999")
    assert manpage.build_date() == "2026-11-26"


@pytest.mark.skipif(shutil.which("man") is None, reason="man (man-db) is not installed")
def test_man_renders_it_without_a_warning_and_lists_help(tmp_path: Path) -> None:
    source = tmp_path / "hookrunner.1"
    source.write_text(manpage.render("0.1.0", "2026-11-27"))
    done = subprocess.run(["man", "--warnings", "-l", str(source)], capture_output=True, text=True,
                          env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    for name in re.findall(r"^  -([a-z0-9-]+)", usage_text(), re.MULTILINE):
        assert re.search(rf"^\s+-{re.escape(name)}\b", done.stdout, re.MULTILINE), name
