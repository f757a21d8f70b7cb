"""Hooks files read as webhook reads them: golden vectors recorded from Go's yaml.v2 (through ghodss/yaml,
webhook's decoder; scripts/gen-yaml-vectors), and a live seeded fuzz against it when Go is installed.

Each input must give the tree Go gives (keys as ghodss/yaml writes them, numbers compared exactly), or
fail where Go fails, with yaml.v2's own one-line message (the text webhook logs after `couldn't load hooks
from file! error converting YAML to JSON: `).
"""

from __future__ import annotations

import base64
import importlib.machinery
import importlib.util
import json
import math
import os
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from hookrunner.errors import HooksFileError
from hookrunner.golang.yaml import read_hooks_yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = json.loads((ROOT / "tests" / "data" / "yamlv2" / "vectors.json").read_text())
VECTORS: list[dict[str, str]] = DOC["vectors"]


class Unsupported(Exception):
    """What ghodss/yaml's JSON step refuses (json.Marshal of NaN or an infinity)."""


def canon(value: Any) -> Any:
    """A tree both sides can be compared in: types kept apart (True is not 1), numbers exact."""
    if isinstance(value, dict):
        return ("map", sorted((key, canon(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("seq", [canon(item) for item in value])
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise Unsupported(f"json: unsupported value: {value}")
        # Go writes a float64 that holds an integer as digits (2**64 as 18446744073709552000): compare
        # integers beyond 64 bits as the float64 they are.
        if isinstance(value, int) and not -(1 << 63) <= value < 1 << 64:
            value = float(value)
        return ("num", Fraction(value))
    if value is None:
        return ("null",)
    return ("str", value)


def hookrunner_reads(data: bytes) -> tuple[str, Any]:
    """("ok", tree) or ("error", message): hookrunner's reading of a hooks file's bytes."""
    try:
        return hookrunner_reads_tree(read_hooks_yaml(data))
    except HooksFileError as exc:
        return "error", str(exc)


def hookrunner_reads_tree(tree: Any) -> tuple[str, Any]:
    """A tree read from a file as hookrunner_reads() gives it: JSON's refusals (±Inf, NaN) an error."""
    try:
        return "ok", canon(tree)
    except Unsupported as exc:
        return "error", str(exc)


def go_reads(vector: dict[str, str]) -> tuple[str, Any]:
    if "error" in vector:
        return "error", vector["error"]
    return "ok", canon(json.loads(vector["json"]))


def agree(ours: tuple[str, Any], theirs: tuple[str, Any]) -> bool:
    return ours[0] == theirs[0] == "error" or ours == theirs


def test_vectors_cover_the_corpus() -> None:
    names = [vector["name"] for vector in VECTORS]
    assert len(names) == len(set(names))
    for group in ("tab/", "scalar/", "key/", "anchor/", "merge/", "dup/", "doc/", "bytes/", "deep/", "long/",
                  "json/", "file/", "fuzz/"):
        assert sum(name.startswith(group) for name in names) >= 3, group
    assert sum("error" in vector for vector in VECTORS) > 50  # failing alike is checked too


#: Inputs hookrunner still reads differently, each with why (docs/compatibility.md, "Hooks files").
#: strict: a fix makes the test fail until the entry goes.
KNOWN_DIVERGENCES = {
    "deep/flow-seq-500": "nesting deeper than PyYAML's recursion allows is refused (Go has no limit)",
    "deep/flow-map-500": "nesting deeper than PyYAML's recursion allows is refused (Go has no limit)",
    "deep/flow-seq-5000": "nesting deeper than PyYAML's recursion allows is refused (Go has no limit)",
    "deep/flow-map-5000": "nesting deeper than PyYAML's recursion allows is refused (Go has no limit)",
}


def _marks(vector: dict[str, str]) -> Any:
    reason = KNOWN_DIVERGENCES.get(vector["name"])
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(vector, id=vector["name"], marks=marks)


@pytest.mark.parametrize("vector", [_marks(vector) for vector in VECTORS])
def test_reads_as_yaml_v2(vector: dict[str, str]) -> None:
    data = base64.b64decode(vector["input"])
    ours, theirs = hookrunner_reads(data), go_reads(vector)
    assert agree(ours, theirs), f"{data[:200]!r}\nhookrunner: {str(ours)[:400]}\nGo: {str(theirs)[:400]}"


_INF = "±Inf and NaN are read as values; Go's refusal comes from encoding/json, after the YAML step"
_GO_KEY = "the key is refused, but Go's %#v of a collection key is not reproduced"
_ALIAS_FIRST = "PyYAML resolves an alias as it composes; yaml.v2's parser fails on what follows first"
_MARK = "libyaml reports the problem at another place (or as another problem) than PyYAML"

#: Error texts hookrunner still words differently from yaml.v2, each with why (strict, like the above).
KNOWN_ERROR_TEXT_DIVERGENCES = {
    **dict.fromkeys(["scalar/number-.inf", "scalar/number--.Inf", "scalar/number-+.INF", "scalar/number-.nan",
                     "scalar/number-.NaN", "fuzz/14/175", "fuzz/14/276", "fuzz/14/389"], _INF),
    **dict.fromkeys(["key/sequence", "key/mapping", "key/complex", "fuzz/14/313"], _GO_KEY),
    **dict.fromkeys(["fuzz/14/8", "fuzz/14/564"], _ALIAS_FIRST),
    **dict.fromkeys(["fuzz/14/207", "fuzz/14/435", "fuzz/14/458", "fuzz/14/504"], _MARK),
}


def _error_marks(vector: dict[str, str]) -> Any:
    reason = KNOWN_ERROR_TEXT_DIVERGENCES.get(vector["name"])
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(vector, id=vector["name"], marks=marks)


@pytest.mark.parametrize("vector", [_error_marks(vector) for vector in VECTORS if "error" in vector])
def test_error_text_is_yaml_v2s(vector: dict[str, str]) -> None:
    data = base64.b64decode(vector["input"])
    with pytest.raises(HooksFileError) as refused:
        read_hooks_yaml(data)
    assert str(refused.value) == f"error converting YAML to JSON: {vector['error']}", data[:200]


def _generator() -> Any:
    loader = importlib.machinery.SourceFileLoader("gen_yaml_vectors", str(ROOT / "scripts" / "gen-yaml-vectors"))
    spec = importlib.util.spec_from_loader("gen_yaml_vectors", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


LIVE_SEED = int(os.environ.get("HOOKRUNNER_YAML_FUZZ_SEED", "1414"))
LIVE_COUNT = 2000


#: A GOPATH holding webhook 2.8.0's vendored yaml.v2 and ghodss/yaml (see scripts/gen-yaml-vectors);
#: Debian's packaged versions read hooks files differently from the reference, so they are no oracle.
ORACLE_GOPATH = os.environ.get("HOOKRUNNER_YAMLV2_GOPATH", "")


@pytest.mark.skipif(
    shutil.which("go") is None or not ORACLE_GOPATH,
    reason="live oracle needs Go and HOOKRUNNER_YAMLV2_GOPATH (webhook 2.8.0's vendored libraries)",
)
def test_live_fuzz_against_go(tmp_path: Path) -> None:
    """Fresh seeded inputs through the oracle, built here with the reference's own libraries."""
    gen = _generator()
    binary = gen.build_oracle(tmp_path, ORACLE_GOPATH)
    inputs = gen.fuzz_inputs(LIVE_SEED, LIVE_COUNT)
    results = gen.run_oracle(binary, [data for _, data in inputs])
    failures = []
    for (name, data), result in zip(inputs, results, strict=True):
        ours, theirs = hookrunner_reads(data), go_reads(result)
        if not agree(ours, theirs):
            failures.append(f"{name} {data[:120]!r}: hookrunner {str(ours)[:200]} / Go {str(theirs)[:200]}")
    assert failures == [], f"{len(failures)} of {LIVE_COUNT} differ (seed {LIVE_SEED}):\n" + "\n".join(failures[:20])
