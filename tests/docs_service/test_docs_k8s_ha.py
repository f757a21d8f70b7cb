"""k8s-overlays/ha/: two replicas on one PostgreSQL run state (docs/operations.md, "Several replicas
(PostgreSQL)"). test_docs_k8s.py runs the base's checks on this overlay's build too; here are its own: the
replicas, the rollout, the PodDisruptionBudget, the anti-affinity, the run state's URL from a Secret in the
journal's place, and that the base is left as it was."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import requests
import yaml
from docs_support import ETC, REPO_ROOT, stop
from k8s_support import BASE, HA, HA_VARIANT, K8S, Manifest, built, container, find, key, kustomize, pod_spec
from pg_cluster import PASSWORD, Cluster
from test_docs_e2e import free_port, local_etc, push, start_receiver

from hookrunner.flags import parse_args
from hookrunner.state.opener import resolve_state_url

OPERATIONS = REPO_ROOT / "docs" / "operations.md"
# scripts/test runs the integration tests again with "-worker-class gthread"; the hookrunner test here follows.
WORKER_FLAGS = tuple(shlex.split(os.environ.get("HOOKRUNNER_TEST_FLAGS", "")))


@pytest.fixture
def objects() -> list[Manifest]:
    return built(HA)


def state_url_file(box: Manifest) -> str:
    [path] = [arg.split("=", 1)[1] for arg in box["args"] if arg.startswith("-state-url-file=")]
    return path


def secret_volume(objects: list[Manifest]) -> Manifest:
    """The volume that holds the run state's URL: the one mounted over -state-url-file's folder."""
    box = container(objects)
    folder = os.path.dirname(state_url_file(box))
    [mount] = [m for m in box["volumeMounts"] if m["mountPath"] == folder]
    assert mount.get("readOnly") is True
    [volume] = [v for v in pod_spec(objects)["volumes"] if v["name"] == mount["name"]]
    return volume


def test_two_replicas_and_a_rollout_that_never_leaves_none_ready(objects: list[Manifest]) -> None:
    spec = find(objects, "Deployment", "webhook-docs", "default")["spec"]
    assert spec["replicas"] == 2
    strategy = spec["strategy"]
    assert strategy["type"] == "RollingUpdate"
    # Integers, not percentages: the new pod comes first (surge), and no old pod goes before it is ready.
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_the_budget_selects_the_deployments_pods(objects: list[Manifest]) -> None:
    [budget] = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budget["apiVersion"] == "policy/v1"
    deployment = find(objects, "Deployment", "webhook-docs", "default")
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    selector = budget["spec"]["selector"]
    assert set(selector) == {"matchLabels"}
    assert selector["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector["matchLabels"].items() <= pod_labels.items()
    # One may go at a time (a drain is never blocked for good: 1 < 2), and never the last one.
    assert budget["spec"]["minAvailable"] == 1 < deployment["spec"]["replicas"]
    assert "maxUnavailable" not in budget["spec"]
    # A pod that is not ready (a wrong Secret, crash-looping) does not hold a drain up.
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # No other Deployment's pods are counted in the budget.
    assert [o["kind"] for o in objects].count("Deployment") == 1


def test_anti_affinity_spreads_the_pods_over_nodes(objects: list[Manifest]) -> None:
    """Preferred, not required: kustomization's comment and docs/operations.md say why (a rollout's extra
    pod would need a third node)."""
    pod = pod_spec(objects)
    labels = find(objects, "Deployment", "webhook-docs", "default")["spec"]["template"]["metadata"]["labels"]
    assert set(pod["affinity"]) == {"podAntiAffinity"}
    anti = pod["affinity"]["podAntiAffinity"]
    assert set(anti) == {"preferredDuringSchedulingIgnoredDuringExecution"}
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": labels}


def test_the_run_state_url_is_a_secret_mounted_read_only(objects: list[Manifest]) -> None:
    box = container(objects)
    path = state_url_file(box)
    volume = secret_volume(objects)
    secret = volume["secret"]
    assert not secret.get("optional"), "without its Secret the pod must not start"
    [item] = secret["items"]
    assert os.path.join(os.path.dirname(path), item["path"]) == path
    assert (secret["secretName"], item["key"]) == ("hookrunner-state", "uri")
    # Readable by hookrunner's group only: the files are root's, their group the pod's fsGroup.
    mode = secret["defaultMode"]
    assert mode & 0o040 and not mode & 0o007 and not mode & 0o222
    security = pod_spec(objects)["securityContext"]
    assert security["fsGroup"] == security["runAsGroup"]


def test_the_shared_state_replaces_the_journal(objects: list[Manifest]) -> None:
    """-state-dir and -state-url cannot be used together (hookrunner exits 1): the overlay puts
    -state-url-file in -state-dir's place, and drops the journal's emptyDir."""
    box = container(objects)
    base_box = container(built(BASE.path))
    [where] = [i for i, arg in enumerate(base_box["args"]) if arg.startswith("-state-dir=")]
    assert box["args"] == [*base_box["args"][:where], HA_VARIANT.state_arg, *base_box["args"][where + 1 :]]
    assert not [arg for arg in box["args"] if arg.startswith(("-state-dir", "-state-url="))]
    assert "state" not in {v["name"] for v in pod_spec(objects)["volumes"]}
    assert "/var/lib/hookrunner" not in {m["mountPath"] for m in box["volumeMounts"]}


def test_the_overlay_changes_the_deployment_and_adds_the_budget_only(objects: list[Manifest]) -> None:
    base = {key(o): o for o in built(BASE.path)}
    ha = {key(o): o for o in objects}
    deployment = ("Deployment", "default", "webhook-docs")
    assert ha.keys() - base.keys() == {("PodDisruptionBudget", "default", "webhook-docs")}
    assert base.keys() <= ha.keys()
    assert [k for k in base if base[k] != ha[k]] == [deployment]
    # In the Deployment: the pod's spreading and fsGroup, the run state's argument and volume; the rest
    # (image, probes, resources, the container's security, the ports) is the base's.
    ha_pod, base_pod = (
        ha[deployment]["spec"]["template"]["spec"],
        base[deployment]["spec"]["template"]["spec"],
    )
    unchanged = ("containers", "volumes", "affinity", "securityContext")
    assert {k: v for k, v in ha_pod.items() if k not in unchanged} == {
        k: v for k, v in base_pod.items() if k not in unchanged
    }
    assert {k: v for k, v in ha_pod["securityContext"].items() if k != "fsGroup"} == base_pod[
        "securityContext"
    ]
    [ha_box], [base_box] = ha_pod["containers"], base_pod["containers"]
    assert {k: v for k, v in ha_box.items() if k not in ("args", "volumeMounts")} == {
        k: v for k, v in base_box.items() if k not in ("args", "volumeMounts")
    }


def copy_repo(tmp_path: Path, *, overlay: bool) -> Path:
    """k8s/ and etc/ (and, with `overlay`, k8s-overlays/) copied into a folder of their own."""
    shutil.copytree(K8S, tmp_path / "k8s")
    shutil.copytree(ETC, tmp_path / "etc")
    if overlay:
        shutil.copytree(HA.parent, tmp_path / HA.parent.name)
    return tmp_path


def test_the_base_builds_the_same_with_or_without_the_overlay(tmp_path: Path) -> None:
    """The base in k8s/ stays the seed's (one replica, the embedded run state: test_docs_k8s.py), and the
    overlay's existence does not change what `kubectl apply -k k8s/` sends."""
    without = copy_repo(tmp_path / "without", overlay=False)
    assert kustomize(without / "k8s") == kustomize(K8S)
    assert kustomize(K8S) == built(BASE.path)
    assert find(kustomize(K8S), "Deployment", "webhook-docs")["spec"]["replicas"] == 1


def test_the_overlay_refuses_a_base_whose_state_argument_moved(tmp_path: Path) -> None:
    """Its JSON patch first tests that the argument it replaces is -state-dir, so the build fails rather
    than put -state-url-file beside -state-dir, or over another argument."""
    repo = copy_repo(tmp_path, overlay=True)
    deployment = repo / "k8s" / "deployment.yaml"
    text = deployment.read_text(encoding="utf-8")
    moved = text.replace("- -hotreload\n", "- -hotreload\n            - -http-methods=POST\n", 1)
    assert moved != text
    deployment.write_text(moved, encoding="utf-8")
    result = subprocess.run(
        ["kubectl", "kustomize", str(repo / HA.relative_to(REPO_ROOT))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "test failed" in result.stderr
    assert kustomize(repo / "k8s")  # the base itself still builds


def test_the_overlay_is_a_kustomization_beside_the_base() -> None:
    """kustomize refuses an overlay inside the folder of the base it builds on ("cycle detected"), so the
    overlay is k8s-overlays/ha, beside k8s/; the overlay's own resources are its folder's files."""
    kustomization = yaml.safe_load((HA / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["resources"][0] == "../../k8s"
    assert (HA / kustomization["resources"][0]).resolve() == K8S
    assert K8S.resolve() not in HA.resolve().parents
    listed = {(HA / entry).resolve() for entry in kustomization["resources"][1:]}
    listed |= {(HA / patch["path"]).resolve() for patch in kustomization["patches"]}
    assert listed == {p.resolve() for p in HA.glob("*.yaml") if p.name != "kustomization.yaml"}


def test_the_documented_secret_is_the_one_the_overlay_mounts(objects: list[Manifest]) -> None:
    """docs/operations.md's `kubectl create secret` makes the Secret and key the overlay mounts."""
    text = OPERATIONS.read_text(encoding="utf-8")
    made = re.findall(r"kubectl -n (\S+) create secret generic (\S+) --from-file=(\w+)=", text)
    assert made, "docs/operations.md shows no `kubectl -n NS create secret generic NAME --from-file=KEY=...`"
    volume = secret_volume(objects)
    namespace = find(objects, "Deployment", "webhook-docs")["metadata"]["namespace"]
    [item] = volume["secret"]["items"]
    assert set(made) == {(namespace, volume["secret"]["secretName"], item["key"])}
    assert "## Several replicas (PostgreSQL)" in text and "k8s-overlays/ha" in text


def local_args(box: Manifest, url_file: Path, admin_port: int) -> list[str]:
    """The overlay's arguments after the seed's three, with the Secret's file and the admin port moved
    here (the admin listener's 9001 may be taken on this machine)."""
    moves = {"-state-url-file=": str(url_file), "-admin-addr=": f"127.0.0.1:{admin_port}"}
    args = []
    for arg in box["args"][3:]:
        name = arg.split("=", 1)[0] + "="
        args.append(name + moves[name] if name in moves else arg)
    return args


def write_secret_file(path: Path, url: str) -> Path:
    """The Secret's file as kubelet writes it: the URL, mode 0440."""
    path.write_text(url + "\n", encoding="utf-8")
    path.chmod(0o440)
    return path


def test_the_overlays_arguments_parse_into_the_shared_state(tmp_path: Path) -> None:
    """hookrunner's own flag parser takes every argument of the overlay, and the Secret's file gives the
    run state's URL, with no -state-dir beside it."""
    url = "postgresql://hookrunner:not-a-real-password@webhook-db-rw.default:5432/hookrunner?sslmode=require"
    box = container(built(HA))
    config = parse_args(["-hooks=/etc/webhook/hooks.yaml", *local_args(box, tmp_path / "url", 9001)])
    assert config.state_dir == "" and config.state_url == ""
    assert config.state_url_file == str(tmp_path / "url")
    write_secret_file(tmp_path / "url", url)
    assert resolve_state_url(config) == url
    with_journal = replace(config, state_dir="/var/lib/hookrunner/journal")
    with pytest.raises(Exception, match="cannot be used together"):
        resolve_state_url(with_journal)


@pytest.mark.slow
def test_hookrunner_serves_with_the_overlays_arguments(tmp_path: Path, pg_cluster: Cluster) -> None:
    """The installed hookrunner, started as the overlay starts it (the seed's three arguments, then the
    overlay's, the Secret's file holding a throwaway PostgreSQL's URL), serves a push and is ready."""
    [database] = re.findall(r"\bdbname=(\S+)", pg_cluster.create_database())
    url = pg_cluster.url(database)
    box = container(built(HA))
    hooks = local_etc(tmp_path / "etc")
    extra = (*local_args(box, write_secret_file(tmp_path / "url", url), free_port()), *WORKER_FLAGS)
    log = tmp_path / "receiver.log"
    receiver, base_url = start_receiver(hooks, log, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, extra)
    try:
        answer = push(f"{base_url}/hooks/rebuild-docs", "refs/heads/some-branch")
        assert (answer.status_code, answer.text) == (200, "payload received")
        assert requests.get(f"{base_url}/healthz?ready", timeout=10).status_code == 200
    finally:
        stop(receiver)
    output = log.read_text(encoding="utf-8", errors="replace")
    assert PASSWORD not in output
