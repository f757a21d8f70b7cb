"""The batch-API stand-in itself: the API server's refusals, and Jobs it runs or fails on the host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from docs_support import (
    ETC,
    SERVED_REPOSITORY,
    Standin,
    make_sample_repo,
    run_reload,
    start_standin,
    stop,
)


def post_job(
    standin: Standin, namespace: str, body: Any, content_type: str = "application/json"
) -> requests.Response:
    token = standin.token_file.read_text()
    return requests.post(
        f"{standin.base_url}/apis/batch/v1/namespaces/{namespace}/jobs",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
        verify=str(standin.ca_file),
        timeout=10,
    )


def job_body(name: str = "mkdocs-dev") -> dict[str, Any]:
    job: dict[str, Any] = json.loads((ETC / f"{name}.json").read_text(encoding="utf-8"))
    return job


@pytest.mark.parametrize(
    ("mutate", "content_type", "code", "reason"),
    [
        (lambda job: job, "text/plain", 415, "UnsupportedMediaType"),
        (lambda job: {**job, "kind": "CronJob"}, "application/json", 400, "BadRequest"),
        (lambda job: {**job, "metadata": {**job["metadata"], "namespace": "prod"}}, "application/json", 400,
         "BadRequest"),
        (lambda job: {**job, "metadata": {"namespace": "dev"}}, "application/json", 422, "Invalid"),
        (lambda job: [job], "application/json", 400, "BadRequest"),
    ],
)  # fmt: skip
def test_refusals_mirror_the_api_server(
    standin: Standin, mutate: Any, content_type: str, code: int, reason: str
) -> None:
    answer = post_job(standin, "dev", mutate(job_body()), content_type)
    assert answer.status_code == code
    status = answer.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    assert standin.jobs() == []


def test_unknown_job_is_not_found(standin: Standin) -> None:
    with pytest.raises(requests.HTTPError) as caught:
        standin.api("/apis/batch/v1/namespaces/dev/jobs/mkdocs-builder-zzzzz")
    assert caught.value.response.status_code == 404
    assert caught.value.response.json()["reason"] == "NotFound"


def test_a_job_it_cannot_map_fails_instead_of_hanging(tmp_path: Path) -> None:
    server = start_standin(tmp_path, run_jobs=True)
    try:
        job = job_body()
        job["spec"]["template"]["spec"]["containers"][0]["command"] = ["mkdocs", "build"]
        created = post_job(server, "dev", job)
        assert created.status_code == 201
        name = created.json()["metadata"]["name"]
        finished = server.wait_job_finished("dev", name, timeout=20)
        assert finished["status"]["failed"] == 1
        assert "only a command of the form /bin/sh -c" in server.job_log("dev", name)
    finally:
        stop(server.proc)


@pytest.mark.slow
def test_paths_with_spaces_survive_the_mapping(tmp_path: Path) -> None:
    """Local paths are shell-quoted when they replace /docs, /output and the clone URL in the script."""
    base = tmp_path / "a dir with spaces"
    repo = base / "docs repo"
    make_sample_repo(repo)
    server = start_standin(base, repo=repo, run_jobs=True)
    try:
        result = run_reload(server, "refs/heads/main", SERVED_REPOSITORY)
        assert result.returncode == 0, result.stderr
        [job] = server.jobs()
        finished = server.wait_job_finished("prod", job["metadata"]["name"])
        assert finished["status"].get("succeeded") == 1, server.job_log("prod", job["metadata"]["name"])
        assert (base / "site" / "prod" / "index.html").is_file()
        # The stored Job is the one that was sent: the mapping exists only in what ran on the host.
        assert job["spec"] == job_body("mkdocs-main")["spec"]
    finally:
        stop(server.proc)
