"""The Containerfile, checked without a container engine: its structure and the repo paths it names."""

from __future__ import annotations

import json
import re
import tomllib

from docs_support import REPO_ROOT

CONTAINERFILE = REPO_ROOT / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuation lines joined."""
    joined: list[str] = []
    pending = ""
    for raw in CONTAINERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the file ends inside a continuation"
    result = []
    for line in joined:
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def args_of(keyword: str) -> list[str]:
    return [rest for kw, rest in instructions() if kw == keyword]


def test_known_instructions_only() -> None:
    known = {"FROM", "ENV", "RUN", "WORKDIR", "COPY", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ARG", "LABEL"}
    assert {kw for kw, _ in instructions()} <= known
    assert [kw for kw, _ in instructions() if kw != "ARG"][0] == "FROM"


def test_base_is_a_build_argument_defaulting_to_a_pinned_slim_python() -> None:
    # scripts/image passes a locally made base; users get the public image.
    assert args_of("FROM") == ["${BASE}"]
    assert instructions()[0] == ("ARG", "BASE=python:3.12-slim-bookworm")
    base = instructions()[0][1].split("=", 1)[1]
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minor = int(base.split(":")[1].split("-")[0].split(".")[1])
    assert requires == ">=3.11" and minor >= 11


def test_copied_paths_exist_in_the_repo() -> None:
    copies = args_of("COPY")
    assert copies
    for rest in copies:
        *sources, _destination = rest.split()
        assert not [s for s in sources if s.startswith("--")], "no --from or --chown expected"
        for source in sources:
            assert (REPO_ROOT / source).exists(), f"COPY names {source}, which is not in the repository"
    copied = {s for rest in copies for s in rest.split()[:-1]}
    # Everything pip needs to install the package from the build context.
    assert {"pyproject.toml", "hookrunner"} <= copied
    readme = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"].get("readme")
    if readme:
        assert readme in copied, "pyproject names a readme that the image build would lack"


def test_app_webhook_runs_hookrunner() -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hookrunner"] == "hookrunner.cli:main"
    runs = " ".join(args_of("RUN"))
    assert "ln -s /opt/venv/bin/hookrunner /app/webhook" in runs
    # With the postgres extra: the PostgreSQL run state's driver (issue 33).
    assert (
        "python3 -m venv /opt/venv && /opt/venv/bin/pip install '/src[postgres]' && rm -rf /src"
        in " ".join(runs.split())
    )
    assert not [w for w in args_of("WORKDIR") if w.startswith("/src")], "a WORKDIR would recreate /src"
    assert json.loads(args_of("ENTRYPOINT")[-1]) == ["/app/webhook"]
    assert json.loads(args_of("CMD")[-1]) == ["-hooks=/etc/webhook/hooks.yaml", "-hotreload", "-verbose"]


def test_curl_is_installed_for_reload_sh() -> None:
    runs = " ".join(args_of("RUN"))
    assert re.search(r"apt-get install -y --no-install-recommends [^&]*\bcurl\b", runs)
    assert "rm -rf /var/lib/apt/lists/*" in runs


def test_runs_as_a_numeric_non_root_user() -> None:
    keywords = [kw for kw, _ in instructions()]
    users = args_of("USER")
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    # No RUN after the switch: everything root needs happens before it.
    assert "RUN" not in keywords[len(keywords) - keywords[::-1].index("USER") :]
    assert f"--uid {uid}" in " ".join(args_of("RUN"))


def test_exposes_9000() -> None:
    assert args_of("EXPOSE") == ["9000"]
