"""reload.sh against the batch-API stand-in: the four command rules, the call, and its failure modes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
from docs_support import (
    ETC,
    RELOAD_SH,
    SERVED_REPOSITORY,
    Standin,
    kube_env,
    run_reload,
    start_standin,
    stop,
    write_private,
)


def expected_body(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((ETC / name).read_text(encoding="utf-8"))
    return body


def assert_created_from(job: dict[str, Any], namespace: str, job_file: str) -> None:
    """The Job the API holds is exactly the file's body, plus only the fields the server fills in."""
    body = expected_body(job_file)
    meta = job["metadata"]
    assert isinstance(meta, dict)
    assert meta["namespace"] == namespace
    assert meta["name"].startswith("mkdocs-builder-") and len(meta["name"]) == len("mkdocs-builder-") + 5
    server_fields = {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}
    assert {k: v for k, v in meta.items() if k not in server_fields} == {
        k: v for k, v in body["metadata"].items() if k != "namespace"
    }
    assert {k: v for k, v in job.items() if k not in {"metadata", "status"}} == {
        k: v for k, v in body.items() if k != "metadata"
    }


# Rule 1: another repository is skipped, whatever the ref.
@pytest.mark.parametrize(
    "repository",
    ["someone-else/docs", SERVED_REPOSITORY + "2", SERVED_REPOSITORY.swapcase(), " " + SERVED_REPOSITORY, ""],
)
def test_rule1_unsupported_repo_is_skipped(standin: Standin, repository: str) -> None:
    result = run_reload(standin, "refs/heads/main", repository)
    assert result.returncode == 0, result.stderr
    assert "unsupported repo" in result.stdout
    assert standin.jobs() == []


# Rule 2: a push to dev creates the dev Job in namespace dev.
def test_rule2_dev_push_creates_dev_job(standin: Standin) -> None:
    result = run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY)
    assert result.returncode == 0, result.stderr
    [job] = standin.jobs()
    assert_created_from(job, "dev", "mkdocs-dev.json")
    assert f"created job {job['metadata']['name']} in namespace dev (HTTP 201)" in result.stdout


# Rule 3: a push to main creates the main Job in namespace prod.
def test_rule3_main_push_creates_prod_job(standin: Standin) -> None:
    result = run_reload(standin, "refs/heads/main", SERVED_REPOSITORY)
    assert result.returncode == 0, result.stderr
    [job] = standin.jobs()
    assert_created_from(job, "prod", "mkdocs-main.json")
    assert "in namespace prod (HTTP 201)" in result.stdout


# Rule 4: any other ref of the served repository is skipped with status 0 -- a tag named dev included.
@pytest.mark.parametrize(
    "ref",
    [
        "refs/tags/dev",
        "refs/tags/main",
        "refs/heads/feature",
        "refs/heads/dev-2",
        "refs/heads/main/x",
        "dev",
        "",
    ],
)
def test_rule4_unsupported_ref_is_skipped(standin: Standin, ref: str) -> None:
    result = run_reload(standin, ref, SERVED_REPOSITORY)
    assert result.returncode == 0, result.stderr
    assert "unsupported ref" in result.stdout
    assert standin.jobs() == []


def test_request_data_never_reaches_a_shell(standin: Standin, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for ref, repository in [
        (f"$(touch {marker})", SERVED_REPOSITORY),
        (f"refs/heads/dev`touch {marker}`", SERVED_REPOSITORY),
        ("refs/heads/dev", f"{SERVED_REPOSITORY}; touch {marker}"),
        ("refs/heads/main", f"$(touch {marker})"),
    ]:
        result = run_reload(standin, ref, repository)
        assert result.returncode == 0
        assert "skipping push to unsupported" in result.stdout
    assert not marker.exists()
    assert standin.jobs() == []


def test_token_stays_off_the_command_line_and_tls_is_verified(standin: Standin, tmp_path: Path) -> None:
    """A curl on PATH that records its arguments, then runs the real one: what would `ps` show?"""
    real_curl = shutil.which("curl")
    assert real_curl is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "curl-argv"
    recorder = bin_dir / "curl"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_log}\nexec {real_curl} "$@"\n')
    recorder.chmod(0o700)
    env = kube_env(standin)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        [str(RELOAD_SH), "refs/heads/dev", SERVED_REPOSITORY],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    argv = argv_log.read_text().splitlines()
    token = standin.token_file.read_text()
    assert not [arg for arg in argv if token in arg]
    assert argv[argv.index("--cacert") + 1] == str(standin.sa_dir / "ca.crt")
    assert not {"-k", "--insecure", "--proxy-insecure"} & set(argv)
    assert argv[argv.index("--header") + 1] == "@-"  # the bearer header arrives on stdin
    assert len(standin.jobs()) == 1


def test_no_temporary_file_is_left_behind(standin: Standin, tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**kube_env(standin), "TMPDIR": str(scratch)}
    argv = [str(RELOAD_SH), "refs/heads/dev", SERVED_REPOSITORY]
    assert subprocess.run(argv, env=env, capture_output=True, check=False).returncode == 0
    # And on a refusal: a service-account dir whose token the API does not accept.
    wrong = tmp_path / "wrong-sa"
    write_private(wrong / "token", "not-the-token")
    shutil.copy(standin.ca_file, wrong / "ca.crt")
    env["SERVICEACCOUNT_DIR"] = str(wrong)
    assert subprocess.run(argv, env=env, capture_output=True, check=False).returncode == 1
    assert list(scratch.iterdir()) == []


def test_wrong_token_is_refused_and_reported(standin: Standin, tmp_path: Path) -> None:
    other = tmp_path / "other-sa"
    other.mkdir()
    write_private(other / "token", "not-the-token")
    shutil.copy(standin.ca_file, other / "ca.crt")
    result = run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY, sa_dir=other)
    assert result.returncode != 0
    assert "rejected: HTTP 401: Unauthorized" in result.stderr
    assert standin.jobs() == []


def test_foreign_ca_is_refused(standin: Standin, tmp_path: Path) -> None:
    """reload.sh trusts only the CA in the service-account dir: a server cert from another CA fails TLS."""
    foreign = tmp_path / "foreign-sa"
    foreign.mkdir()
    shutil.copy(standin.token_file, foreign / "token")
    trustme.CA().cert_pem.write_to_path(str(foreign / "ca.crt"))
    result = run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY, sa_dir=foreign)
    assert result.returncode != 0
    assert "job creation request to https://127.0.0.1:" in result.stderr
    # curl's own words for a failed chain check.
    assert "certificate" in result.stderr.lower()
    assert standin.jobs() == []
    # With the right CA the very same call goes through, so the refusal above was the CA's doing.
    assert run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY).returncode == 0


def test_forbidden_namespace_reports_status_and_message(tmp_path: Path) -> None:
    """An API that lets the account create Jobs only in dev answers 403 for prod, as RBAC would."""
    server = start_standin(tmp_path, namespaces=("dev",))
    try:
        result = run_reload(server, "refs/heads/main", SERVED_REPOSITORY)
        assert result.returncode != 0
        assert "job creation in namespace prod rejected: HTTP 403: jobs.batch is forbidden" in result.stderr
        assert (
            'cannot create resource \\"jobs\\" in API group \\"batch\\" in the namespace \\"prod\\"'
            in result.stderr
        )
        assert server.jobs() == []
    finally:
        stop(server.proc)


def test_token_is_read_on_every_call(standin: Standin, tmp_path: Path) -> None:
    """Kubelet rotates a projected token by swapping the ..data symlink; each call must use the new one."""
    sa = tmp_path / "projected"
    sa.mkdir()

    def publish(token: str, generation: int) -> None:
        data = sa / f"..{generation}"
        data.mkdir()
        write_private(data / "token", token)
        shutil.copy(standin.ca_file, data / "ca.crt")
        link = sa / "..data_tmp"
        link.symlink_to(data.name)
        os.replace(link, sa / "..data")  # atomic, as the kubelet does it

    publish(standin.token_file.read_text(), 1)
    (sa / "token").symlink_to("..data/token")
    (sa / "ca.crt").symlink_to("..data/ca.crt")
    assert run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY, sa_dir=sa).returncode == 0

    # The API now accepts only the new token; the old one is refused.
    old_sa = tmp_path / "old"
    old_sa.mkdir()
    write_private(old_sa / "token", standin.token_file.read_text())
    shutil.copy(standin.ca_file, old_sa / "ca.crt")
    write_private(standin.token_file, "rotated-" + os.urandom(8).hex())
    assert run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY, sa_dir=old_sa).returncode != 0

    publish(standin.token_file.read_text(), 2)
    result = run_reload(standin, "refs/heads/main", SERVED_REPOSITORY, sa_dir=sa)
    assert result.returncode == 0, result.stderr
    assert sorted(job["metadata"]["namespace"] for job in standin.jobs()) == ["dev", "prod"]


def test_job_files_come_from_the_scripts_own_directory(standin: Standin, tmp_path: Path) -> None:
    """A copy of etc/ elsewhere (as in the pod's /etc/webhook) posts its own neighbouring files."""
    copy = tmp_path / "etc-copy"
    shutil.copytree(ETC, copy)
    body = json.loads((copy / "mkdocs-dev.json").read_text())
    body["metadata"]["labels"] = {"copied": "yes"}
    (copy / "mkdocs-dev.json").write_text(json.dumps(body))
    result = run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY, script=copy / "reload.sh")
    assert result.returncode == 0, result.stderr
    [job] = standin.jobs()
    assert job["metadata"]["labels"] == {"copied": "yes"}


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback_available(), reason="no IPv6 loopback on this host")
def test_ipv6_service_address_is_bracketed(tmp_path: Path) -> None:
    """KUBERNETES_SERVICE_HOST is a bare address; on an IPv6 cluster it must become [addr] in the URL."""
    server = start_standin(tmp_path, host="::1")
    try:
        result = run_reload(server, "refs/heads/dev", SERVED_REPOSITORY)
        assert result.returncode == 0, result.stderr
        assert [job["metadata"]["namespace"] for job in server.jobs()] == ["dev"]
    finally:
        stop(server.proc)


def test_unreachable_api_fails(standin: Standin) -> None:
    stop(standin.proc)
    result = run_reload(standin, "refs/heads/dev", SERVED_REPOSITORY)
    assert result.returncode != 0
    assert "job creation request to" in result.stderr


def test_reload_sh_is_posix_sh() -> None:
    """The pod image's /bin/sh may be dash: the script must parse as plain POSIX sh."""
    assert RELOAD_SH.read_text().startswith("#!/bin/sh\n")
    assert os.access(RELOAD_SH, os.X_OK)
    for shell in ("dash", "sh"):
        path = shutil.which(shell)
        if path is not None:
            subprocess.run([path, "-n", str(RELOAD_SH)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_reload_sh_passes_shellcheck() -> None:
    subprocess.run(["shellcheck", "--shell=sh", str(RELOAD_SH)], check=True)
