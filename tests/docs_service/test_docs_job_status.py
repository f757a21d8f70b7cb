"""WAIT_FOR_JOB: reload.sh follows the Job it made, against the stand-in running real builds; the
job-status component; and hookrunner with the documented hook settings (docs/docs-rebuild.md)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import requests
import yaml
from docs_support import (
    ETC,
    RELOAD_SH,
    REPO_ROOT,
    SERVED_REPOSITORY,
    Standin,
    devstack_env,
    kube_env,
    make_sample_repo,
    start_standin,
    stop,
    wait_for,
    wait_serving,
)
from k8s_support import K8S, key, kustomize
from test_docs_e2e import free_port, interruptible, local_etc, push, start_receiver

COMPONENT = K8S / "components" / "job-status"
# What the component adds to the Role job-creator, in dev and in prod, after its own `create jobs`.
READ_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
CREATED = re.compile(
    r"^reload\.sh: created job (mkdocs-builder-[a-z0-9]{5}) in namespace (dev|prod) \(HTTP 201\)$"
)

pytestmark = pytest.mark.slow
# scripts/test runs the integration tests again with "-worker-class gthread"; the hookrunner test here follows.
WORKER_FLAGS = tuple(shlex.split(os.environ.get("HOOKRUNNER_TEST_FLAGS", "")))


def reload_env(standin: Standin, wait: str | None) -> dict[str, str]:
    env = kube_env(standin)
    if wait is not None:
        env["WAIT_FOR_JOB"] = wait
    return env


def run_waiting(
    standin: Standin,
    ref: str,
    wait: str | None,
    *,
    script: Path = RELOAD_SH,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """reload.sh as hookrunner runs it, with WAIT_FOR_JOB set to `wait` (None: unset)."""
    return subprocess.run(
        [str(script), ref, SERVED_REPOSITORY],
        env=env or reload_env(standin, wait),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def created_job(stdout: str) -> tuple[str, str]:
    first = stdout.splitlines()[0]
    found = CREATED.match(first)
    assert found, stdout
    return found[1], found[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "docs-repo"
    make_sample_repo(path)
    return path


@pytest.fixture
def builder(tmp_path: Path, repo: Path) -> Iterator[Standin]:
    """A stand-in that runs each Job's script (git clone, mkdocs build) and allows reads, as with the component."""
    server = start_standin(tmp_path / "kube", repo=repo, run_jobs=True)
    yield server
    stop(server.proc)


def break_branch(repo: Path, branch: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "devstack.sample_repo", "--break-branch", branch, str(repo)],
        cwd=REPO_ROOT,
        env=devstack_env(),
        check=True,
        capture_output=True,
    )


# ---- reload.sh with WAIT_FOR_JOB, against the stand-in ----


def test_a_build_that_succeeds_exits_0_after_printing_its_log(builder: Standin) -> None:
    result = run_waiting(builder, "refs/heads/dev", "120")
    assert result.returncode == 0, result.stdout + result.stderr
    name, namespace = created_job(result.stdout)
    assert namespace == "dev"
    out = result.stdout
    header = re.search(rf"^reload\.sh: log of pod ({name}-[a-z0-9]{{5}}):$", out, re.MULTILINE)
    assert header, out
    pod = header[1]
    # The pod's log, whole and in order, between the header and the end line, then the Job's outcome.
    log = builder.job_log("dev", name)
    assert "Documentation built" in log
    assert out.index(header[0]) < out.index(log) < out.index(f"reload.sh: end of the log of pod {pod}")
    assert out.rstrip("\n").endswith(f"reload.sh: job {name} in namespace dev succeeded")
    assert result.stderr == ""
    assert (builder.site_root / "dev" / "dev-only" / "index.html").is_file()


def test_a_build_that_fails_exits_1_with_the_error_and_the_reason(builder: Standin, repo: Path) -> None:
    break_branch(repo, "main")
    result = run_waiting(builder, "refs/heads/main", "120")
    assert result.returncode == 1, result.stdout + result.stderr
    name, namespace = created_job(result.stdout)
    assert namespace == "prod"
    assert "Error: MkDocs encountered an error parsing the configuration file" in result.stdout
    assert builder.job_log("prod", name) in result.stdout
    assert result.stderr == (
        f"reload.sh: job {name} in namespace prod failed: "
        "BackoffLimitExceeded: Job has reached the specified backoff limit\n"
    )
    assert not (builder.site_root / "prod" / "index.html").exists()


def test_the_log_arrives_while_the_build_runs_and_the_time_running_out_exits_124(
    builder: Standin, tmp_path: Path
) -> None:
    """A Job that prints, then sleeps past WAIT_FOR_JOB: its first line is out before reload.sh ends."""
    etc = tmp_path / "etc-copy"
    shutil.copytree(ETC, etc)
    body = json.loads((etc / "mkdocs-dev.json").read_text())
    [box] = body["spec"]["template"]["spec"]["containers"]
    box["command"][2] = "echo build started; sleep 60; echo never"
    (etc / "mkdocs-dev.json").write_text(json.dumps(body))
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(etc / "reload.sh"), "refs/heads/dev", SERVED_REPOSITORY],
        env=reload_env(builder, "4"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert lines[2] == "build started\n", lines
        assert proc.poll() is None, "the line came while reload.sh was still following the build"
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - started
    assert proc.returncode == 124, err
    name, _ = created_job(lines[0])
    assert "never" not in rest
    assert err.endswith(
        f"reload.sh: job {name} in namespace dev has not finished after WAIT_FOR_JOB=4 seconds; "
        "it is left running in the cluster\n"
    )
    assert 3 <= elapsed < 15, elapsed
    [job] = builder.jobs()
    assert job["status"] == {"active": 1}, "the Job is left running"


def test_a_pod_that_stays_pending_times_out_too(standin: Standin) -> None:
    """Jobs recorded but never run: the pod stays Pending, no log is printed; a leading zero is not octal."""
    started = time.monotonic()
    result = run_waiting(standin, "refs/heads/dev", "02")
    elapsed = time.monotonic() - started
    assert result.returncode == 124, result.stderr
    name, _ = created_job(result.stdout)
    assert result.stdout.splitlines() == [result.stdout.splitlines()[0]], (
        "no log for a pod that has not started"
    )
    assert f"job {name} in namespace dev has not finished after WAIT_FOR_JOB=2 seconds" in result.stderr
    assert 1 <= elapsed < 10, elapsed


def test_the_base_role_refuses_the_reads_and_the_component_is_named(tmp_path: Path) -> None:
    create_only = start_standin(tmp_path, extra_args=("--create-only",))
    try:
        result = run_waiting(create_only, "refs/heads/dev", "30")
        assert result.returncode == 1
        name, _ = created_job(result.stdout)
        assert (
            f'reading job {name} in namespace dev: HTTP 403: jobs.batch \\"{name}\\" is forbidden'
            in result.stderr
        )
        assert "WAIT_FOR_JOB needs the read permissions of k8s/components/job-status" in result.stderr
        assert len(create_only.jobs()) == 1, "the Job itself was created"
    finally:
        stop(create_only.proc)


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", " 5", "1e3", "9999999999"])
def test_a_value_that_is_not_whole_seconds_is_refused_before_any_job(standin: Standin, value: str) -> None:
    result = run_waiting(standin, "refs/heads/dev", value)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "reload.sh: WAIT_FOR_JOB" in result.stderr
    assert standin.jobs() == []


@pytest.mark.parametrize("value", [None, "", "0", "000"])
def test_without_wait_for_job_nothing_changes(standin: Standin, tmp_path: Path, value: str | None) -> None:
    """One curl call, the one line, exit 0 at once, even though the Job never finishes."""
    real_curl = shutil.which("curl")
    assert real_curl is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "curl-calls"
    (bin_dir / "curl").write_text(f'#!/bin/sh\necho call >> {calls}\nexec {real_curl} "$@"\n')
    (bin_dir / "curl").chmod(0o700)
    env = reload_env(standin, value)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = run_waiting(standin, "refs/heads/dev", value, env=env)
    assert result.returncode == 0, result.stderr
    name, _ = created_job(result.stdout)
    assert result.stdout == f"reload.sh: created job {name} in namespace dev (HTTP 201)\n"
    assert result.stderr == ""
    assert calls.read_text() == "call\n"


def test_the_token_stays_off_every_command_line_while_waiting(builder: Standin, tmp_path: Path) -> None:
    real_curl = shutil.which("curl")
    assert real_curl is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "curl-argv"
    (bin_dir / "curl").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" --- >> {argv_log}\nexec {real_curl} "$@"\n'
    )
    (bin_dir / "curl").chmod(0o700)
    env = reload_env(builder, "120")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = run_waiting(builder, "refs/heads/dev", "120", env=env)
    assert result.returncode == 0, result.stderr
    calls = argv_log.read_text().split("---\n")[:-1]
    assert len(calls) >= 4, "create, read the Job, list pods, get the pod, follow its log"
    token = builder.token_file.read_text()
    for call in calls:
        argv = call.splitlines()
        assert not [arg for arg in argv if token in arg]
        assert argv[argv.index("--cacert") + 1] == str(builder.sa_dir / "ca.crt")
        assert argv[argv.index("--header") + 1] == "@-"
        assert not {"-k", "--insecure"} & set(argv)
    assert any("/log?follow=true" in call for call in calls)
    assert any("labelSelector=job-name%3D" in call for call in calls)


# ---- the component ----


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_component_adds_exactly_the_read_rules_in_dev_and_prod(tmp_path: Path) -> None:
    """k8s/ with its commented `components` entry uncommented, built as `kubectl apply -k` builds it."""
    text = (K8S / "kustomization.yaml").read_text(encoding="utf-8")
    commented = "# components:\n#   - components/job-status\n"
    assert commented in text, "the base names the component, commented out"
    assert "components" not in yaml.safe_load(text), "the base leaves the component out"
    copy = tmp_path / "repo"
    shutil.copytree(K8S, copy / "k8s")
    shutil.copytree(ETC, copy / "etc")
    uncommented = text.replace(commented, "components:\n  - components/job-status\n")
    (copy / "k8s" / "kustomization.yaml").write_text(uncommented, encoding="utf-8")

    base = {key(o): o for o in kustomize(K8S)}
    with_component = {key(o): o for o in kustomize(copy / "k8s")}
    assert with_component.keys() == base.keys()
    changed = sorted(k for k in base if base[k] != with_component[k])
    assert changed == [("Role", "dev", "job-creator"), ("Role", "prod", "job-creator")]
    for role_key in changed:
        role = with_component[role_key]
        assert role["rules"] == base[role_key]["rules"] + READ_RULES
        assert {k: v for k, v in role.items() if k != "rules"} == {
            k: v for k, v in base[role_key].items() if k != "rules"
        }
        kubernetes_validate.validate(role, kubernetes_validate.latest_version(), strict=True)


def test_the_component_is_a_component_and_is_documented() -> None:
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert component["kind"] == "Component"
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    doc = (REPO_ROOT / "docs" / "docs-rebuild.md").read_text(encoding="utf-8")
    assert "components/job-status" in doc and "WAIT_FOR_JOB" in doc


# ---- hookrunner with the documented hook settings ----


def documented_hook_settings() -> dict[str, Any]:
    doc = (REPO_ROOT / "docs" / "docs-rebuild.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- job-status-hook -->\n *```yaml\n(.*?) *```", doc, re.DOTALL)
    assert found, "docs/docs-rebuild.md has no job-status-hook block"
    settings: dict[str, Any] = yaml.safe_load(textwrap.dedent(found[1]))
    return settings


def test_the_documented_settings_pair_the_wait_with_one_run_at_a_time() -> None:
    settings = documented_hook_settings()
    assert settings["max-concurrency"] == 1
    assert settings["coalesce-by"] == {"source": "payload", "name": "ref"}  # per branch (docs/limits.md)
    assert settings["max-queue"] == 2  # a waiting run for dev and one for main
    [variable] = settings["pass-environment-to-command"]
    assert variable["source"] == "string" and variable["envname"] == "WAIT_FOR_JOB"
    wait = int(variable["name"])
    timeout = settings["command-timeout"]
    assert timeout.endswith("m") and int(timeout[:-1]) * 60 > wait, "hookrunner's timeout is longer"


def runs(admin: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{admin}/api/v1/runs", timeout=10)
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["runs"]
    return found


def test_hookrunner_records_each_builds_own_outcome_and_never_overlaps_builds(
    tmp_path: Path, builder: Standin, repo: Path
) -> None:
    """The installed hookrunner, the documented settings (WAIT_FOR_JOB 120 s), the run history on."""
    hooks_file = local_etc(tmp_path / "etc")
    [hook] = yaml.safe_load(hooks_file.read_text(encoding="utf-8"))
    settings = documented_hook_settings()
    settings["pass-environment-to-command"][0]["name"] = "120"
    hook.update(settings)
    hooks_file.write_text(yaml.safe_dump([hook], sort_keys=False), encoding="utf-8")
    admin = f"127.0.0.1:{free_port()}"
    receiver, base = start_receiver(
        hooks_file, tmp_path / "receiver.log", kube_env(builder), ("-admin-addr", admin, *WORKER_FLAGS)
    )
    admin_url = f"http://{admin}"
    try:
        # Three quick pushes: one build runs, one waits, the third folds into the waiting one.
        most_unfinished = 0
        watching = True

        def watch() -> None:
            nonlocal most_unfinished
            while watching:
                jobs = builder.jobs()
                unfinished = [
                    j for j in jobs if not (j["status"].get("succeeded") or j["status"].get("failed"))
                ]
                most_unfinished = max(most_unfinished, len(unfinished))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for ref in ("dev", "main", "dev", "dev"):
                assert push(f"{base}/hooks/rebuild-docs", f"refs/heads/{ref}").text == "payload received"
            wait_for(
                lambda: len(runs(admin_url)) == 4 and all(r["outcome"] == "ok" for r in runs(admin_url)),
                120,
                "four ok runs",
            )
        finally:
            watching = False
            watcher.join()
        assert most_unfinished == 1, "never two builds at once"
        # The last dev push was folded into the waiting dev run; the main push kept its own.
        assert sorted(j["metadata"]["namespace"] for j in builder.jobs()) == ["dev", "dev", "prod"]
        assert sorted(r["kind"] for r in runs(admin_url)) == ["coalesced", "immediate", "queued", "queued"]

        # A broken mkdocs.yml: the run itself fails, and its output says why.
        break_branch(repo, "dev")
        assert push(f"{base}/hooks/rebuild-docs", "refs/heads/dev").text == "payload received"
        wait_for(lambda: runs(admin_url)[0]["outcome"] not in ("pending", "running"), 120, "the fourth run")
        newest = runs(admin_url)[0]
        assert (newest["outcome"], newest["exit_code"]) == ("failed", 1)
        run = requests.get(f"{admin_url}/api/v1/runs/{newest['id']}", timeout=10).json()
        assert "error parsing the configuration file" in run["output"]
        assert "failed: BackoffLimitExceeded" in run["output"]
        ok = [r for r in runs(admin_url) if r["kind"] == "immediate"][-1]
        first = requests.get(f"{admin_url}/api/v1/runs/{ok['id']}", timeout=10).json()
        assert "Documentation built" in first["output"] and "in namespace dev succeeded" in first["output"]
    finally:
        stop(receiver)


# ---- the stand-in's pods ----


def api_get(standin: Standin, path: str) -> requests.Response:
    token = standin.token_file.read_text()
    return requests.get(
        standin.base_url + path,
        headers={"Authorization": f"Bearer {token}"},
        verify=str(standin.ca_file),
        timeout=10,
    )


def test_the_stand_in_answers_for_pods_as_the_api_server_does(standin: Standin) -> None:
    """Jobs recorded, not run: the pod is Pending, found by either job-name label, its log not there yet."""
    name, _ = created_job(run_waiting(standin, "refs/heads/dev", None).stdout)
    for label in ("job-name", "batch.kubernetes.io/job-name"):
        listed = api_get(standin, f"/api/v1/namespaces/dev/pods?labelSelector={label}%3D{name}").json()
        [pod] = listed["items"]
        assert pod["metadata"]["name"].startswith(name + "-")
        assert pod["status"] == {"phase": "Pending"}
    assert (
        api_get(standin, "/api/v1/namespaces/dev/pods?labelSelector=job-name%3Dother").json()["items"] == []
    )
    assert (
        api_get(standin, f"/api/v1/namespaces/prod/pods?labelSelector=job-name%3D{name}").json()["items"]
        == []
    )
    pod_name = pod["metadata"]["name"]
    assert api_get(standin, f"/api/v1/namespaces/dev/pods/{pod_name}").json() == pod
    log = api_get(standin, f"/api/v1/namespaces/dev/pods/{pod_name}/log?follow=true")
    assert log.status_code == 400
    assert (
        log.json()["message"]
        == f'container "mkdocs" in pod "{pod_name}" is waiting to start: ContainerCreating'
    )
    assert api_get(standin, "/api/v1/namespaces/dev/pods/nope").status_code == 404
    assert (
        api_get(standin, "/api/v1/namespaces/dev/pods?labelSelector=job-name%20in%20(a)").status_code == 400
    )
    assert api_get(standin, "/api/v1/namespaces/kube-system/pods").status_code == 403


# ---- scripts/dev ----


def test_scripts_dev_shows_both_outcomes_on_the_status_page(tmp_path: Path) -> None:
    """WAIT_FOR_JOB and ADMIN_PORT: a push that builds is `ok`, one after --break-branch is `failed`."""
    port, admin_port = free_port(), free_port()
    env = {
        **os.environ,
        "WEBHOOK_PORT": str(port),
        "ADMIN_PORT": str(admin_port),
        "WAIT_FOR_JOB": "120",
        "DEV_ROOT": str(tmp_path),
    }
    output = tmp_path / "dev.out"
    admin_url = f"http://127.0.0.1:{admin_port}"
    hook_url = f"http://127.0.0.1:{port}/hooks/rebuild-docs"
    with open(output, "wb") as out:
        dev = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "dev")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=interruptible,
        )
    try:
        wait_serving(dev, port, 60, "scripts/dev", output)
        shown = output.read_text()
        assert f"status page on {admin_url}/" in shown
        assert "--break-branch dev" in shown
        assert push(hook_url, "refs/heads/dev").text == "payload received"
        wait_for(lambda: [r["outcome"] for r in runs(admin_url)] == ["ok"], 120, f"an ok run:\n{output}")
        break_branch(tmp_path / "dev" / "docs-repo", "dev")
        assert push(hook_url, "refs/heads/dev").text == "payload received"
        wait_for(
            lambda: [r["outcome"] for r in runs(admin_url)] == ["failed", "ok"],
            120,
            f"a failed run:\n{output}",
        )
        page = requests.get(f"{admin_url}/runs", timeout=10).text
        # The runs table, newest first: the failed build (exit 1), then the good one.
        assert re.findall(r'<tr class="run" data-run="[^"]+" data-outcome="(\w+)"', page) == ["failed", "ok"]
        failed = requests.get(f"{admin_url}/api/v1/runs/{runs(admin_url)[0]['id']}", timeout=10).json()
        assert "error parsing the configuration file" in failed["output"]
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(timeout=30)
    assert code == 130
