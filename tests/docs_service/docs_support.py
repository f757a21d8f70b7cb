"""Helpers for the docs-rebuild tests: a running batch-API stand-in and a way to run reload.sh.

A module of its own (not conftest.py) so that tests can import it by a name no other test dir uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ETC = REPO_ROOT / "etc"
RELOAD_SH = ETC / "reload.sh"


def deployment_args() -> list[str]:
    """The hookrunner container's arguments, as k8s/deployment.yaml gives them."""
    deployment = yaml.safe_load((REPO_ROOT / "k8s" / "deployment.yaml").read_text(encoding="utf-8"))
    [box] = deployment["spec"]["template"]["spec"]["containers"]
    return [str(arg) for arg in box["args"]]


def state_dir(args: list[str]) -> str:
    """The run journal's folder that these arguments name (-state-dir=DIR)."""
    [found] = [arg.split("=", 1)[1] for arg in args if arg.startswith("-state-dir=")]
    return found


def served_repository() -> str:
    """The repository the hook's rule serves; the tests follow it, so changing it everywhere keeps them green."""
    hooks = yaml.safe_load((ETC / "hooks.yaml").read_text(encoding="utf-8"))
    value: str = hooks[0]["trigger-rule"]["and"][1]["match"]["value"]
    return value


SERVED_REPOSITORY = served_repository()
SERVED_CLONE_URL = f"https://github.com/{SERVED_REPOSITORY}.git"


def devstack_env() -> dict[str, str]:
    """The environment for running devstack modules from the repository root."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def write_private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_serving(proc: subprocess.Popen[bytes], port: int, timeout: float, what: str, log: Path) -> None:
    """Wait until `proc` answers 200 on `/` at the port; fails at once, with its log, if it exits."""

    def serving() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited early:\n{log.read_text()}")
        try:
            return requests.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
        except (requests.ConnectionError, requests.Timeout):  # not listening yet; or listening, its worker
            return False  # still starting on a loaded machine: asked again until the wait's end

    wait_for(serving, timeout, f"{what} to serve")


def make_sample_repo(path: Path) -> None:
    """The sample docs repository (branches main and dev) at `path`, made by devstack.sample_repo."""
    subprocess.run(
        [sys.executable, "-m", "devstack.sample_repo", str(path)],
        cwd=REPO_ROOT,
        env=devstack_env(),
        check=True,
    )


@dataclass
class Standin:
    """A running kube-standin process and the files a client needs to talk to it."""

    proc: subprocess.Popen[bytes]
    port: int
    token_file: Path
    ca_file: Path
    state_dir: Path
    site_root: Path
    log_file: Path
    host: str = "127.0.0.1"
    sa_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.sa_dir = self.token_file.parent

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def api(self, path: str) -> dict[str, Any]:
        token = self.token_file.read_text(encoding="utf-8").strip()
        answer = requests.get(
            self.base_url + path,
            headers={"Authorization": f"Bearer {token}"},
            verify=str(self.ca_file),
            timeout=10,
        )
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result

    def jobs(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api("/apis/batch/v1/jobs")["items"]
        return items

    def wait_job_finished(self, namespace: str, name: str, timeout: float = 120) -> dict[str, Any]:
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
        finished: dict[str, Any] = {}

        def done() -> bool:
            job = self.api(path)
            if job["status"].get("succeeded") or job["status"].get("failed"):
                finished.update(job)
                return True
            return False

        wait_for(done, timeout, f"job {namespace}/{name} to finish")
        return finished

    def job_log(self, namespace: str, name: str) -> str:
        return (self.state_dir / "jobs" / namespace / name / "log").read_text(
            encoding="utf-8", errors="replace"
        )

    def output(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")


def start_standin(
    tmp: Path,
    *,
    namespaces: tuple[str, ...] = ("dev", "prod"),
    repo: Path | None = None,
    run_jobs: bool = False,
    host: str = "127.0.0.1",
    extra_args: tuple[str, ...] = (),
) -> Standin:
    """Start the stand-in with a fresh token and CA; the service-account dir is tmp/serviceaccount."""
    sa_dir = tmp / "serviceaccount"
    token_file = write_private(sa_dir / "token", "token-" + os.urandom(16).hex())
    ca_file = sa_dir / "ca.crt"
    port_file = tmp / "standin.port"
    log_file = tmp / "standin.log"
    argv = [
        sys.executable, "-m", "devstack.kube_standin",
        "--token-file", str(token_file),
        "--ca-out", str(ca_file),
        "--port-file", str(port_file),
        "--state-dir", str(tmp / "state"),
        "--site-root", str(tmp / "site"),
        "--host", host,
    ]  # fmt: skip
    for namespace in namespaces:
        argv += ["--namespace", namespace]
    if repo is not None:
        argv += ["--repo-map", f"{SERVED_CLONE_URL}={repo}"]
    if not run_jobs:
        argv.append("--no-run")
    argv += extra_args
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=devstack_env(), stdout=log, stderr=subprocess.STDOUT)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kube-standin exited early:\n{log_file.read_text()}")
        return port_file.exists()

    wait_for(ready, 20, "kube-standin to listen")
    return Standin(
        proc=proc,
        port=int(port_file.read_text()),
        token_file=token_file,
        ca_file=ca_file,
        state_dir=tmp / "state",
        site_root=tmp / "site",
        log_file=log_file,
        host=host,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kube_env(standin: Standin, sa_dir: Path | None = None) -> dict[str, str]:
    """The environment a pod gives reload.sh, pointed at the stand-in."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBERNETES_SERVICE_HOST": standin.host,
        "KUBERNETES_SERVICE_PORT": str(standin.port),
        "SERVICEACCOUNT_DIR": str(sa_dir or standin.sa_dir),
    }


def run_reload(
    standin: Standin, ref: str, repository: str, *, sa_dir: Path | None = None, script: Path = RELOAD_SH
) -> subprocess.CompletedProcess[str]:
    """Run reload.sh as hookrunner does: directly by path, two arguments, no shell in between."""
    return subprocess.run(
        [str(script), ref, repository],
        env=kube_env(standin, sa_dir),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
