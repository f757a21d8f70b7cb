"""The Go text/template engine: golden vectors recorded from Go, plus the hooks-file entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookrunner.errors import TemplateError
from hookrunner.gotemplate import WEBHOOK_FUNCS, Template

VECTORS_FILE = Path(__file__).parent / "data" / "gotemplate" / "vectors.json"
DOC = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = DOC["vectors"]
# Every variable any vector sets; each test starts with none of them, as the recorder did.
ENV_NAMES = sorted({k for v in VECTORS for k in v.get("env", {})} | {"CREDENTIALS_DIRECTORY"})


def run_vector(vector: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Render a vector as the recorder did; returns ("output", text) or ("error", message)."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in vector.get("env", {}).items():
        monkeypatch.setenv(name, value)
    for rel, content in vector.get("files", {}).items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    try:
        tmpl = Template.parse(vector["template"], "hooks", WEBHOOK_FUNCS)
        return "output", tmpl.execute(vector.get("data"))
    except TemplateError as err:
        return "error", str(err)


def test_vectors_file_is_from_go_and_large_enough() -> None:
    assert DOC["go_version"].startswith("go1.")
    assert len(VECTORS) >= 150
    assert sum("error" in v for v in VECTORS) >= 50
    assert sum("output" in v for v in VECTORS) >= 100


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_matches_go(vector: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kind, got = run_vector(vector, tmp_path, monkeypatch)
    if "output" in vector:
        assert (kind, got) == ("output", vector["output"])
    else:
        assert (kind, got) == ("error", vector["error"])
