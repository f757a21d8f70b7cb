"""The whole path: a push over HTTP to hookrunner, reload.sh, the batch-API stand-in, a real mkdocs build."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from docs_support import (
    ETC,
    REPO_ROOT,
    SERVED_REPOSITORY,
    Standin,
    devstack_env,
    kube_env,
    start_standin,
    stop,
    wait_for,
)

HOOKRUNNER = Path(sys.executable).parent / "hookrunner"
DEV_ONLY_TEXT = "This page exists only on the dev branch."

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_etc(target: Path) -> Path:
    """A copy of etc/ with /etc/webhook pointed at the copy, as scripts/dev makes it."""
    shutil.copytree(ETC, target)
    hooks = target / "hooks.yaml"
    hooks.write_text(hooks.read_text(encoding="utf-8").replace("/etc/webhook", str(target)), encoding="utf-8")
    return hooks


@dataclass
class Stack:
    standin: Standin
    hook_url: str
    receiver_log: Path


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    repo = tmp_path / "docs-repo"
    subprocess.run(
        [sys.executable, "-m", "devstack.sample_repo", str(repo)],
        cwd=REPO_ROOT,
        env=devstack_env(),
        check=True,
    )
    standin = start_standin(tmp_path / "kube", repo=repo, run_jobs=True)
    hooks = local_etc(tmp_path / "etc")
    # Called as /app/webhook is in the image: a link named webhook, with the Deployment's own arguments.
    app = tmp_path / "app"
    app.mkdir()
    (app / "webhook").symlink_to(HOOKRUNNER)
    port = free_port()
    receiver_log = tmp_path / "receiver.log"
    argv = [
        str(app / "webhook"),
        f"-hooks={hooks}",
        "-hotreload",
        "-verbose",
        "-ip",
        "127.0.0.1",
        "-port",
        str(port),
    ]
    with open(receiver_log, "wb") as log:
        receiver = subprocess.Popen(argv, env=kube_env(standin), stdout=log, stderr=subprocess.STDOUT)

    def serving() -> bool:
        if receiver.poll() is not None:
            raise AssertionError(f"hookrunner exited early:\n{receiver_log.read_text()}")
        try:
            return requests.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        wait_for(serving, 30, "hookrunner to serve")
        yield Stack(standin, f"http://127.0.0.1:{port}/hooks/rebuild-docs", receiver_log)
    finally:
        stop(receiver)
        stop(standin.proc)


def push(
    stack: Stack, ref: str, *, event: str = "push", repository: str = SERVED_REPOSITORY
) -> requests.Response:
    return requests.post(
        stack.hook_url,
        json={"ref": ref, "repository": {"full_name": repository}, "pusher": {"name": "someone"}},
        headers={"X-GitHub-Event": event},
        timeout=10,
    )


def built_job(stack: Stack, namespace: str) -> dict[str, Any]:
    """Wait for the one Job of namespace to be created and to finish; return it."""
    jobs: list[dict[str, Any]] = []

    def created() -> bool:
        jobs[:] = [j for j in stack.standin.jobs() if j["metadata"]["namespace"] == namespace]
        return bool(jobs)

    wait_for(created, 30, f"a job in {namespace}; see the receiver log {stack.receiver_log}")
    assert len(jobs) == 1
    name = str(jobs[0]["metadata"]["name"])
    return stack.standin.wait_job_finished(namespace, name)


def test_push_to_dev_builds_the_dev_branch(stack: Stack) -> None:
    answer = push(stack, "refs/heads/dev")
    assert answer.status_code == 200
    assert answer.text == "payload received"
    assert answer.headers["Access-Control-Allow-Origin"] == "*"

    job = built_job(stack, "dev")
    name = job["metadata"]["name"]
    assert job["status"] == {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}, (
        stack.standin.job_log("dev", name)
    )
    site = stack.standin.site_root / "dev"
    assert "Sample docs" in (site / "index.html").read_text(encoding="utf-8")
    assert DEV_ONLY_TEXT in (site / "dev-only" / "index.html").read_text(encoding="utf-8")
    assert not (stack.standin.site_root / "prod").exists()
    # The clone was a shallow single-branch one, as the Job asks.
    checkout = stack.standin.state_dir / "jobs" / "dev" / name / "rootfs" / "docs"
    branches = subprocess.run(
        ["git", "-C", str(checkout), "branch", "-a", "--format=%(refname)"], capture_output=True, text=True
    )
    assert branches.stdout.split() == ["refs/heads/dev", "refs/remotes/origin/dev"]
    assert (checkout / ".git" / "shallow").exists()
    log = stack.receiver_log.read_text(encoding="utf-8")
    assert "created job mkdocs-builder-" in log and "in namespace dev (HTTP 201)" in log


def test_push_to_main_builds_prod_without_the_dev_page(stack: Stack) -> None:
    assert push(stack, "refs/heads/main").text == "payload received"
    job = built_job(stack, "prod")
    assert job["status"]["succeeded"] == 1
    site = stack.standin.site_root / "prod"
    assert (site / "index.html").is_file()
    assert not (site / "dev-only").exists()


def test_pushes_the_rule_or_the_script_turns_away_create_nothing(stack: Stack) -> None:
    not_push = push(stack, "refs/heads/dev", event="issues")
    assert not_push.text == "Hook rules were not satisfied."
    other_repo = push(stack, "refs/heads/dev", repository="someone-else/docs")
    assert other_repo.text == "Hook rules were not satisfied."
    # A tag named dev passes the rule (right event, right repo); reload.sh is what skips it.
    tag = push(stack, "refs/tags/dev")
    assert tag.text == "payload received"
    wait_for(
        lambda: "unsupported ref refs/tags/dev" in stack.receiver_log.read_text(encoding="utf-8"),
        30,
        "reload.sh to report the skipped tag",
    )
    assert stack.standin.jobs() == []


def test_scripts_dev_is_valid_bash() -> None:
    script = REPO_ROOT / "scripts" / "dev"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
