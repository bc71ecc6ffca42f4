"""A running cluster through LUXI (`-L[SOCKET]`), Ganeti's local query protocol, as htools 3.0.2.

One Unix-socket connection (default `/var/run/ganeti/socket/ganeti-query`, under
`$GANETI_ROOTDIR` when set) carries four calls, each a JSON object `{"method", "args"}` ended
by the byte 0x03 and answered by `{"success", "result"}` ended the same way: `Query` of nodes,
of instances (each with htools' own field list and no filter), `QueryClusterInfo`, then `Query`
of groups. A query answers `{"data": rows}`, every field a `[status, value]` pair (status 0 is
a value; 1-4 say why there is none). Connecting may take 30 s, each read or write 180 s.
Fields, defaults and error texts: docs/live.md.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.backends.iallocator import (
    _Bad,
    _get,
    _ipolicy,
    _OutOfRange,
    _read_bool,
    _read_double,
    _read_enum,
    _read_int,
    _read_list,
    _read_mib,
    _read_mib_double,
    _read_object,
    _read_string,
    _read_strings,
)
from model.backends.live import (
    HYPERVISORS,
    ClusterInfo,
    NodeReading,
    assemble,
    check_group,
    check_node,
    decode_json,
    group_lookup,
    instance_of,
)
from model.cluster import (
    ALLOC_POLICIES,
    DISK_TEMPLATES,
    INSTANCE_STATUSES,
    Cluster,
    Instance,
    NodeGroup,
)
from model.errors import LiveSourceError, printable

DEFAULT_SOCKET = "/var/run/ganeti/socket/ganeti-query"  # Path.defaultQuerySocket
CONNECT_TIMEOUT_S = 30.0  # luxiDefCtmo
READ_WRITE_TIMEOUT_S = 180.0  # luxiDefRwto, for each read and each write
END_OF_MESSAGE = b"\x03"
_RECV_BYTES = 1 << 16

# The fields htools asks for (Backend/Luxi.hs), in its order: rows come back in this order.
NODE_FIELDS = (
    "name",
    "mtotal",
    "mnode",
    "mfree",
    "dtotal",
    "dfree",
    "ctotal",
    "cnos",
    "offline",
    "drained",
    "vm_capable",
    "ndp/spindle_count",
    "group.uuid",
    "tags",
    "ndp/exclusive_storage",
    "sptotal",
    "spfree",
    "ndp/cpu_speed",
)
INSTANCE_FIELDS = (
    "name",
    "disk_usage",
    "be/memory",
    "be/vcpus",
    "status",
    "pnode",
    "snodes",
    "tags",
    "be/auto_balance",
    "disk_template",
    "be/spindle_use",
    "disk.sizes",
    "disk.spindles",
    "forthcoming",
)
GROUP_FIELDS = ("uuid", "name", "alloc_policy", "ipolicy", "tags")
#: A job's statuses (Ganeti's JobStatus): up to running it is not finished.
JOBS_UNFINISHED = ("queued", "waiting", "canceling", "running")
JOBS_FINISHED = ("canceled", "success", "error")

# Query result statuses (Query/Language.hs checkRS): why a field has no value.
_STATUS_TEXT = {
    1: "Unknown field",
    2: "No data for a field",
    3: "Ganeti reports unavailable data",
    4: "Ganeti reports resource as offline",
}


def default_socket() -> str:
    """htools' default query socket, under `$GANETI_ROOTDIR` as Ganeti's paths are."""
    return os.environ.get("GANETI_ROOTDIR", "") + DEFAULT_SOCKET


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for the connection and for each read or write (htools: 30 and 180)."""

    connect_s: float
    read_write_s: float

    @classmethod
    def htools(cls) -> Timeouts:
        return cls(CONNECT_TIMEOUT_S, READ_WRITE_TIMEOUT_S)


@dataclass(frozen=True)
class LuxiReplies:
    """The decoded `result` of each call (htools asks in the order nodes, instances,
    cluster info, groups)."""

    groups: Any
    nodes: Any
    instances: Any
    info: Any


# ---------------------------------------------------------------------------------------------
# The connection.


def query_call(what: str, fields: tuple[str, ...]) -> tuple[str, list]:
    """A `Query` call as htools sends it: item type, fields, no filter."""
    return "Query", [what, list(fields), None]


class LuxiConnection:
    """One client connection; `call` sends a request and returns its `result`."""

    def __init__(self, path: str, timeouts: Timeouts | None = None) -> None:
        self.path = path
        self.timeouts = timeouts or Timeouts.htools()
        self._buffer = b""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(self.timeouts.connect_s)
        try:
            self._sock.connect(path)
        except TimeoutError:
            self.close()
            message = f"no LUXI connection within {self.timeouts.connect_s:g} s"
            raise LiveSourceError(message, source=path) from None
        except OSError as exc:
            self.close()
            reason = exc.strerror or str(exc)
            raise LiveSourceError(f"cannot connect to LUXI: {reason}", source=path) from None
        self._sock.settimeout(self.timeouts.read_write_s)

    def __enter__(self) -> LuxiConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def fail(self, call: str, message: str) -> LiveSourceError:
        return LiveSourceError(f"LUXI {call}: {message}", source=self.path)

    def call(self, method: str, args: list, label: str) -> Any:
        request = json.dumps({"method": method, "args": args}, separators=(",", ":"))
        try:
            self._sock.sendall(request.encode("utf-8") + END_OF_MESSAGE)
        except TimeoutError:
            limit = self.timeouts.read_write_s
            raise self.fail(label, f"request not taken within {limit:g} s") from None
        except OSError as exc:
            raise self.fail(label, f"cannot send: {exc.strerror or exc}") from None
        return self._response(label, self._receive(label))

    def _receive(self, label: str) -> bytes:
        while END_OF_MESSAGE not in self._buffer:
            try:
                chunk = self._sock.recv(_RECV_BYTES)
            except TimeoutError:
                limit = self.timeouts.read_write_s
                raise self.fail(label, f"no complete reply within {limit:g} s") from None
            except OSError as exc:
                raise self.fail(label, f"cannot read: {exc.strerror or exc}") from None
            if not chunk:
                got = len(self._buffer)
                raise self.fail(
                    label,
                    "connection closed before the reply ended"
                    + (f" (partial reply, {got} bytes)" if got else " (no reply)"),
                )
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(END_OF_MESSAGE)
        return message

    def _response(self, label: str, message: bytes) -> Any:
        """UDSServer.parseResponse: a JSON object with `success` and `result`."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(label, "the reply is not UTF-8 text") from None
        try:
            reply = _read_object(decode_json(text))
            if "success" not in reply or "result" not in reply:
                missing = "success" if "success" not in reply else "result"
                raise _Bad(f"key '{missing}' not found")
            success = _read_bool(reply["success"])
        except _Bad as exc:
            raise self.fail(label, f"malformed reply: {exc.message}") from None
        if not success:
            raise self.fail(label, f"Ganeti answered an error: {_error_text(reply['result'])}")
        return reply["result"]


def _error_text(result: Any) -> str:
    """A LUXI error result, `[ExceptionName, [details...]]`, as one line."""
    if isinstance(result, list) and len(result) == 2 and isinstance(result[0], str):
        name, details = result
        parts = details if isinstance(details, list) else [details]
        text = ", ".join(p if isinstance(p, str) else json.dumps(p, default=str) for p in parts)
        return " ".join(f"{name}: {text}".split())
    return " ".join(json.dumps(result, default=str).split())


def fetch(path: str, timeouts: Timeouts | None = None) -> LuxiReplies:
    """Ask the four questions on one connection, in htools' order."""
    calls = (
        ("nodes", *query_call("node", NODE_FIELDS), "Query node"),
        ("instances", *query_call("instance", INSTANCE_FIELDS), "Query instance"),
        ("info", "QueryClusterInfo", [], "QueryClusterInfo"),
        ("groups", *query_call("group", GROUP_FIELDS), "Query group"),
    )
    with LuxiConnection(path, timeouts) as connection:
        results = {key: connection.call(method, args, label) for key, method, args, label in calls}
    return LuxiReplies(**results)


def submit_many_jobs(connection: LuxiConnection, jobs: list[list[dict[str, Any]]]) -> list[int]:
    """`SubmitManyJobs`: each job a list of opcodes; the answer is a `[success, id or
    message]` pair per job (Luxi.hs submitManyJobs: one refused job fails the call)."""
    label = "SubmitManyJobs"
    result = connection.call(label, [jobs], label)
    if not isinstance(result, list) or len(result) != len(jobs):
        raise connection.fail(label, f"expected {len(jobs)} [success, job id] pairs")
    ids: list[int] = []
    for entry in result:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], bool)):
            raise connection.fail(label, f"malformed entry {_show(entry)}")
        ok, value = entry
        if not ok:
            given = f" (job ids given: {', '.join(map(str, ids))})" if ids else ""
            why = printable(value) if isinstance(value, str) else _error_text(value)
            raise connection.fail(label, f"a job was refused: {why}{given}")
        ids.append(_job_id(connection, label, value))
    return ids


def _job_id(connection: LuxiConnection, label: str, value: Any) -> int:
    """A job id: Ganeti sends a number or its decimal text."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise connection.fail(label, f"not a job id: {_show(value)}")


def query_jobs_status(connection: LuxiConnection, ids: list[int]) -> list[str]:
    """`QueryJobs` of `ids`, field `status` (Luxi.hs queryJobsStatus)."""
    label = "QueryJobs"
    result = connection.call(label, [ids, ["status"]], label)
    if not isinstance(result, list) or len(result) != len(ids):
        raise connection.fail(label, f"expected the status of {len(ids)} jobs")
    statuses = []
    for job, row in zip(ids, result, strict=True):
        status = row[0] if isinstance(row, list) and len(row) == 1 else None
        if status not in JOBS_UNFINISHED + JOBS_FINISHED:
            raise connection.fail(label, f"job {job}: no job status in {_show(row)}")
        statuses.append(status)
    return statuses


# ---------------------------------------------------------------------------------------------
# Parsing (Luxi.hs parseData).


def _rows(result: Any) -> list[list[list[Any]]]:
    """`data` of a query result: rows of [status, value] pairs (checked, not copied)."""
    if not isinstance(result, dict):
        raise _Bad(f"Invalid input, expected dict entry but got {_show(result)}")
    if "data" not in result:
        raise _Bad(f"key 'data' not found, object contains only {list(result)}")
    rows = result["data"]
    if not isinstance(rows, list):
        raise _Bad(f"Invalid query result, expected array but got {_show(rows)}")
    for row in rows:
        if not isinstance(row, list):
            raise _Bad(f"Invalid query row result, expected array but got {_show(row)}")
        for field in row:
            if type(field) is not list or len(field) != 2:
                raise _Bad(f"Invalid query field, expected (status, value) but got {_show(field)}")
    return rows


def _show(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def _value(field: list[Any], read: Callable[[Any], Any]) -> Any:
    """fromJValWithStatus: the value when its status is 0, else why there is none."""
    status, value = field
    if status == 0 and type(status) is int:
        return read(value)
    if type(status) is int and status in _STATUS_TEXT:
        raise _Bad(_STATUS_TEXT[status])
    raise _Bad(f"invalid result status {_show(status)}")


def _converter(kind: str, name: str) -> Callable[[str, list[Any], Callable], Any]:
    def convert(attribute: str, field: list[Any], read: Callable[[Any], Any]) -> Any:
        try:
            return _value(field, read)
        except _Bad as exc:
            message = f"{kind} '{name}', error while reading attribute '{attribute}'"
            raise type(exc)(f"{message}: {exc.message}") from None

    return convert


def _named(field: list[Any], what: str) -> str:
    try:
        return _value(field, _read_string)
    except _Bad as exc:
        raise _Bad(f"Parsing new {what}: {exc.message}") from None


def _parse_node(row: list, groups: dict[str, str]) -> NodeReading:
    if len(row) != len(NODE_FIELDS):
        raise _Bad(f"Invalid node query result: {_show(row)}")
    name_f, mtotal, mnode, mfree, dtotal, dfree, ctotal, cnos = row[:8]
    offline_f, drained_f, vm_f, spindles_f, group_f, tags_f, excl_f = row[8:15]
    sptotal, spfree, speed_f = row[15:]
    name = _named(name_f, "node")
    convert = _converter("Node", name)
    offline = convert("offline", offline_f, _read_bool)
    drained = convert("drained", drained_f, _read_bool)
    vm_capable = convert("vm_capable", vm_f, _read_bool)
    group = check_group(groups, name, convert("group.uuid", group_f, _read_string))
    tags = convert("tags", tags_f, _read_strings)
    excl = convert("exclusive_storage", excl_f, _read_bool)
    cpu_speed = convert("cpu_speed", speed_f, _read_double)
    live = not offline and vm_capable

    def live_value(attribute: str, field: list, read: Callable[[Any], Any], default: Any) -> Any:
        return convert(attribute, field, read) if live else default

    def or_default(attribute: str, field: list, read: Callable[[Any], Any], default: Any) -> Any:
        """Missing values read as the default (a node without local storage has none)."""
        try:
            return live_value(attribute, field, read, default)
        except _OutOfRange:
            raise
        except _Bad:
            return default

    if excl:
        spindles = live_value("sptotal", sptotal, _read_int, 0)
    else:
        spindles = convert("spindles", spindles_f, _read_int)
    return NodeReading(
        name=name,
        group_uuid=group,
        offline=offline,
        drained=drained,
        vm_capable=vm_capable,
        exclusive_storage=excl,
        spindles=spindles,
        free_spindles=or_default("spfree", spfree, _read_int, 0),
        total_memory_mib=live_value("mtotal", mtotal, _read_mib_double, 0.0),
        node_memory_mib=live_value("mnode", mnode, _read_mib, 0),
        free_memory_mib=live_value("mfree", mfree, _read_mib, 0),
        total_disk_mib=or_default("dtotal", dtotal, _read_mib_double, 0.0),
        free_disk_mib=or_default("dfree", dfree, _read_mib, 0),
        total_cpus=live_value("ctotal", ctotal, _read_double, 0.0),
        reserved_cpus=live_value("cnos", cnos, _read_int, 0),
        tags=tags,
        cpu_speed=cpu_speed,
    )


def _maybe_ints(value: Any) -> tuple[int | None, ...]:
    if not isinstance(value, list):
        raise _Bad(f"Expecting array, got '{_show(value)}'")
    return tuple(None if v is None else _read_int(v) for v in value)


def _parse_instance(row: list, nodes: set[str]) -> Instance:
    if len(row) != len(INSTANCE_FIELDS):
        raise _Bad(f"Invalid instance query result: {_show(row)}")
    name_f, disk_f, mem_f, vcpus_f, status_f, pnode_f, snodes_f, tags_f = row[:8]
    auto_f, template_f, su_f, sizes_f, spindles_f, forth_f = row[8:]
    name = _named(name_f, "instance")
    convert = _converter("Instance", name)
    disk_usage = convert("disk_usage", disk_f, _read_mib)
    memory = convert("be/memory", mem_f, _read_mib)
    vcpus = convert("be/vcpus", vcpus_f, _read_int)
    primary = check_node(nodes, name, convert("pnode", pnode_f, _read_string))
    secondaries = convert("snodes", snodes_f, _read_strings)
    if secondaries:
        check_node(nodes, name, secondaries[0])
    status = convert("status", status_f, _read_enum("InstanceStatus", sorted(INSTANCE_STATUSES)))
    tags = convert("tags", tags_f, _read_strings)
    auto_balance = convert("auto_balance", auto_f, _read_bool)
    template = convert("disk_template", template_f, _read_enum("DiskTemplate", DISK_TEMPLATES))
    spindle_use = convert("be/spindle_use", su_f, _read_int)
    sizes = convert("disk.sizes", sizes_f, _read_list(_read_mib))
    spindles = convert("disk.spindles", spindles_f, _maybe_ints)
    forthcoming = convert("forthcoming", forth_f, _read_bool)
    return instance_of(
        name,
        memory_mib=memory,
        disk_usage_mib=disk_usage,
        disk_sizes=sizes,
        disk_spindles=spindles,
        vcpus=vcpus,
        status=status,
        tags=tags,
        auto_balance=auto_balance,
        primary=primary,
        secondaries=secondaries[:1],
        disk_template=template,
        spindle_use=spindle_use,
        forthcoming=forthcoming,
    )


def _parse_group(row: list) -> NodeGroup:
    if len(row) != len(GROUP_FIELDS):
        raise _Bad(f"Invalid group query result: {_show(row)}")
    uuid_f, name_f, policy_f, ipolicy_f, tags_f = row
    name = _named(name_f, "group")
    convert = _converter("Group", name)
    uuid = convert("uuid", uuid_f, _read_string)
    policy = convert("alloc_policy", policy_f, _read_enum("AllocPolicy", ALLOC_POLICIES))
    ipolicy = convert("ipolicy", ipolicy_f, _ipolicy)
    tags = convert("tags", tags_f, _read_strings)
    return NodeGroup(name, uuid, policy, tags, (), ipolicy)  # networks: not read by htools


def _parse_info(result: Any) -> ClusterInfo:
    if not isinstance(result, dict):
        raise _Bad("Cannot parse cluster info, not a JSON record")
    desc = "Parsing cluster info"
    tags = _get(result, "tags", _read_strings, "", desc)
    ipolicy = _get(result, "ipolicy", _ipolicy, "", desc)
    master = _get(result, "master", _read_string, "", desc)
    hypervisor = _get(result, "default_hypervisor", _read_enum("Hypervisor", HYPERVISORS), "", desc)
    return ClusterInfo(master, tags, ipolicy, hypervisor)


def parse(replies: LuxiReplies, source: str, *, static_kvm_node_memory: int = 4096) -> Cluster:
    """The cluster htools builds from the four results; errors name `source` and the call."""

    def step(label: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except _Bad as exc:
            raise LiveSourceError(f"LUXI {label}: {exc.message}", source=source) from None

    groups = step("Query group", lambda: [_parse_group(r) for r in _rows(replies.groups)])
    known_groups = group_lookup(groups)
    readings = step(
        "Query node", lambda: [_parse_node(r, known_groups) for r in _rows(replies.nodes)]
    )
    names = {n.name for n in readings}
    instances = step(
        "Query instance",
        lambda: [_parse_instance(r, names) for r in _rows(replies.instances)],
    )
    info = step("QueryClusterInfo", lambda: _parse_info(replies.info))
    return step(
        "QueryClusterInfo",
        lambda: assemble(groups, readings, instances, info, static_kvm_node_memory),
    )


def load_luxi(
    path: str | None = None, *, static_kvm_node_memory: int = 4096, timeouts: Timeouts | None = None
) -> Cluster:
    """Read a running cluster through its LUXI query socket (default: htools' default)."""
    path = path or default_socket()
    return parse(fetch(path, timeouts), path, static_kvm_node_memory=static_kvm_node_memory)
