"""The Kubernetes manifests as kustomize builds them: the base in k8s/ and the HA overlay in k8s-overlays/ha/.

A module of its own (not conftest.py) so that the k8s tests, the overlay's and the job-status component's,
share one way to build and search the manifests.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from docs_support import REPO_ROOT

K8S = REPO_ROOT / "k8s"
HA = REPO_ROOT / "k8s-overlays" / "ha"

Manifest = dict[str, Any]


def kustomize(path: Path) -> list[Manifest]:
    """Every object `kubectl apply -k PATH` would send, built as kubectl builds it (its default load
    restrictor). kubectl ships with the test machine's image (.ci/run): without it this fails, not skips."""
    assert shutil.which("kubectl"), "kubectl is not installed; it builds the kustomizations offline"
    built = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


@cache
def _built(path: Path) -> str:
    return yaml.safe_dump_all(kustomize(path))


def built(path: Path) -> list[Manifest]:
    """kustomize(path) for the repository's own kustomizations, built once per test session (a fresh copy
    each call, so that no test sees another's changes)."""
    return [doc for doc in yaml.safe_load_all(_built(path)) if doc]


def key(obj: Manifest) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def find(objects: list[Manifest], kind: str, name: str, namespace: str | None = None) -> Manifest:
    matches = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["name"] == name
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]
    assert len(matches) == 1, f"expected one {kind} {namespace}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(objects: list[Manifest]) -> Manifest:
    """The receiver's pod template spec (the Deployment webhook-docs)."""
    spec: Manifest = find(objects, "Deployment", "webhook-docs", "default")["spec"]["template"]["spec"]
    return spec


def container(objects: list[Manifest]) -> Manifest:
    """The receiver's one container."""
    [box] = pod_spec(objects)["containers"]
    return box


@dataclass(frozen=True)
class Variant:
    """One way to deploy the receiver, and what sets it apart from the others."""

    name: str
    path: Path
    replicas: int
    state_arg: str  # the run state's argument, after the seed's three
    own_kinds: frozenset[str]  # kinds the base does not have


BASE = Variant("base", K8S, 1, "-state-dir=/var/lib/hookrunner/journal", frozenset())
HA_VARIANT = Variant(
    "ha", HA, 2, "-state-url-file=/etc/hookrunner/state/url", frozenset({"PodDisruptionBudget"})
)
VARIANTS = (BASE, HA_VARIANT)
