"""kube-standin's pods: each Job's one pod, its status, and its container's log, followed as it grows.

Enough of the core/v1 API for reload.sh's WAIT_FOR_JOB: list a Job's pods by the `job-name` label, get a
pod, and read `pods/<name>/log`, with `follow=true` streamed (chunked) until the container has ended.
The stand-in runs a Job's script once, so each Job has exactly one pod and no retries (as a Job with
`backoffLimit: 0` would).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

# The phases after which a pod's container has ended and its log is whole.
FINISHED_PHASES = ("Succeeded", "Failed")
# How often a followed log is checked for new bytes.
FOLLOW_POLL_SECONDS = 0.05
# The largest piece of log sent in one chunk.
CHUNK_BYTES = 64 * 1024


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A metav1.Status failure, shaped as the API server sends it."""
    obj: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        obj["details"] = details
    obj["code"] = code
    return obj


@dataclass(frozen=True)
class PodView:
    """What the pod endpoints need to know of a Job: its names, its phase, and where its log goes."""

    namespace: str
    job_name: str
    job_uid: str
    pod_name: str
    container: str
    phase: str
    log_path: Path | None


@dataclass(frozen=True)
class LogRequest:
    """An answer that is a log, not a JSON object: the handler streams it with `stream_log`."""

    pod: PodView
    follow: bool


def pod_object(pod: PodView) -> dict[str, Any]:
    """The pod as the API would return it: the labels the Job controller sets, and the phase."""
    labels = {
        "batch.kubernetes.io/controller-uid": pod.job_uid,
        "batch.kubernetes.io/job-name": pod.job_name,
        "controller-uid": pod.job_uid,
        "job-name": pod.job_name,
    }
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": pod.job_name,
        "uid": pod.job_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": pod.pod_name,
            "generateName": pod.job_name + "-",
            "namespace": pod.namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": pod.container}]},
        "status": {"phase": pod.phase},
    }


def parse_selector(selector: str) -> dict[str, str] | None:
    """`a=b,c==d` as {a: b, c: d}; None for anything else (set-based requirements are not modelled)."""
    wanted: dict[str, str] = {}
    for requirement in filter(None, selector.split(",")):
        key, sep, value = requirement.replace("==", "=").partition("=")
        if not sep or not key or "!" in key or "=" in value:
            return None
        wanted[key.strip()] = value.strip()
    return wanted


class PodAPI:
    """Answers GETs under /api/v1/namespaces/<ns>/pods from the Jobs the stand-in holds."""

    def __init__(self, pods: Callable[[str], list[PodView]]) -> None:
        self.pods = pods

    def get(
        self, namespace: str, name: str | None, log: bool, query: str
    ) -> tuple[int, dict[str, Any]] | LogRequest:
        params = parse_qs(query)
        if name is None:
            return self._list(namespace, params.get("labelSelector", [""])[0])
        found = [pod for pod in self.pods(namespace) if pod.pod_name == name]
        if not found:
            details = {"name": name, "kind": "pods"}
            return 404, status_object(404, "NotFound", f'pods "{name}" not found', details)
        pod = found[0]
        if not log:
            return 200, pod_object(pod)
        container = params.get("container", [pod.container])[0]
        if container != pod.container:
            message = f"container {container} is not valid for pod {name}"
            return 400, status_object(400, "BadRequest", message)
        if pod.phase == "Pending" or pod.log_path is None:
            message = f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            return 400, status_object(400, "BadRequest", message)
        return LogRequest(pod=pod, follow=params.get("follow", ["false"])[0] == "true")

    def _list(self, namespace: str, selector: str) -> tuple[int, dict[str, Any]]:
        wanted = parse_selector(selector)
        if wanted is None:
            message = f"unable to parse requirement: only equality selectors are modelled, got {selector!r}"
            return 400, status_object(400, "BadRequest", message)
        items = []
        for pod in self.pods(namespace):
            obj = pod_object(pod)
            if all(obj["metadata"]["labels"].get(k) == v for k, v in wanted.items()):
                items.append(obj)
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


def log_chunks(request: LogRequest, phase: Callable[[], str]) -> Iterator[bytes]:
    """The container's log; with follow, the bytes as they are written, until the container has ended.

    The phase is read before the file, so the last read after the end sees everything written.
    """
    path = request.pod.log_path
    assert path is not None  # PodAPI.get answers "waiting to start" for a pod without a log
    with open(path, "rb") as handle:
        while True:
            ended = not request.follow or phase() in FINISHED_PHASES
            data = handle.read(CHUNK_BYTES)
            if data:
                yield data
                continue
            if ended:
                return
            time.sleep(FOLLOW_POLL_SECONDS)
