"""k8s/: every resource of the seed, valid against the Kubernetes schemas, wired together by kustomize; and
the same checks on the HA overlay's build (k8s-overlays/ha/, with its own in test_docs_k8s_ha.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from docs_support import ETC, REPO_ROOT, state_dir
from k8s_support import BASE, HA, K8S, VARIANTS, Manifest, Variant, built, container, find, pod_spec

# Kinds served by CRDs (cert-manager, Traefik): no schema in kubernetes-validate, so checked field by field.
CRD_GROUPS = ("cert-manager.io/", "traefik.io/")
HOST = "hooks.example.org"
TLS_SECRET = "webhook-docs-tls"
# The seed's three arguments, then those the bundle adds after the run state's: the run history's admin
# listener on the pod's loopback (docs/history.md).
SEED_ARGS = ["-hooks=/etc/webhook/hooks.yaml", "-hotreload", "-verbose"]
ADMIN_ARGS = ["-admin-addr=127.0.0.1:9001", "-history-output=16KiB"]
# A database URL that carries a password (postgresql://user:secret@host/db): only ever in a Secret.
PASSWORD_IN_URL = re.compile(r"postgres(?:ql)?://[^\s/@:]+:[^\s/@]+@")


def kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    return data


def resources() -> list[dict[str, Any]]:
    """Every object of the files the kustomization lists (the generated ConfigMap aside)."""
    found: list[dict[str, Any]] = []
    for entry in kustomization()["resources"]:
        path = (K8S / entry).resolve()
        if path.is_dir():
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return found


@pytest.fixture(params=VARIANTS, ids=lambda variant: variant.name)
def variant(request: pytest.FixtureRequest) -> Variant:
    """Each check below runs on the base's build and on the HA overlay's."""
    chosen: Variant = request.param
    return chosen


@pytest.fixture
def objects(variant: Variant) -> list[Manifest]:
    """What `kubectl apply -k` sends for the variant."""
    return built(variant.path)


def test_kustomization_lists_every_manifest() -> None:
    listed = {(K8S / entry).resolve() for entry in kustomization()["resources"]}
    on_disk = {p.resolve() for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert on_disk <= listed
    assert ETC.resolve() in listed


def test_every_builtin_kind_is_valid_in_strict_mode(variant: Variant, objects: list[Manifest]) -> None:
    version = kubernetes_validate.latest_version()
    builtin = [r for r in objects if not r["apiVersion"].startswith(CRD_GROUPS)]
    kinds = {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "PersistentVolumeClaim",
        "ConfigMap",
        "Deployment",
        "Service",
    }
    assert {r["kind"] for r in builtin} == kinds | variant.own_kinds
    for resource in builtin:
        kubernetes_validate.validate(resource, version, strict=True)


def test_only_crd_kinds_are_left_to_field_checks(objects: list[Manifest]) -> None:
    crds = sorted((r["apiVersion"], r["kind"]) for r in objects if r["apiVersion"].startswith(CRD_GROUPS))
    assert crds == [
        ("cert-manager.io/v1", "Certificate"),
        ("traefik.io/v1alpha1", "IngressRoute"),
        ("traefik.io/v1alpha1", "Middleware"),
    ]


def test_deployment_is_the_seeds(variant: Variant, objects: list[Manifest]) -> None:
    deployment = find(objects, "Deployment", "webhook-docs", "default")
    assert deployment["metadata"]["labels"] == {"app": "webhook-docs"}
    spec = deployment["spec"]
    assert spec["replicas"] == variant.replicas
    assert spec["selector"]["matchLabels"] == {"app": "webhook-docs"}
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"] == {"app": "webhook-docs"}
    assert pod["serviceAccountName"] == "webhook-job-trigger"
    [box] = pod["containers"]
    assert box["command"] == ["/app/webhook"]
    # The seed's three arguments, then the run state's (the journal, docs/operations.md; or the overlay's
    # shared one, in the journal's place), then the run history's.
    assert box["args"] == [*SEED_ARGS, variant.state_arg, *ADMIN_ARGS]
    assert box["ports"][0]["containerPort"] == 9000
    [config] = [v for v in pod["volumes"] if v.get("configMap")]
    assert config["configMap"] == {"name": "webhook-etc", "defaultMode": 493}
    [mount] = [m for m in box["volumeMounts"] if m["name"] == config["name"]]
    assert mount["mountPath"] == "/etc/webhook"


def test_deployment_is_production_ready(objects: list[Manifest]) -> None:
    pod = pod_spec(objects)
    box = container(objects)
    # Alive while the server answers; ready only while hooks are loaded (docs/observability.md).
    assert box["livenessProbe"]["httpGet"]["path"] == "/"
    assert box["readinessProbe"]["httpGet"]["path"] == "/healthz?ready"
    for probe in ("livenessProbe", "readinessProbe"):
        assert box[probe]["httpGet"]["port"] in ("http", 9000)
    assert set(box["resources"]["requests"]) == {"cpu", "memory"}
    assert set(box["resources"]["limits"]) == {"cpu", "memory"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert box["securityContext"]["allowPrivilegeEscalation"] is False
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    assert box["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # A read-only root still needs a writable /tmp for reload.sh's mktemp.
    tmp_volumes = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    assert any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in box["volumeMounts"])
    # Every mount names a volume of the pod, and every volume is mounted.
    volumes = {v["name"] for v in pod["volumes"]}
    assert sorted(m["name"] for m in box["volumeMounts"]) == sorted(volumes)


def test_the_run_journal_is_on_an_empty_dir_inside_the_mount() -> None:
    """The base's embedded run state (the overlay's shared one: test_docs_k8s_ha.py)."""
    objects = built(BASE.path)
    pod = pod_spec(objects)
    box = container(objects)
    journal = state_dir(box["args"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in box["volumeMounts"] if journal.startswith(m["mountPath"] + "/")]
    # A folder inside the volume, so hookrunner creates it private (an emptyDir's root is world-writable).
    assert journal != mount["mountPath"]
    assert "emptyDir" in volumes[mount["name"]] and not mount.get("readOnly")


def test_deployment_user_is_the_containerfiles(objects: list[Manifest]) -> None:
    pod = pod_spec(objects)
    containerfile = (REPO_ROOT / "Containerfile").read_text(encoding="utf-8")
    users = [line.split()[1] for line in containerfile.splitlines() if line.startswith("USER ")]
    assert users[-1] == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"


def test_the_admin_port_is_for_port_forward_only(objects: list[Manifest]) -> None:
    """The admin listener (docs/history.md): a second, named container port on the pod's loopback, which
    kubectl port-forward reaches; neither the Service nor the IngressRoute leads there."""
    box = container(objects)
    ports = {port["name"]: port["containerPort"] for port in box["ports"]}
    assert ports == {"http": 9000, "admin": 9001}
    [addr] = [arg.split("=", 1)[1] for arg in box["args"] if arg.startswith("-admin-addr=")]
    assert addr == f"127.0.0.1:{ports['admin']}"  # loopback: no token needed, no other pod reaches it
    assert not any(arg.startswith(("-admin-insecure", "-admin-token-file")) for arg in box["args"])
    service_ports = [
        port["targetPort"] for port in find(objects, "Service", "webhook", "default")["spec"]["ports"]
    ]
    assert ports["admin"] not in service_ports and "admin" not in service_ports
    routes = [
        svc
        for doc in objects
        if doc["kind"] == "IngressRoute"
        for route in doc["spec"]["routes"]
        for svc in route.get("services", [])
    ]
    assert routes and all(svc["port"] != ports["admin"] for svc in routes)


def test_service_is_the_seeds(objects: list[Manifest]) -> None:
    service = find(objects, "Service", "webhook", "default")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {"app": "webhook-docs"}
    [port] = service["spec"]["ports"]
    assert (port["protocol"], port["port"], port["targetPort"]) == ("TCP", 9000, 9000)


def test_rbac_grants_create_jobs_and_nothing_else(objects: list[Manifest]) -> None:
    find(objects, "ServiceAccount", "webhook-job-trigger", "default")
    roles = [r for r in objects if r["kind"] in ("Role", "ClusterRole")]
    bindings = [r for r in objects if r["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["dev", "prod"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["dev", "prod"]
    for namespace in ("dev", "prod"):
        role = find(objects, "Role", "job-creator", namespace)
        assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]
        binding = find(objects, "RoleBinding", "job-creator-binding", namespace)
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "webhook-job-trigger", "namespace": "default"}
        ]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "job-creator",
        }


def test_storage_is_one_shared_claim_per_environment(objects: list[Manifest]) -> None:
    for namespace in ("dev", "prod"):
        find(objects, "Namespace", namespace)
        claim = find(objects, "PersistentVolumeClaim", "mkdocs-pvc", namespace)
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert claim["spec"]["resources"]["requests"]["storage"]


def test_certificate_is_the_seeds(objects: list[Manifest]) -> None:
    spec = find(objects, "Certificate", TLS_SECRET, "default")["spec"]
    assert spec["secretName"] == TLS_SECRET
    assert spec["issuerRef"]["kind"] == "ClusterIssuer" and spec["issuerRef"]["name"]
    assert spec["commonName"] == HOST
    assert spec["dnsNames"] == [HOST]
    assert spec["privateKey"] == {"algorithm": "RSA", "encoding": "PKCS1", "size": 2048}
    assert spec["usages"] == ["server auth", "client auth"]
    assert (spec["duration"], spec["renewBefore"]) == ("2160h", "360h")
    assert spec["secretTemplate"]["annotations"] == {"kubeseal-secret": "true"}
    assert spec["secretTemplate"]["labels"] == {"domain": HOST}


def test_ingress_route_and_rate_limit(objects: list[Manifest]) -> None:
    route = find(objects, "IngressRoute", "webhook-docs", "default")["spec"]
    assert route["entryPoints"] == ["websecure"]
    [rule] = route["routes"]
    assert rule["kind"] == "Rule"
    assert rule["match"] == f"Host(`{HOST}`)"
    assert rule["middlewares"] == [{"name": "ratelimit"}]
    assert rule["services"] == [{"name": "webhook", "port": 9000}]
    assert route["tls"] == {"secretName": TLS_SECRET}
    limit = find(objects, "Middleware", "ratelimit", "default")["spec"]["rateLimit"]
    assert limit["average"] > 0 and limit["burst"] >= 1 and limit["period"]


def test_kubectl_kustomize_builds_everything(variant: Variant, objects: list[Manifest]) -> None:
    """The exact build `kubectl apply -k` performs, with kubectl's default load restrictor: the files the
    base lists, the generated ConfigMap, and what the variant adds."""
    assert len(objects) == len(resources()) + 1 + len(variant.own_kinds)
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["name"] == "webhook-etc"  # no hash suffix: updates land in place
    assert config_map["metadata"]["namespace"] == "default"
    assert config_map["data"] == {
        name: (ETC / name).read_text(encoding="utf-8")
        for name in ("hooks.yaml", "reload.sh", "mkdocs-dev.json", "mkdocs-main.json")
    }
    image = container(objects)["image"]
    assert image.rsplit(":", 1)[1] == kustomization()["images"][0]["newTag"]
    assert "/" in image, "the kustomization's images entry must replace the bare name"


def test_no_secret_or_credential_is_committed(objects: list[Manifest]) -> None:
    assert "Secret" not in {r["kind"] for r in objects}
    for path in [*K8S.rglob("*.yaml"), *HA.rglob("*.yaml"), *ETC.iterdir()]:
        text = Path(path).read_text(encoding="utf-8").lower()
        assert "begin private key" not in text and "begin rsa private key" not in text
        assert not PASSWORD_IN_URL.search(text), path
