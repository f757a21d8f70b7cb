"""etc/hooks.yaml and the two build Jobs: the seed's fields, YAML/JSON sync, and one served repository."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from docs_support import ETC, REPO_ROOT, SERVED_CLONE_URL, SERVED_REPOSITORY

JOB_SOURCES = REPO_ROOT / "k8s" / "jobs"
JOBS = {"mkdocs-dev": ("dev", "dev"), "mkdocs-main": ("prod", "main")}  # file -> (namespace, branch)


def load_json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ETC / f"{name}.json").read_text(encoding="utf-8"))
    return data


def container(job: dict[str, Any]) -> dict[str, Any]:
    [only] = job["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def test_hook_is_the_seeds_field_for_field() -> None:
    hooks = yaml.safe_load((ETC / "hooks.yaml").read_text(encoding="utf-8"))
    assert hooks == [
        {
            "id": "rebuild-docs",
            "execute-command": "/etc/webhook/reload.sh",
            "command-working-directory": "/etc/webhook",
            "response-message": "payload received",
            "response-headers": [{"name": "Access-Control-Allow-Origin", "value": "*"}],
            "pass-arguments-to-command": [
                {"source": "payload", "name": "ref"},
                {"source": "payload", "name": "repository.full_name"},
            ],
            "trigger-rule": {
                "and": [
                    {
                        "match": {
                            "type": "value",
                            "value": "push",
                            "parameter": {"source": "header", "name": "X-GitHub-Event"},
                        }
                    },
                    {
                        "match": {
                            "type": "value",
                            "value": SERVED_REPOSITORY,
                            "parameter": {"source": "payload", "name": "repository.full_name"},
                        }
                    },
                ]
            },
        }
    ]


def test_one_served_repository_everywhere() -> None:
    """The placeholder repository is the one thing to change; every place naming it must agree."""
    hook = yaml.safe_load((ETC / "hooks.yaml").read_text(encoding="utf-8"))[0]
    assert hook["trigger-rule"]["and"][1]["match"]["value"] == SERVED_REPOSITORY
    reload_sh = (ETC / "reload.sh").read_text(encoding="utf-8")
    assert re.findall(r"^SERVED_REPOSITORY=(\S+)$", reload_sh, re.MULTILINE) == [SERVED_REPOSITORY]
    for name in JOBS:
        assert SERVED_CLONE_URL in container(load_json(name))["command"][2]


def test_json_is_in_sync_with_yaml() -> None:
    result = subprocess.run(
        [str(REPO_ROOT / "scripts" / "gen-jobs"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    for name in JOBS:
        source = yaml.safe_load((JOB_SOURCES / f"{name}.yaml").read_text(encoding="utf-8"))
        assert load_json(name) == source
        # The generator's exact layout, so a hand edit of the JSON shows up as drift too.
        assert (ETC / f"{name}.json").read_text(encoding="utf-8") == json.dumps(source, indent=2) + "\n"


def test_gen_jobs_reports_and_repairs_drift(tmp_path: Path) -> None:
    """gen-jobs on a scratch copy of the repo: an edited source makes --check fail until it is rerun."""
    for part in ("devstack", "k8s/jobs", "etc"):
        shutil.copytree(REPO_ROOT / part, tmp_path / part)
    source = tmp_path / "k8s" / "jobs" / "mkdocs-dev.yaml"
    source.write_text(
        source.read_text().replace("ttlSecondsAfterFinished: 600", "ttlSecondsAfterFinished: 60")
    )

    def gen_jobs(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        argv = [sys.executable, "-m", "devstack.gen_jobs", *args]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)

    stale = gen_jobs("--check")
    assert stale.returncode == 1
    assert stale.stderr.strip() == "gen-jobs: etc/mkdocs-dev.json is out of date"
    assert gen_jobs().returncode == 0
    assert (
        json.loads((tmp_path / "etc" / "mkdocs-dev.json").read_text())["spec"]["ttlSecondsAfterFinished"]
        == 60
    )
    assert gen_jobs("--check").returncode == 0


@pytest.mark.parametrize("name", sorted(JOBS))
def test_job_has_the_seeds_fields(name: str) -> None:
    namespace, branch = JOBS[name]
    job = load_json(name)
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    assert job["metadata"] == {"generateName": "mkdocs-builder-", "namespace": namespace}
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [
        {"name": "mkdocs-storage", "persistentVolumeClaim": {"claimName": "mkdocs-pvc"}}
    ]
    box = container(job)
    assert box["name"] == "mkdocs"
    assert re.fullmatch(r"squidfunk/mkdocs-material:\d+\.\d+\.\d+", box["image"]), (
        "pin the image to a release"
    )
    assert box["volumeMounts"] == [{"name": "mkdocs-storage", "mountPath": "/output"}]
    shell, flag, script = box["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    steps = [step.split() for step in script.split(" && ")]
    assert steps[0][:2] == ["git", "clone"]
    clone = steps[0][2:]
    assert clone[-2:] == [SERVED_CLONE_URL, "/docs"]
    options = clone[:-2]
    assert "--single-branch" in options
    assert options[options.index("--branch") + 1] == branch
    assert options[options.index("--depth") + 1] == "1"
    assert steps[1:] == [["cd", "/docs/mkdocs"], ["mkdocs", "build", "--site-dir", "/output"]]


def test_main_job_is_the_prod_analogue_of_the_dev_job() -> None:
    dev, main = load_json("mkdocs-dev"), load_json("mkdocs-main")
    analogue = copy.deepcopy(dev)
    analogue["metadata"]["namespace"] = "prod"
    script = container(analogue)["command"][2]
    assert script.count("--branch dev ") == 1
    container(analogue)["command"][2] = script.replace("--branch dev ", "--branch main ")
    assert analogue == main


@pytest.mark.parametrize("name", sorted(JOBS))
def test_job_is_valid_against_the_kubernetes_schema(name: str) -> None:
    kubernetes_validate.validate(load_json(name), kubernetes_validate.latest_version(), strict=True)


def test_strict_schema_check_catches_a_misspelt_field() -> None:
    """Guards the validation above: a typo must not pass unnoticed."""
    job = load_json("mkdocs-dev")
    job["spec"]["ttlSecondsAfterFinish"] = job["spec"].pop("ttlSecondsAfterFinished")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)


def test_etc_holds_the_seeds_files() -> None:
    """The ConfigMap dir: the seed's four files, plus the kustomization that builds webhook-etc from them."""
    files = {p.name for p in ETC.iterdir() if p.is_file()}
    assert files == {"hooks.yaml", "reload.sh", "mkdocs-dev.json", "mkdocs-main.json", "kustomization.yaml"}
    assert not [p for p in ETC.iterdir() if p.is_dir()]
    kustomization = yaml.safe_load((ETC / "kustomization.yaml").read_text(encoding="utf-8"))
    [generator] = kustomization["configMapGenerator"]
    assert generator["name"] == "webhook-etc"
    assert sorted(generator["files"]) == sorted(files - {"kustomization.yaml"})
