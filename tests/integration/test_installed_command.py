"""The command under test is what users get: the built wheel, installed with its `postgres` extra and no other
into a venv of its own.

scripts/test builds the wheel and the sdist, installs the wheel into .local/installed and exports
HOOKRUNNER_BIN and HOOKRUNNER_DIST. With HOOKRUNNER_REQUIRE_INSTALLED set (.ci/run sets it) these tests must
run, so in CI a suite that exec'd the editable dev install, or a venv that a test tool had filled, fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]
DIST = os.environ.get("HOOKRUNNER_DIST", "")

if os.environ.get("HOOKRUNNER_REQUIRE_INSTALLED") and not (os.environ.get("HOOKRUNNER_BIN") and DIST):
    raise RuntimeError("HOOKRUNNER_REQUIRE_INSTALLED is set, but HOOKRUNNER_BIN and HOOKRUNNER_DIST are not")

pytestmark = pytest.mark.skipif(
    not (os.environ.get("HOOKRUNNER_BIN") and DIST),
    reason="no built artefact under test: run scripts/test, which builds and installs the wheel",
)

#: What a venv holds before anything is installed into it (pip; setuptools up to Python 3.11).
VENV_SEED = {"pip", "setuptools"}

# Run with the installed venv's own interpreter: where hookrunner is imported from, how it was installed, and
# every distribution in that venv with the requirements it declares.
INSPECT = """
import importlib.metadata as md, json, hookrunner
dist = md.distribution("hookrunner")
print(json.dumps({
    "module": hookrunner.__file__,
    "direct_url": dist.read_text("direct_url.json"),
    "installed": {d.metadata["Name"]: d.requires or [] for d in md.distributions()},
}))
"""


def installed_venv() -> Path:
    return Path(HOOKRUNNER_BIN).absolute().parent.parent


def inspect_install() -> dict[str, object]:
    python = installed_venv() / "bin" / "python"
    # -I: isolated, so the current folder (the checkout, with its hookrunner/) is not on sys.path.
    done = subprocess.run(
        [str(python), "-I", "-c", INSPECT], capture_output=True, text=True, timeout=60, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


#: The extras scripts/test installs the wheel with: psycopg, for the PostgreSQL run state's tests.
INSTALLED_EXTRAS = frozenset({"postgres"})


def closure(installed: dict[str, list[str]], root: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The distributions `root` (with `extras`) needs, following each requirement whose marker holds (extras
    as asked)."""
    requires = {canonicalize_name(name): reqs for name, reqs in installed.items()}
    needed: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(canonicalize_name(root), extras)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        needed.add(name)
        for text in requires.get(name, []):
            req = Requirement(text)
            if req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in (extras or frozenset({""}))
            ):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return needed


def test_the_command_is_not_the_test_environment() -> None:
    venv = installed_venv()
    assert (venv / "pyvenv.cfg").is_file(), f"{HOOKRUNNER_BIN} is not in a venv"
    assert venv.resolve() != Path(sys.prefix).resolve(), "the tests would exec the test venv's own hookrunner"


def test_hookrunner_is_a_regular_install_of_the_wheel() -> None:
    found = inspect_install()
    module = Path(str(found["module"])).resolve()
    assert installed_venv().resolve() in module.parents, f"hookrunner is imported from {module}"
    assert REPO_ROOT / "hookrunner" not in module.parents  # not the source tree
    direct_url = json.loads(str(found["direct_url"])) if found["direct_url"] else {}
    assert not direct_url.get("dir_info", {}).get("editable", False), direct_url


def test_the_venv_holds_only_what_hookrunner_declares() -> None:
    # Nothing may be importable only because a test tool pulled it in: every distribution in the venv is
    # hookrunner, a requirement reached from its own (extras of its requirements included, and the extra it was
    # installed with), or the venv's seed.
    installed: dict[str, list[str]] = inspect_install()["installed"]  # type: ignore[assignment]
    names = {canonicalize_name(name) for name in installed}
    needed = closure(installed, "hookrunner", INSTALLED_EXTRAS)
    assert names - needed - VENV_SEED == set()
    assert needed <= names  # pip check below says the same with versions; this names what is missing
    assert "pytest" not in names and "packaging" in needed  # the case that once hid a crash at start
    assert {"psycopg", "psycopg-binary"} <= needed  # the postgres extra, for the PostgreSQL run state's tests


def test_pip_check_is_clean() -> None:
    python = installed_venv() / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_artefacts_hold_every_module() -> None:
    sources = {
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / "hookrunner").rglob("*")
        if path.suffix == ".py" or path.name == "py.typed"
    }
    (wheel,) = Path(DIST).glob("hookrunner-*.whl")
    (sdist,) = Path(DIST).glob("hookrunner-*.tar.gz")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert sources - in_wheel == set()
    assert sources | {"pyproject.toml", "README.md"} <= in_sdist


def test_marker_evaluation_follows_extras() -> None:
    # closure() must not follow a requirement of an extra nobody asked for: gunicorn's `testing` extra pulls
    # pytest, which would hide exactly the missing dependency these tests are for.
    installed = {
        "app": ["lib[fast]>=1"],
        "lib": ['speedup; extra == "fast"', 'pytest; extra == "testing"', 'tomli; python_version < "3.0"'],
        "speedup": [],
        "pytest": [],
    }
    assert closure(installed, "app") == {"app", "lib", "speedup"}
    # An extra of the root itself is followed only when asked for.
    installed["app"].append('driver; extra == "db"')
    installed["driver"] = []
    assert closure(installed, "app") == {"app", "lib", "speedup"}
    assert closure(installed, "app", frozenset({"db"})) == {"app", "lib", "speedup", "driver"}
