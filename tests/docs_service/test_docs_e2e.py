"""The whole path: a push over HTTP to hookrunner, reload.sh, the batch-API stand-in, a real mkdocs build."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from command_under_test import HOOKRUNNER_BIN
from docs_support import (
    ETC,
    REPO_ROOT,
    SERVED_REPOSITORY,
    Standin,
    kube_env,
    make_sample_repo,
    start_standin,
    stop,
    wait_for,
    wait_serving,
    write_private,
)

HOOKRUNNER = Path(HOOKRUNNER_BIN)
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


def start_receiver(
    hooks: Path, log_path: Path, env: dict[str, str], extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """Start hookrunner as /app/webhook is started in the image: a link named webhook, the Deployment's
    own arguments, plus loopback-only binding on a free port. Returns the process and its base URL."""
    app = log_path.parent / f"app-{log_path.stem}"
    app.mkdir()
    (app / "webhook").symlink_to(HOOKRUNNER)
    port = free_port()
    argv = [str(app / "webhook"), f"-hooks={hooks}", "-hotreload", "-verbose", *extra]
    argv += ["-ip", "127.0.0.1", "-port", str(port)]
    with open(log_path, "wb") as log:
        receiver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_serving(receiver, port, 30, "hookrunner", log_path)
    except BaseException:
        stop(receiver)
        raise
    return receiver, f"http://127.0.0.1:{port}"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    repo = tmp_path / "docs-repo"
    make_sample_repo(repo)
    standin = start_standin(tmp_path / "kube", repo=repo, run_jobs=True)
    try:
        receiver_log = tmp_path / "receiver.log"
        receiver, base = start_receiver(local_etc(tmp_path / "etc"), receiver_log, kube_env(standin))
    except BaseException:
        stop(standin.proc)
        raise
    try:
        yield Stack(standin, f"{base}/hooks/rebuild-docs", receiver_log)
    finally:
        stop(receiver)
        stop(standin.proc)


def push(
    target: Stack | str, ref: str, *, event: str = "push", repository: str = SERVED_REPOSITORY
) -> requests.Response:
    """POST a push notification shaped like GitHub's to a stack's hook or to a hook URL."""
    url = target.hook_url if isinstance(target, Stack) else target
    return requests.post(
        url,
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


def interruptible() -> None:
    """Ctrl-C reaches scripts/dev as in a terminal, even when the tests were started with SIGINT ignored
    (`nohup ... &`): bash cannot trap a signal it was started with ignored, and its Ctrl-C was lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_scripts_dev_walk_through(tmp_path: Path) -> None:
    """scripts/dev as a user runs it: start, curl a push, find the built site, Ctrl-C, nothing left over."""
    port = free_port()
    env = {**os.environ, "WEBHOOK_PORT": str(port), "DEV_ROOT": str(tmp_path)}
    output = tmp_path / "dev.out"
    with open(output, "wb") as out:
        dev = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "dev")], env=env, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=interruptible,
        )
    try:
        wait_serving(dev, port, 60, "scripts/dev", output)
        children = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(dev.pid)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert len(children) == 2, "the stand-in and the receiver"
        answer = push(f"http://127.0.0.1:{port}/hooks/rebuild-docs", "refs/heads/dev")
        assert answer.text == "payload received"
        page = tmp_path / "site" / "dev" / "dev-only" / "index.html"
        wait_for(page.exists, 120, f"the dev site; scripts/dev said:\n{output}")
        wait_for(lambda: "succeeded" in output.read_text(), 30, "the job to be reported")
        assert DEV_ONLY_TEXT in page.read_text(encoding="utf-8")
        assert oct((tmp_path / "dev" / "serviceaccount" / "token").stat().st_mode & 0o777) == oct(0o600)
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(timeout=30)
    assert code == 130
    for pid in children:
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, f"child {pid} to be stopped")


def documented_clause(marker: str) -> dict[str, Any]:
    """The YAML block that follows <!-- marker --> in docs/docs-rebuild.md."""
    text = (REPO_ROOT / "docs" / "docs-rebuild.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker} -->\n```yaml\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/docs-rebuild.md has no {marker} block"
    [clause] = yaml.safe_load(found.group(1))
    result: dict[str, Any] = clause
    return result


def hooks_with_clause(tmp_path: Path, clause: dict[str, Any]) -> Path:
    """etc/ copied locally, with the clause added to the rule's `and` as the docs say to."""
    hooks_file = local_etc(tmp_path / "etc")
    hooks = yaml.safe_load(hooks_file.read_text(encoding="utf-8"))
    hooks[0]["trigger-rule"]["and"].append(clause)
    hooks_file.write_text(yaml.safe_dump(hooks, sort_keys=False), encoding="utf-8")
    return hooks_file


@pytest.mark.parametrize(
    ("marker", "header", "digest", "secret_from"),
    [
        ("signature-sha1", "X-Hub-Signature", hashlib.sha1, "hooks file"),
        ("signature-sha256", "X-Hub-Signature-256", hashlib.sha256, "environment"),
        ("signature-sha256-credential", "X-Hub-Signature-256", hashlib.sha256, "credentials directory"),
    ],
)
def test_documented_signature_clause_works(
    tmp_path: Path, marker: str, header: str, digest: Any, secret_from: str
) -> None:
    secret = os.urandom(16).hex()
    clause = documented_clause(marker)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if secret_from == "hooks file":
        assert clause["match"]["secret"] == "<SIGNING_SECRET>"
        clause["match"]["secret"] = secret
    elif secret_from == "environment":
        env["GITHUB_WEBHOOK_SECRET"] = secret
    else:
        credentials = tmp_path / "credentials"
        write_private(credentials / "github-webhook-secret", secret)
        env["CREDENTIALS_DIRECTORY"] = str(credentials)
        # Set but wrong: proves the file, not the environment fallback, supplied the secret.
        env["github-webhook-secret"] = "not-this-one"
    template = secret_from != "hooks file"
    receiver, base = start_receiver(
        hooks_with_clause(tmp_path, clause),
        tmp_path / "receiver.log",
        env,
        ("-template",) if template else (),
    )
    try:
        url = f"{base}/hooks/rebuild-docs"
        # A tag push: the rule decides, and reload.sh then skips without needing an API.
        body = json.dumps(
            {
                "ref": "refs/tags/v1",
                "repository": {"full_name": SERVED_REPOSITORY},
                "pusher": {"name": "someone"},
            }
        ).encode()
        prefix = "sha256=" if digest is hashlib.sha256 else "sha1="
        good = prefix + hmac.new(secret.encode(), body, digest).hexdigest()
        bad = prefix + hmac.new(b"wrong", body, digest).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": "push"}
        signed = requests.post(url, data=body, headers={**headers, header: good}, timeout=10)
        assert (signed.status_code, signed.text) == (200, "payload received")
        forged = requests.post(url, data=body, headers={**headers, header: bad}, timeout=10)
        assert forged.status_code == 500
        assert forged.text == "Error occurred while evaluating hook rules."
        unsigned = requests.post(url, data=body, headers=headers, timeout=10)
        assert unsigned.text != "payload received"
    finally:
        stop(receiver)


def test_configmap_update_is_picked_up_without_a_restart(tmp_path: Path) -> None:
    """The hot-reload update path: the kubelet swaps the ..data symlink of the ConfigMap mount in place."""
    mount = tmp_path / "etc-webhook"
    mount.mkdir()

    def publish(version: str, served: str) -> None:
        data = mount / f"..{version}"
        shutil.copytree(ETC, data)
        hooks = (data / "hooks.yaml").read_text(encoding="utf-8").replace("/etc/webhook", str(mount))
        (data / "hooks.yaml").write_text(hooks.replace(SERVED_REPOSITORY, served), encoding="utf-8")
        link = mount / "..data_tmp"
        link.symlink_to(data.name)
        os.replace(link, mount / "..data")

    publish("v1", SERVED_REPOSITORY)
    for name in ("hooks.yaml", "reload.sh", "mkdocs-dev.json", "mkdocs-main.json"):
        (mount / name).symlink_to(f"..data/{name}")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    receiver, base = start_receiver(mount / "hooks.yaml", tmp_path / "receiver.log", env)
    try:
        url = f"{base}/hooks/rebuild-docs"
        assert push(url, "refs/tags/v1").text == "payload received"
        publish("v2", "example-org/handbook")
        shutil.rmtree(mount / "..v1")  # the kubelet removes the old version once the link has moved

        def reloaded() -> bool:
            return push(url, "refs/tags/v1", repository="example-org/handbook").text == "payload received"

        wait_for(reloaded, 30, "hookrunner to reload hooks.yaml after the ..data swap")
        assert push(url, "refs/tags/v1").text == "Hook rules were not satisfied."
        assert receiver.poll() is None, "the receiver restarted or died"
    finally:
        stop(receiver)
