"""packaging/requirements.lock, what the Debian package bundles (docs/operations.md, "The Debian package"):
every distribution hookrunner needs, with every extra the package promises, is pinned there at a version
that meets each bound on it. No build is needed: the names are found by walking the requirements from
pyproject.toml through the distributions installed with hookrunner's test extra (which brings the
`postgres` extra), the markers read as on the package's Debian 12 (Python 3.11, Linux).

tests/packaging/test_debian_package.py builds the package and checks that it holds exactly the lock, and
that its hookrunner imports psycopg; this one fails at once, on any machine, when a dependency or an extra
is missing from the lock."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]

#: The extras of pyproject.toml that the package bundles: the PostgreSQL run state (-state-url).
PACKAGE_EXTRAS = ("postgres",)

#: Where the package's hookrunner runs: Debian 12's python3.11 on Linux.
DEBIAN_12 = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux"}
DEBIAN_12 |= {"platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython"}
DEBIAN_12 |= {"platform_python_implementation": "CPython"}


def lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (REPO_ROOT / "packaging" / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def applies(requirement: Requirement, extras: tuple[str, ...]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**DEBIAN_12, "extra": extra}) for extra in ("", *extras))


def needed() -> list[Requirement]:
    """Every requirement the package's hookrunner needs, its dependencies' own included (with their extras)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    todo = [Requirement(text) for text in project["dependencies"]]
    todo += [Requirement(text) for extra in PACKAGE_EXTRAS for text in extras[extra]]
    found: list[Requirement] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), tuple(sorted(requirement.extras)))
        found.append(requirement)
        if key in seen:
            continue
        seen.add(key)
        wanted = tuple(sorted(requirement.extras))
        for text in metadata.requires(requirement.name) or []:
            own = Requirement(text)
            if applies(own, wanted):
                todo.append(own)
    return found


def test_the_lock_pins_every_requirement_of_the_package_and_its_extras() -> None:
    pins = lock()
    requirements = needed()
    names = {canonicalize_name(requirement.name) for requirement in requirements}
    assert {"flask", "gunicorn", "gevent", "psycopg", "psycopg-binary"} <= names, names
    missing = sorted(names - set(pins))
    assert not missing, f"packaging/requirements.lock pins none of {missing}"
    unmet = [
        f"{requirement} (locked {pins[canonicalize_name(requirement.name)]})"
        for requirement in requirements
        if not requirement.specifier.contains(pins[canonicalize_name(requirement.name)], prereleases=True)
    ]
    assert not unmet, unmet


def test_the_lock_pins_nothing_the_package_does_not_need() -> None:
    """The build checks that pip added nothing to the lock; this, that the lock holds nothing unneeded."""
    needs = {canonicalize_name(requirement.name) for requirement in needed()}
    assert set(lock()) - needs == set()
