"""Create a small local docs repository shaped like the served one: mkdocs/mkdocs.yml and mkdocs/docs/.

Branch `main` has the home page; branch `dev` adds a page that exists only there, so a build shows which
branch it came from. `--break-branch BRANCH` commits an mkdocs.yml that does not parse onto a branch of an
existing sample, so that the next build of that branch fails (docs/docs-rebuild.md, "Waiting for the build").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

DEV_ONLY_PAGE = "dev-only.md"
MKDOCS_YML = """\
site_name: Sample docs
theme:
  name: material
nav:
  - Home: index.md
"""
# A nav entry whose bracket is never closed: mkdocs stops with "error parsing the configuration file".
BROKEN_NAV_ENTRY = "  - [unclosed\n"


def _git(repo: Path, *args: str) -> None:
    # A fixed identity and no system or global config: the result must not depend on the host's git setup.
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Docs Sample",
        "GIT_AUTHOR_EMAIL": "docs@example.invalid",
        "GIT_COMMITTER_NAME": "Docs Sample",
        "GIT_COMMITTER_EMAIL": "docs@example.invalid",
    }
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)


def make_sample_repo(repo: Path) -> Path:
    """Initialise repo with branches main and dev; return its path."""
    docs = repo / "mkdocs" / "docs"
    docs.mkdir(parents=True)
    _git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "mkdocs" / "mkdocs.yml").write_text(MKDOCS_YML, encoding="utf-8")
    (docs / "index.md").write_text("# Sample docs\n\nBuilt from the repository by the rebuild job.\n")
    _git(repo, "add", "mkdocs")
    _git(repo, "commit", "--quiet", "-m", "Add the docs site")
    _git(repo, "switch", "--quiet", "--create", "dev")
    (docs / DEV_ONLY_PAGE).write_text("# Dev only\n\nThis page exists only on the dev branch.\n")
    (repo / "mkdocs" / "mkdocs.yml").write_text(MKDOCS_YML + "  - Dev only: dev-only.md\n", encoding="utf-8")
    _git(repo, "add", "mkdocs")
    _git(repo, "commit", "--quiet", "-m", "Draft a page on dev")
    _git(repo, "switch", "--quiet", "main")
    return repo


def break_branch(repo: Path, branch: str) -> None:
    """Commit onto `branch` an mkdocs.yml that does not parse; the checked-out branch is left as it was."""
    head = subprocess.run(
        ["git", "-C", str(repo), "symbolic-ref", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    _git(repo, "switch", "--quiet", branch)
    config = repo / "mkdocs" / "mkdocs.yml"
    config.write_text(config.read_text(encoding="utf-8") + BROKEN_NAV_ENTRY, encoding="utf-8")
    _git(repo, "commit", "--quiet", "--all", "-m", "Break mkdocs.yml")
    _git(repo, "switch", "--quiet", head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sample-repo", description=__doc__)
    parser.add_argument("path", type=Path, help="directory to create (must not exist, unless --break-branch)")
    parser.add_argument(
        "--break-branch", metavar="BRANCH", help="break mkdocs.yml on BRANCH of an existing sample"
    )
    args = parser.parse_args(argv)
    if args.break_branch:
        break_branch(args.path, args.break_branch)
        print(f"sample-repo: committed a broken mkdocs.yml on {args.break_branch} in {args.path}")
        return 0
    if args.path.exists():
        print(f"sample-repo: {args.path} already exists", file=sys.stderr)
        return 1
    make_sample_repo(args.path)
    print(f"sample-repo: created {args.path} (branches main and dev)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
