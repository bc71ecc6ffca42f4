"""Local stand-ins for a running Ganeti's two query interfaces, fed with recorded answers.

`RapiServer` serves RAPI answers (Ganeti's own recorded `test/data/htools/rapi/*.json`, or ones
built from a text snapshot) over HTTP or HTTPS; `LuxiResponder` answers LUXI queries from the
same answers on a Unix socket. The real htools and exalloc both read from them, so whatever
either reads is compared on identical bytes. Both record what they were asked and can be told
to misbehave (a handler per path or per call) for the fault tests.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from model.backends.iallocator import ipolicy_json
from model.cluster import Cluster

RAPI_PATHS = {
    "groups": "/2/groups?bulk=1",
    "nodes": "/2/nodes?bulk=1",
    "instances": "/2/instances?bulk=1",
    "info": "/2/info",
}
END = b"\x03"


@dataclass
class RapiAnswers:
    """The four RAPI answers as JSON values (lists of objects, and the info object)."""

    groups: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    info: dict[str, Any]

    @classmethod
    def recorded(cls, folder: Path) -> RapiAnswers:
        """Ganeti's recorded answers (test/data/htools/rapi)."""
        return cls(*(json.loads((folder / f"{k}.json").read_text()) for k in RAPI_PATHS))

    def copy(self) -> RapiAnswers:
        return copy.deepcopy(self)

    def bodies(self) -> dict[str, bytes]:
        return {path: json.dumps(getattr(self, k)).encode() for k, path in RAPI_PATHS.items()}

    def write(self, folder: Path) -> None:
        """As `file://` folders hold them."""
        folder.mkdir(parents=True, exist_ok=True)
        for key in RAPI_PATHS:
            (folder / f"{key}.json").write_text(json.dumps(getattr(self, key)))

    @classmethod
    def of_cluster(cls, cluster: Cluster, hypervisor: str = "xen-pvm") -> RapiAnswers:
        """The answers a cluster like this snapshot would give, in RAPI's bulk shape."""
        groups = [
            {
                "name": g.name,
                "uuid": g.uuid,
                "alloc_policy": g.alloc_policy,
                "ipolicy": ipolicy_json(g.ipolicy),
                "tags": list(g.tags),
            }
            for g in cluster.groups
        ]
        nodes = [
            {
                "name": n.name,
                "mtotal": n.total_memory_mib,
                "mnode": n.node_memory_mib,
                "mfree": n.free_memory_mib,
                "dtotal": n.total_disk_mib,
                "dfree": n.free_disk_mib,
                "ctotal": n.total_cpus,
                "cnos": n.reserved_cpus,
                "offline": n.offline,
                "drained": False,
                "vm_capable": True,
                "group.uuid": n.group_uuid,
                "tags": list(n.tags),
                "sptotal": n.spindles,
                "spfree": n.free_spindles,
                "ndparams": {
                    "spindle_count": n.spindles,
                    "exclusive_storage": n.exclusive_storage,
                    "cpu_speed": n.cpu_speed,
                },
            }
            for n in cluster.nodes
        ]
        instances = [
            {
                "name": i.name,
                "disk_usage": i.disk_mib,
                "disk.sizes": [d.size_mib for d in i.disks],
                "disk.spindles": [d.spindles for d in i.disks],
                "beparams": {
                    "maxmem": i.memory_mib,
                    "minmem": i.memory_mib,
                    "vcpus": i.vcpus,
                    "auto_balance": i.auto_balance,
                    "spindle_use": i.spindle_use,
                },
                "oper_ram": i.memory_mib if i.status == "running" else None,
                "pnode": i.primary,
                "snodes": [i.secondary] if i.secondary else [],
                "status": i.status,
                "tags": list(i.tags),
                "disk_template": i.disk_template,
                "forthcoming": i.forthcoming,
            }
            for i in cluster.instances
        ]
        master = next((n.name for n in cluster.nodes if n.master), cluster.nodes[0].name)
        info = {
            "master": master,
            "tags": list(cluster.cluster_tags),
            "ipolicy": ipolicy_json(cluster.cluster_policy),
            "default_hypervisor": hypervisor,
        }
        return cls(groups, nodes, instances, info)


# -- RAPI over HTTP(S) --------------------------------------------------------------------------

Handler = Callable[[BaseHTTPRequestHandler], None]


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A throw-away certificate for 127.0.0.1 (htools and exalloc do not verify it)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (the fault tests) is no news: print nothing."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class RapiServer:
    """A RAPI stand-in on 127.0.0.1: `bodies` by path, or a `handlers` entry doing anything."""

    def __init__(
        self,
        bodies: dict[str, bytes],
        *,
        tls: tuple[Path, Path] | None = None,
        handlers: dict[str, Handler] | None = None,
        port: int = 0,
    ) -> None:
        self.bodies = bodies
        self.handlers = handlers or {}
        self.requests: list[str] = []
        server = self

        class Answer(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server.requests.append(self.path)
                custom = server.handlers.get(self.path) or server.handlers.get("*")
                if custom is not None:
                    custom(self)
                    return
                body = server.bodies.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = _QuietServer(("127.0.0.1", port), Answer)
        self.httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.port = self.httpd.server_address[1]
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> RapiServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- LUXI over a Unix socket --------------------------------------------------------------------

# Ganeti's node parameter defaults, for the ndp/ fields a recorded node does not carry.
ND_DEFAULTS = {"spindle_count": 1, "exclusive_storage": False, "cpu_speed": 1.0}
# Node fields that only a reachable node reports; Ganeti answers them "offline" (status 4)
# for an offline node.
LIVE_NODE_FIELDS = {"mtotal", "mnode", "mfree", "dtotal", "dfree", "ctotal", "cnos"}
LIVE_NODE_FIELDS |= {"sptotal", "spfree"}


def _node_field(node: dict[str, Any], name: str) -> list:
    if name.startswith("ndp/"):
        key = name[4:]
        return [0, node.get("ndparams", {}).get(key, ND_DEFAULTS.get(key))]
    if name in LIVE_NODE_FIELDS and node.get("offline"):
        return [4, None]
    if name not in node or node[name] is None and name in LIVE_NODE_FIELDS:
        return [3, None]
    return [0, node[name]]


def _instance_field(instance: dict[str, Any], name: str) -> list:
    if name.startswith("be/"):
        key = {"memory": "maxmem"}.get(name[3:], name[3:])
        return [0, instance["beparams"].get(key)]
    if name == "forthcoming":
        return [0, instance.get("forthcoming", False)]
    return [0, instance[name]] if name in instance else [3, None]


class LuxiResponder:
    """Answers `Query` (node, instance, group) and `QueryClusterInfo` from RAPI answers, one
    connection at a time, on a Unix socket. `faults` maps a method (or "Query node", ...) to
    a function taking the connection, which then answers (or not) as it likes."""

    def __init__(
        self,
        path: Path,
        answers: RapiAnswers,
        *,
        faults: dict[str, Callable[[socket.socket], None]] | None = None,
    ) -> None:
        self.path = path
        self.answers = answers
        self.faults = faults or {}
        self.requests: list[Any] = []
        self.raw_requests: list[bytes] = []  # each message as sent, without its 0x03
        self._replies: dict[str, bytes] = {}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(5)
        self.listener.settimeout(0.02)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> LuxiResponder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                try:
                    self._converse(conn)
                except OSError:
                    pass

    def _converse(self, conn: socket.socket) -> None:
        buffer = b""
        while not self._stop.is_set():
            while END not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            raw, _, buffer = buffer.partition(END)
            request = json.loads(raw)
            self.requests.append(request)
            self.raw_requests.append(raw)
            method, args = request["method"], request["args"]
            key = f"{method} {args[0]}" if method == "Query" else method
            fault = self.faults.get(key) or self.faults.get(method)
            if fault is not None:
                fault(conn)
                return
            key = json.dumps([method, args])
            if key not in self._replies:  # the answers do not change while serving
                try:
                    reply = {"success": True, "result": self.result(method, args)}
                except (KeyError, AttributeError, TypeError, ValueError):
                    return  # answers it cannot serve (spoiled on purpose): hang up
                if method not in ("Query", "QueryClusterInfo"):  # jobs change: never kept
                    conn.sendall(json.dumps(reply).encode() + END)
                    continue
                self._replies[key] = json.dumps(reply).encode() + END
            conn.sendall(self._replies[key])

    def result(self, method: str, args: list) -> Any:
        return luxi_result(self.answers, method, args)


class JobResponder(LuxiResponder):
    """A LuxiResponder that also takes jobs, as Ganeti's master does over LUXI: ids from 1 on
    `SubmitManyJobs` (or the refusal `refuse` says for a job's ordinal), and `QueryJobs`
    statuses from `status(job_id, polls)` (polls: that job's queries so far, from 1); by
    default every job succeeds at once. `jobs` keeps what was submitted, one list per call."""

    def __init__(
        self,
        path: Path,
        answers: RapiAnswers,
        *,
        status: Callable[[int, int], str] | None = None,
        refuse: Callable[[int], str | None] | None = None,
    ) -> None:
        super().__init__(path, answers)
        self.status = status or (lambda job, polls: "success")
        self.refuse = refuse or (lambda job: None)
        self.jobs: list[list[list[dict[str, Any]]]] = []
        self.polls: dict[int, int] = {}

    def result(self, method: str, args: list) -> Any:
        if method == "SubmitManyJobs":
            self.jobs.append(args[0])
            out: list[list[Any]] = []
            for _ in args[0]:
                job = sum(len(call) for call in self.jobs[:-1]) + len(out) + 1
                why = self.refuse(job)
                out.append([False, why] if why is not None else [True, str(job)])
            return out
        if method == "QueryJobs":
            rows = []
            for job in args[0]:
                self.polls[job] = self.polls.get(job, 0) + 1
                rows.append([self.status(job, self.polls[job])])
            return rows
        return super().result(method, args)


def luxi_result(answers: RapiAnswers, method: str, args: list) -> Any:
    """What Ganeti's query daemon answers to `Query` and `QueryClusterInfo` on this cluster."""
    if method == "QueryClusterInfo":
        return answers.info
    what, fields, _ = args
    if what == "node":
        rows = [[_node_field(n, f) for f in fields] for n in answers.nodes]
    elif what == "instance":
        rows = [[_instance_field(i, f) for f in fields] for i in answers.instances]
    else:
        rows = [[[0, g[f]] if f in g else [3, None] for f in fields] for g in answers.groups]
    return {"fields": [{"name": f} for f in fields], "data": rows}
