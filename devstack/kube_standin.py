"""A local stand-in for the Kubernetes batch API, for scripts/dev and the docs-service tests.

It speaks HTTPS with a CA made at start, checks the bearer token against a token file, answers job
creation as the API server does (201 with the Job, or a Status object), and then really runs the Job's
container script on the host, with the container's paths mapped onto local folders.
"""

from __future__ import annotations

import argparse
import datetime
import hmac
import json
import os
import re
import secrets
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

from devstack.kube_pods import LogRequest, PodAPI, PodView, log_chunks, status_object

# The identity the tokens stand for: the service account of section 5.3 of the spec.
DEFAULT_USER = "system:serviceaccount:default:webhook-job-trigger"
# Paths that live in the container's own filesystem: each job gets a fresh local folder for them.
CONTAINER_SCRATCH_PATHS = ("/docs",)
# The alphabet and length the API server uses for generateName suffixes.
NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_SUFFIX_LENGTH = 5

JOBS_PATH = re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[a-z0-9-]+)/jobs(?:/(?P<name>[a-z0-9.-]+))?$")
ALL_JOBS_PATH = "/apis/batch/v1/jobs"
PODS_PATH = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/pods(?:/(?P<name>[a-z0-9.-]+)(?P<log>/log)?)?$"
)


@dataclass(frozen=True)
class StandinConfig:
    """Everything the stand-in needs, built once from the command line."""

    token_file: Path
    namespaces: frozenset[str]
    state_dir: Path
    site_root: Path
    repo_map: dict[str, str]
    run_jobs: bool
    # False models the base Role job-creator (create Jobs, nothing else): reading Jobs or pods is refused.
    # True adds what k8s/components/job-status grants, so reload.sh's WAIT_FOR_JOB can follow a build.
    allow_reads: bool = True
    user: str = DEFAULT_USER


@dataclass
class JobRecord:
    """A created Job and what became of it."""

    namespace: str
    name: str
    body: dict[str, Any]
    phase: str = "Pending"  # Pending -> Running -> Succeeded | Failed (the Job's and its one pod's)
    log_path: Path | None = None
    pod_name: str = ""

    def as_api_object(self) -> dict[str, Any]:
        """The Job as the API would return it, with a status the tests can poll.

        Conditions carry their fields in the API server's order (type, status, ..., reason, message).
        """
        status: dict[str, Any] = {}
        if self.phase == "Running":
            status = {"active": 1}
        elif self.phase == "Succeeded":
            status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        elif self.phase == "Failed":
            failed = {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
            status = {"failed": 1, "conditions": [failed]}
        return {**self.body, "status": status}

    def pod_view(self) -> PodView:
        containers = self.body.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
        return PodView(
            namespace=self.namespace,
            job_name=self.name,
            job_uid=str(self.body["metadata"]["uid"]),
            pod_name=self.pod_name,
            container=str(containers[0].get("name", "")),
            phase=self.phase,
            log_path=self.log_path,
        )


@dataclass
class JobStore:
    """All Jobs created so far; handler threads and job runners share it under a lock."""

    jobs: dict[tuple[str, str], JobRecord] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def add(self, record: JobRecord) -> bool:
        with self.lock:
            key = (record.namespace, record.name)
            if key in self.jobs:
                return False
            self.jobs[key] = record
            return True

    def get(self, namespace: str, name: str) -> JobRecord | None:
        with self.lock:
            return self.jobs.get((namespace, name))

    def list(self, namespace: str | None) -> list[JobRecord]:
        with self.lock:
            return [r for r in self.jobs.values() if namespace is None or r.namespace == namespace]

    def set_phase(self, record: JobRecord, phase: str) -> None:
        with self.lock:
            record.phase = phase


NOT_FOUND = status_object(404, "NotFound", "the server could not find the requested resource")


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(NAME_SUFFIX_ALPHABET) for _ in range(NAME_SUFFIX_LENGTH))


def map_script(
    script: str, *, repo_map: dict[str, str], scratch: dict[str, Path], mounts: dict[str, Path]
) -> str:
    """Rewrite a container script so it runs on the host.

    Clone URLs are replaced first, because a URL such as .../docs.git must not be mistaken for /docs.
    A container path is only replaced where it stands as a path of its own (not inside a longer word),
    and the local path is shell-quoted so that spaces in the checkout path cannot split words.
    """
    for url, local in repo_map.items():
        script = script.replace(url, shlex.quote(local))
    for container_path, local_path in {**scratch, **mounts}.items():
        pattern = re.compile(r"(?<![\w./-])" + re.escape(container_path) + r"(?![\w.-])")
        quoted = shlex.quote(str(local_path))
        # Backslashes doubled, so that a backslash in the local path is not read as a group reference.
        script = pattern.sub(quoted.replace("\\", "\\\\"), script)
    return script


class JobRunner:
    """Runs a created Job's container script on the host, in a thread of its own."""

    def __init__(self, config: StandinConfig, store: JobStore) -> None:
        self.config = config
        self.store = store

    def start(self, record: JobRecord) -> None:
        threading.Thread(target=self._run, args=(record,), name=f"job-{record.name}", daemon=True).start()

    def _run(self, record: JobRecord) -> None:
        job_dir = self.config.state_dir / "jobs" / record.namespace / record.name
        job_dir.mkdir(parents=True, exist_ok=True)
        record.log_path = job_dir / "log"
        with open(record.log_path, "wb") as log:
            try:
                argv = self._host_argv(record, job_dir)
            # A body the API accepts can still be one the stand-in cannot map (wrong shapes included):
            # the Job fails, as a pod that cannot start would, instead of hanging as Pending.
            except (ValueError, TypeError, AttributeError, KeyError, OSError) as err:
                log.write(f"kube-standin: cannot run this job: {err}\n".encode())
                self.store.set_phase(record, "Failed")
                print(f"kube-standin: job {record.namespace}/{record.name} failed: {err}", flush=True)
                return
            env = dict(os.environ)
            # mkdocs and its theme come from the interpreter's environment (the project's .venv).
            env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
            env["HOME"] = str(job_dir)
            self.store.set_phase(record, "Running")
            proc = subprocess.Popen(argv, cwd=job_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
            with self.store.lock:
                self.store.processes.append(proc)
            code = proc.wait()
        phase = "Succeeded" if code == 0 else "Failed"
        self.store.set_phase(record, phase)
        print(
            f"kube-standin: job {record.namespace}/{record.name} {phase.lower()} (log: {record.log_path})",
            flush=True,
        )

    def _host_argv(self, record: JobRecord, job_dir: Path) -> list[str]:
        pod = record.body.get("spec", {}).get("template", {}).get("spec", {})
        containers = pod.get("containers") or []
        if len(containers) != 1:
            raise ValueError("exactly one container is supported")
        container = containers[0]
        argv = list(container.get("command", [])) + list(container.get("args", []))
        if len(argv) != 3 or argv[:2] != ["/bin/sh", "-c"]:
            raise ValueError("only a command of the form /bin/sh -c <script> is supported")
        claims = {
            v.get("name"): v.get("persistentVolumeClaim", {}).get("claimName") for v in pod.get("volumes", [])
        }
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts", []):
            if not claims.get(mount.get("name")):
                raise ValueError(f"volume {mount.get('name')!r} is not a persistentVolumeClaim")
            # One shared volume per namespace: the PVC's contents are the site of that environment.
            site = self.config.site_root / record.namespace
            site.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = site.resolve()
        scratch = {
            path: (job_dir / "rootfs" / path.lstrip("/")).resolve() for path in CONTAINER_SCRATCH_PATHS
        }
        for local in scratch.values():
            local.parent.mkdir(parents=True, exist_ok=True)
        script = map_script(argv[2], repo_map=self.config.repo_map, scratch=scratch, mounts=mounts)
        return ["/bin/sh", "-c", script]


def validate_job(body: Any, namespace: str) -> dict[str, Any] | None:
    """Return a Status for a body the API server would refuse, or None when it is acceptable."""
    if not isinstance(body, dict):
        return status_object(400, "BadRequest", "the body of the request was not a JSON object")
    if body.get("apiVersion") != "batch/v1" or body.get("kind") != "Job":
        return status_object(
            400,
            "BadRequest",
            f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) "
            "do not match the expected batch/v1 Job",
        )
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    if meta.get("namespace", namespace) != namespace:
        return status_object(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )
    if not meta.get("name") and not meta.get("generateName"):
        return status_object(
            422,
            "Invalid",
            'Job.batch "" is invalid: metadata.name: Required value: name or generateName is required',
            {"kind": "Job", "group": "batch"},
        )
    return None


class StandinServer(ThreadingHTTPServer):
    """The HTTPS server; handlers reach the configuration and the job store through it."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: StandinConfig, tls: ssl.SSLContext) -> None:
        # An IPv6 address (a cluster's KUBERNETES_SERVICE_HOST can be one) needs an IPv6 socket.
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, BatchAPIHandler)
        self.config = config
        self.store = JobStore()
        self.runner = JobRunner(config, self.store)
        self.socket = tls.wrap_socket(self.socket, server_side=True)


class BatchAPIHandler(BaseHTTPRequestHandler):
    """The few batch/v1 Job endpoints reload.sh and the tests use."""

    server: StandinServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        sys.stderr.write(f"kube-standin: {self.address_string()} {format % args}\n")

    def _send(self, code: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        """Compare the bearer token with the token file, read afresh so a rotation takes effect at once."""
        expected = self.server.config.token_file.read_text(encoding="utf-8").strip()
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not expected or not hmac.compare_digest(token.strip(), expected):
            self._send(401, status_object(401, "Unauthorized", "Unauthorized"))
            return False
        return True

    def _forbidden(
        self, verb: str, namespace: str, resource: str = "jobs", group: str = "batch", name: str | None = None
    ) -> None:
        """403 as RBAC words it: `jobs.batch "x" is forbidden: User ... cannot get resource "jobs" ...`."""
        user = self.server.config.user
        kind = resource.split("/")[0]
        subject = f"{kind}.{group}" if group else kind
        if name is not None:
            subject += f' "{name}"'
        message = (
            f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" in the namespace "{namespace}"'
        )
        details = {"name": name, "group": group, "kind": kind} if name else {"group": group, "kind": kind}
        self._send(403, status_object(403, "Forbidden", message, details))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._authorized():
            return
        path, _, query = self.path.partition("?")
        # The cluster-wide list is the tests' own view of what was created; it is never refused.
        if path == ALL_JOBS_PATH:
            self._send_list(None)
            return
        pods = PODS_PATH.match(path)
        if pods is not None:
            self._get_pods(pods["ns"], pods["name"], bool(pods["log"]), query)
            return
        match = JOBS_PATH.match(path)
        if match is None:
            self._send(404, NOT_FOUND)
            return
        namespace, name = match["ns"], match["name"]
        if namespace not in self.server.config.namespaces or not self.server.config.allow_reads:
            self._forbidden("get" if name else "list", namespace, name=name)
            return
        if name is None:
            self._send_list(namespace)
            return
        record = self.server.store.get(namespace, name)
        if record is None:
            self._send(
                404,
                status_object(
                    404,
                    "NotFound",
                    f'jobs.batch "{name}" not found',
                    {"name": name, "group": "batch", "kind": "jobs"},
                ),
            )
            return
        self._send(200, record.as_api_object())

    def _get_pods(self, namespace: str, name: str | None, log: bool, query: str) -> None:
        if namespace not in self.server.config.namespaces or not self.server.config.allow_reads:
            verb, resource = ("get", "pods/log") if log else ("get", "pods") if name else ("list", "pods")
            self._forbidden(verb, namespace, resource, "", name)
            return
        store = self.server.store
        api = PodAPI(lambda ns: [r.pod_view() for r in store.list(ns)])
        answer = api.get(namespace, name, log, query)
        if isinstance(answer, LogRequest):
            self._stream_log(answer)
        else:
            self._send(*answer)

    def _stream_log(self, request: LogRequest) -> None:
        """The log as text/plain, chunked as the API server sends a followed log; ends the connection."""
        record = self.server.store.get(request.pod.namespace, request.pod.job_name)
        assert record is not None  # the view was made from this very record

        def phase() -> str:
            with self.server.store.lock:
                return record.phase

        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for data in log_chunks(request, phase):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return  # the reader went away: nothing more to do for it

    def _send_list(self, namespace: str | None) -> None:
        items = [r.as_api_object() for r in self.server.store.list(namespace)]
        self._send(200, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": items})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self._read_body()
        if not self._authorized():
            return
        match = JOBS_PATH.match(self.path)
        if match is None or match["name"] is not None:
            self._send(404, NOT_FOUND)
            return
        namespace = match["ns"]
        if namespace not in self.server.config.namespaces:
            self._forbidden("create", namespace)
            return
        content_type = self.headers.get("Content-Type", "")
        if content_type.split(";")[0].strip() != "application/json":
            self._send(
                415,
                status_object(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f'include: application/json; got "{content_type}"',
                ),
            )
            return
        try:
            job = json.loads(body)
        except ValueError as err:
            self._send(
                400, status_object(400, "BadRequest", f"the body of the request could not be decoded: {err}")
            )
            return
        problem = validate_job(job, namespace)
        if problem is not None:
            self._send(problem["code"], problem)
            return
        record = self._create(job, namespace)
        if record is None:
            name = job["metadata"]["name"]
            self._send(
                409,
                status_object(
                    409,
                    "AlreadyExists",
                    f'jobs.batch "{name}" already exists',
                    {"name": name, "group": "batch", "kind": "jobs"},
                ),
            )
            return
        print(f"kube-standin: created job {namespace}/{record.name}", flush=True)
        self._send(201, record.as_api_object())
        if self.server.config.run_jobs:
            self.server.runner.start(record)

    def _create(self, job: dict[str, Any], namespace: str) -> JobRecord | None:
        given = job["metadata"]
        name = given.get("name") or generate_name(given["generateName"])
        # The server's fields come first, as in a real answer, so `"metadata":{"name":` leads the object.
        metadata: dict[str, Any] = {"name": name}
        metadata.update({k: v for k, v in given.items() if k != "name"})
        metadata.update(
            {
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": "1",
                "creationTimestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
        record = JobRecord(
            namespace=namespace,
            name=name,
            body={**job, "metadata": metadata},
            # The Job controller names its pod after the Job, with a suffix of its own.
            pod_name=generate_name(name + "-"),
        )
        return record if self.server.store.add(record) else None


def write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def make_tls(host: str, ca_out: Path) -> ssl.SSLContext:
    """Make a fresh CA, write its certificate to ca_out, and return a server context for host."""
    ca = trustme.CA(organization_name="kube-standin")
    cert = ca.issue_cert(*dict.fromkeys([host, "localhost", "127.0.0.1", "::1"]))
    write_private(ca_out, ca.cert_pem.bytes())
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    return ctx


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kube-standin", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--port-file", type=Path, help="write the chosen port here once listening")
    parser.add_argument("--token-file", type=Path, required=True, help="the accepted bearer token")
    parser.add_argument("--ca-out", type=Path, required=True, help="where to write the CA certificate")
    parser.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        default=None,
        help="namespace where job creation is allowed (repeat; default dev and prod)",
    )
    parser.add_argument("--state-dir", type=Path, default=Path(".local/kube"), help="job folders and logs")
    parser.add_argument(
        "--site-root",
        type=Path,
        default=Path(".local/site"),
        help="a Job's volume mount becomes SITE_ROOT/<namespace>",
    )
    parser.add_argument(
        "--repo-map",
        action="append",
        default=[],
        metavar="URL=PATH",
        help="clone from PATH (a local git repository) wherever the script names URL",
    )
    parser.add_argument("--no-run", action="store_true", help="record Jobs without running them")
    parser.add_argument(
        "--create-only",
        action="store_true",
        help="refuse reads of Jobs and pods (403), as the base Role job-creator does; by default they are "
        "allowed, as with k8s/components/job-status",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repo_map: dict[str, str] = {}
    for item in args.repo_map:
        url, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"kube-standin: --repo-map needs URL=PATH, got {item!r}")
        # file:// so that git honours --depth for a local clone.
        repo_map[url] = Path(path).resolve().as_uri()
    config = StandinConfig(
        token_file=args.token_file,
        namespaces=frozenset(args.namespaces or ["dev", "prod"]),
        state_dir=args.state_dir.resolve(),
        site_root=args.site_root.resolve(),
        repo_map=repo_map,
        run_jobs=not args.no_run,
        allow_reads=not args.create_only,
    )
    server = StandinServer((args.host, args.port), config, make_tls(args.host, args.ca_out))
    port = server.server_address[1]

    def stop(_signum: int, _frame: object) -> None:
        # shutdown() waits for serve_forever, so it must run outside the serving thread's signal handler.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file is not None:
        # Written whole and renamed into place, so a reader polling for it never sees half a number.
        partial = args.port_file.with_name(args.port_file.name + ".partial")
        partial.write_text(f"{port}\n", encoding="utf-8")
        partial.replace(args.port_file)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"kube-standin: listening on https://{shown}:{port} (CA: {args.ca_out})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        with server.store.lock:
            running = [p for p in server.store.processes if p.poll() is None]
        for proc in running:
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
