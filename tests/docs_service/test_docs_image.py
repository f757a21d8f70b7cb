"""The container image, built by scripts/image and run the way k8s/deployment.yaml runs it, with podman.

What the Deployment gives the pod is given here: uid 10001, a read-only root with a tmpfs at /tmp (the
emptyDir), no capabilities, etc/ as a ConfigMap volume at /etc/webhook (mode 0755, kubelet's `..data`
symlink layout), the service-account token and CA at the usual path, and KUBERNETES_SERVICE_HOST/PORT,
here pointing at the TLS stand-in on the host. Two differences, both forced by sharing the host's network
namespace: `-ip 127.0.0.1 -port N` follow the Deployment's three arguments (9000 may be taken), and the
API server is the stand-in on loopback.

Where podman is missing the tests are skipped with a loud reason; HOOKRUNNER_REQUIRE_IMAGE (.ci/run sets
it) turns that into a failure.
"""

from __future__ import annotations

import os
import posixpath
import resource
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from docs_support import (
    ETC,
    REPO_ROOT,
    SERVED_REPOSITORY,
    Standin,
    deployment_args,
    make_sample_repo,
    start_standin,
    state_dir,
    stop,
    wait_for,
)

PODMAN = shutil.which("podman")
if os.environ.get("HOOKRUNNER_REQUIRE_IMAGE") and PODMAN is None:
    raise RuntimeError("HOOKRUNNER_REQUIRE_IMAGE is set but podman is missing: the image cannot be tested")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PODMAN is None,
        reason="PODMAN IS MISSING: the container image is NOT tested (apt-get install podman runc)",
    ),
]

TAG = "localhost/hookrunner:test"


# As scripts/image runs podman: runc and cgroupfs, and rlimits at or below what this VM allows.
def _hard_limit(which: int, cap: int) -> int:
    hard = resource.getrlimit(which)[1]
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


NPROC = _hard_limit(resource.RLIMIT_NPROC, 32768)  # podman's own build and run processes have 32768
NOFILE = _hard_limit(resource.RLIMIT_NOFILE, 1 << 20)
PODMAN_ARGV = [PODMAN or "podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
GRACE = 30  # the pod's default terminationGracePeriodSeconds
STATE_VOLUME = posixpath.dirname(state_dir(deployment_args()))  # the Deployment's `state` emptyDir


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN_ARGV, *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def image() -> str:
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "image"), TAG], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return TAG


def configmap_volume(root: Path, files: dict[str, bytes], version: int) -> None:
    """Write files the way kubelet projects a ConfigMap: a timestamped folder, `..data` pointing at it, and
    one symlink per key through `..data`. A later version is swapped in with one rename of `..data`."""
    folder = root / f"..2026_11_25_00_00_0{version}.000000000"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o755)  # defaultMode: 493
    folder.chmod(0o755)
    staging = root / "..data_tmp"
    staging.symlink_to(folder.name)
    staging.rename(root / "..data")  # atomic, as kubelet's swap
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    root.chmod(0o755)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Pod:
    name: str
    port: int
    standin: Standin
    config: Path
    etc_files: dict[str, bytes]
    started_in: float

    @property
    def hook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/rebuild-docs"

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr


@pytest.fixture
def pod(image: str, tmp_path: Path) -> Iterator[Pod]:
    repo = tmp_path / "docs-repo"
    make_sample_repo(repo)
    standin = start_standin(tmp_path / "kube", repo=repo, run_jobs=True)
    # The projected service-account volume: world-readable files (its defaultMode is 0644).
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir(mode=0o755)
    for name in ("token", "ca.crt"):
        shutil.copyfile(standin.sa_dir / name, sa_dir / name)
        (sa_dir / name).chmod(0o644)
    sa_dir.chmod(0o755)
    etc_files = {path.name: path.read_bytes() for path in ETC.iterdir() if path.is_file()}
    config = tmp_path / "configmap"
    configmap_volume(config, etc_files, 1)
    tmp_path.chmod(0o755)

    name = f"hookrunner-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    argv = [
        "run", "-d", "--name", name, "--network=host",
        "--user", "10001:10001", "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:size=64m",
        "--cap-drop=ALL", "--security-opt", "no-new-privileges",
        "--ulimit", f"nofile={NOFILE}:{NOFILE}", "--ulimit", f"nproc={NPROC}:{NPROC}",
        "-v", f"{config}:/etc/webhook:ro", "-v", f"{sa_dir}:{SA_PATH}:ro",
        "-e", f"KUBERNETES_SERVICE_HOST={standin.host}", "-e", f"KUBERNETES_SERVICE_PORT={standin.port}",
        "--tmpfs", f"{STATE_VOLUME}:size=64m,mode=1777",  # the journal's emptyDir
        # The host's network: the admin listener takes a free port, not the Deployment's 9001.
        image, *admin_on(deployment_args(), free_port()), "-ip", "127.0.0.1", "-port", str(port),
    ]  # fmt: skip
    started = time.monotonic()
    podman(*argv)
    try:

        def serving() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or its worker still starting
                return False

        wait_for(serving, 60, f"the container to serve; its log:\n{podman('logs', name, check=False).stderr}")
        yield Pod(name, port, standin, config, etc_files, time.monotonic() - started)
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)
        stop(standin.proc)


def admin_on(args: list[str], port: int) -> list[str]:
    """The Deployment's arguments with the admin listener moved to `port`."""
    return [f"-admin-addr=127.0.0.1:{port}" if arg.startswith("-admin-addr=") else arg for arg in args]


def push(url: str, ref: str) -> requests.Response:
    return requests.post(
        url,
        json={"ref": ref, "repository": {"full_name": SERVED_REPOSITORY}},
        headers={"X-GitHub-Event": "push"},
        timeout=10,
    )


def test_image_runs_as_the_deployment_asks(pod: Pod) -> None:
    inspect = podman(
        "inspect", "--format", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}", pod.name
    ).stdout
    assert inspect.split() == ["10001:10001", "true"]
    whoami = podman("exec", pod.name, "id", "-u").stdout.strip()
    assert whoami == "10001"
    # The root filesystem refuses writes; /tmp (the emptyDir) takes them.
    refused = podman("exec", pod.name, "sh", "-c", "touch /app/x", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert podman("exec", pod.name, "mktemp").stdout.startswith("/tmp/")  # reload.sh's temp files
    assert (
        podman("exec", pod.name, "test", "!", "-e", "/src", check=False).returncode == 0
    )  # no build leftovers
    # The postgres extra is in: psycopg and its own libpq (the binary wheel), for the PostgreSQL run state.
    driver = podman(
        "exec", pod.name, "/opt/venv/bin/python", "-c", "import psycopg; print(psycopg.pq.__impl__)"
    )
    assert driver.stdout.strip() == "binary"
    assert pod.started_in < 60


def test_a_dev_push_builds_the_dev_site(pod: Pod) -> None:
    answer = push(pod.hook_url, "refs/heads/dev")
    assert (answer.status_code, answer.text) == (200, "payload received")
    jobs: list[dict[str, object]] = []

    def created() -> bool:
        jobs[:] = pod.standin.jobs()
        return bool(jobs)

    wait_for(created, 60, f"a job; the container's log:\n{pod.logs()}")
    assert [job["metadata"]["namespace"] for job in jobs] == ["dev"]  # type: ignore[index]
    name = str(jobs[0]["metadata"]["name"])  # type: ignore[index]
    job = pod.standin.wait_job_finished("dev", name)
    assert job["status"].get("succeeded") == 1, pod.standin.job_log("dev", name)
    assert (pod.standin.site_root / "dev" / "index.html").is_file()
    assert "in namespace dev (HTTP 201)" in pod.logs()
    # The run went through the journal: its folder is private, its file there, and no worker failed to open it.
    journal = state_dir(deployment_args())
    listing = podman("exec", pod.name, "stat", "-c", "%a %n", journal, f"{journal}/journal.sqlite3").stdout
    assert listing.split() == ["700", journal, "600", f"{journal}/journal.sqlite3"]
    assert "run journal:" not in pod.logs()


def test_a_configmap_swap_is_picked_up_without_a_restart(pod: Pod) -> None:
    assert push(pod.hook_url, "refs/tags/none").text == "payload received"
    swapped = dict(pod.etc_files)
    swapped["hooks.yaml"] = swapped["hooks.yaml"].replace(b"payload received", b"payload received, v2")
    configmap_volume(pod.config, swapped, 2)

    def reloaded() -> bool:
        return push(pod.hook_url, "refs/tags/none").text == "payload received, v2"

    wait_for(reloaded, 30, f"the swapped hooks file to be served; the container's log:\n{pod.logs()}")
    restarts = podman("inspect", "--format", "{{.RestartCount}}", pod.name).stdout.strip()
    assert restarts == "0"


def test_sigterm_stops_the_container_within_the_grace(pod: Pod) -> None:
    host_pid = int(podman("inspect", "--format", "{{.State.Pid}}", pod.name).stdout)
    pids = [host_pid, *map(int, Path(f"/proc/{host_pid}/task/{host_pid}/children").read_text().split())]
    assert len(pids) >= 2, "the arbiter and its worker"
    started = time.monotonic()
    podman("stop", "-t", str(GRACE), pod.name, timeout=GRACE + 30)
    took = time.monotonic() - started
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", pod.name).stdout.strip()
    assert exit_code == "0", f"not a clean stop (137 is the SIGKILL after the grace); log:\n{pod.logs()}"
    assert took < GRACE
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []
