"""Convert the Job sources in k8s/jobs/*.yaml into the JSON bodies reload.sh posts (etc/mkdocs-*.json)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO_ROOT / "k8s" / "jobs"
TARGET_DIR = REPO_ROOT / "etc"
JOB_NAMES = ("mkdocs-dev", "mkdocs-main")


def load_job(source: Path) -> dict[str, Any]:
    """Read one Job source; it must be a single YAML mapping."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected one YAML mapping, got {type(data).__name__}")
    return data


def render_job(job: dict[str, Any]) -> str:
    """The exact text of a generated JSON file, so that a byte comparison detects drift."""
    return json.dumps(job, indent=2) + "\n"


def expected_outputs(source_dir: Path = SOURCE_DIR, target_dir: Path = TARGET_DIR) -> dict[Path, str]:
    """Map each JSON target to the text the YAML source says it should hold."""
    return {
        target_dir / f"{name}.json": render_job(load_job(source_dir / f"{name}.yaml")) for name in JOB_NAMES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gen-jobs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="report stale JSON files instead of writing")
    args = parser.parse_args(argv)
    stale = 0
    for target, text in expected_outputs().items():
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        if args.check:
            print(f"gen-jobs: {target.relative_to(REPO_ROOT)} is out of date", file=sys.stderr)
            stale += 1
        else:
            target.write_text(text, encoding="utf-8")
            print(f"gen-jobs: wrote {target.relative_to(REPO_ROOT)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
