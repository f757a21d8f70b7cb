"""README.md's install section and 30-second example, run as written in a copy of the checkout.

The steps are taken from the README itself, so the test fails when the README and the project drift apart.
Two changes a person at a terminal does not need: port 9000 becomes a free one (a developer may be running
scripts/dev), and the script waits for the server between starting it with `&` and the first curl.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from integration_harness import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.slow


def section_block(heading: str) -> str:
    """The first ```sh block under a level-2 heading."""
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, f"no sh block under '## {heading}'"
    return match.group(1)


def copy_of_checkout(dest: Path) -> Path:
    """The files a clone has (tracked, and new ones git does not ignore), as they are in the work tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():  # a file deleted in the work tree is still listed as tracked
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    return dest


def test_install_section_and_example_work_as_written(tmp_path: Path) -> None:
    install, example = section_block("Install"), section_block("A 30-second example")
    expected = re.findall(r"# -> (.*)$", example, re.M)
    assert expected == ["world", "Hook rules were not satisfied."]

    port = str(free_port())
    wait = f"for _ in $(seq 150); do curl -s -o /dev/null http://127.0.0.1:{port}/ && break; sleep 0.2; done\n"
    example = example.replace(":9000/", f":{port}/")
    example = re.sub(r"^(venv/bin/hookrunner .*) &\n", rf"\1 -port {port} &\n{wait}", example, flags=re.M)
    assert wait in example

    clone = copy_of_checkout(tmp_path / "hookrunner")
    done = subprocess.run(
        ["bash", "-e", "-c", install + example], cwd=clone, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()  # pip's own lines come first
    version = "hookrunner version 0.1.0 (webhook 2.8.2 compatible)"
    assert version in lines
    assert lines[lines.index(version) + 1 :] == expected
    assert (clone / "venv" / "bin" / "hookrunner").is_file()
    assert "serving hooks on" in done.stderr  # -verbose logs to stderr, as webhook's log package does
