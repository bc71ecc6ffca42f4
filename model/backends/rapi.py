"""A running cluster through Ganeti's remote API (`-m ADDRESS`), read as htools 3.0.2 does.

Backend/Rapi.hs fetches `/2/groups?bulk=1`, `/2/nodes?bulk=1`, `/2/instances?bulk=1` and
`/2/info`, in that order, from `https://ADDRESS:5080` (an address holding a `:` is used as it
is; without a scheme curl speaks http), or reads `groups.json`, `nodes.json`, `instances.json`
and `info.json` from the folder of a `file://` address. Certificates are not verified; a
connection may take 15 s and each request 60 s. Fields, defaults and error texts: docs/live.md.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from model.backends.iallocator import (
    _Bad,
    _get,
    _ipolicy,
    _maybe,
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
    DEFAULT_GROUP_UUID,
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
from model.errors import LiveSourceError

DEFAULT_PORT = 5080  # Ganeti's defaultRapiPort
CONNECT_TIMEOUT_S = 15.0  # Rapi.hs connTimeout
QUERY_TIMEOUT_S = 60.0  # Rapi.hs queryTimeout: the whole request, connection included
FILE_PREFIX = "file://"
# (what, resource, file of a file:// folder), in the order htools fetches them
RESOURCES = (
    ("groups", "/2/groups?bulk=1", "groups.json"),
    ("nodes", "/2/nodes?bulk=1", "nodes.json"),
    ("instances", "/2/instances?bulk=1", "instances.json"),
    ("info", "/2/info", "info.json"),
)
_CHUNK_BYTES = 1 << 16


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for a connection and for a whole answer (htools: 15 and 60)."""

    connect_s: float
    query_s: float

    @classmethod
    def htools(cls) -> Timeouts:
        return cls(CONNECT_TIMEOUT_S, QUERY_TIMEOUT_S)


@dataclass(frozen=True)
class Reply:
    """One fetched body and where it came from (a URL or a file), for error messages."""

    where: str
    body: str


@dataclass(frozen=True)
class RapiReplies:
    groups: Reply
    nodes: Reply
    instances: Reply
    info: Reply


def base_url(address: str) -> str:
    """htools' formatHost: `https://ADDRESS:5080` unless the address holds a `:`; curl then
    reads an address without `://` as http."""
    if ":" not in address:
        return f"https://{address}:{DEFAULT_PORT}"
    if "://" not in address:
        return "http://" + address
    return address


# ---------------------------------------------------------------------------------------------
# Fetching.


def fetch(address: str, timeouts: Timeouts | None = None) -> RapiReplies:
    """The four raw answers; LiveSourceError names the URL (or file) and what failed."""
    if address.startswith(FILE_PREFIX):
        folder = Path(address[len(FILE_PREFIX) :])
        return RapiReplies(*(_read_file(folder / name) for _, _, name in RESOURCES))
    url = base_url(address)
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise LiveSourceError(
            f"unsupported scheme '{scheme}' (RAPI speaks https, http or file://)",
            source=shown(address),
        )
    timeouts = timeouts or Timeouts.htools()
    import requests  # imported here: only live reads pay for it

    with requests.Session() as session:
        replies = [_http_get(session, url + resource, timeouts) for _, resource, _ in RESOURCES]
    return RapiReplies(*replies)


def _read_file(path: Path) -> Reply:
    try:
        return Reply(str(path), path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LiveSourceError(f"cannot read file: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise LiveSourceError("not UTF-8 text", source=str(path)) from None


def _http_get(session: Any, url: str, timeouts: Timeouts) -> Reply:
    """GET as htools' curl does: no certificate checks, no redirects followed, connect and
    total time limits. A non-2xx status is an error (curl would hand its body to the JSON
    parser, which fails on it less clearly)."""
    import requests
    from urllib3.exceptions import InsecureRequestWarning

    deadline = time.monotonic() + timeouts.query_s
    where = shown(url)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureRequestWarning)
            response = session.get(
                url,
                timeout=(timeouts.connect_s, timeouts.query_s),
                verify=False,
                allow_redirects=False,
                stream=True,
            )
        with response:
            if not 200 <= response.status_code < 300:
                reason = f" {response.reason}" if response.reason else ""
                raise LiveSourceError(f"HTTP {response.status_code}{reason}", source=where)
            chunks = []
            for chunk in response.iter_content(_CHUNK_BYTES):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise LiveSourceError(_late(timeouts), source=where)
    except requests.exceptions.ConnectTimeout:
        raise LiveSourceError(
            f"no connection within {timeouts.connect_s:g} s", source=where
        ) from None
    except requests.exceptions.ReadTimeout:
        raise LiveSourceError(_late(timeouts), source=where) from None
    except requests.exceptions.RequestException as exc:
        raise LiveSourceError(_reason(exc), source=where) from None
    try:
        return Reply(where, b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise LiveSourceError("the answer is not UTF-8 text", source=where) from None


def shown(url: str) -> str:
    """The URL as messages show it: a password in it is masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


def _late(timeouts: Timeouts) -> str:
    return f"no complete answer within {timeouts.query_s:g} s"


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps (requests -> urllib3 -> socket), outermost first."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        inner = [getattr(current, "reason", None), current.__cause__, current.__context__]
        inner += list(current.args)
        todo += [e for e in inner if isinstance(e, BaseException)]
    return seen


def _reason(exc: BaseException) -> str:
    """A short phrase for a failed request: the innermost socket or TLS error that caused it."""
    causes = _causes(exc)
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the host name: {cause.strerror or cause}"
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {cause.reason or cause.strerror or cause}"
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
    for cause in causes:
        if type(cause).__name__ == "IncompleteRead":
            return f"the answer was cut short ({cause})"
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return f"connection failed: {cause.strerror}"
    text = " ".join(str(causes[-1]).split()) or type(causes[-1]).__name__
    return f"request failed: {text}"


# ---------------------------------------------------------------------------------------------
# Parsing (Rapi.hs parseData).


def _parse_array(reply: Reply, what: str, parse_one: Callable[[dict], Any]) -> list:
    """A bulk answer: a JSON array of objects, each parsed; errors name the reply."""
    try:
        items = _read_list(_read_object)(decode_json(reply.body))
    except _Bad as exc:
        raise LiveSourceError(f"Parsing {what} data: {exc.message}", source=reply.where) from None
    out = []
    for item in items:
        try:
            out.append(parse_one(item))
        except _Bad as exc:
            raise LiveSourceError(exc.message, source=reply.where) from None
    return out


def _parse_group(obj: dict) -> NodeGroup:
    name = _get(obj, "name", _read_string, "", "Parsing new group")
    desc = f"Group '{name}'"
    uuid = _get(obj, "uuid", _read_string, "", desc)
    policy = _get(obj, "alloc_policy", _read_enum("AllocPolicy", ALLOC_POLICIES), "", desc)
    ipolicy = _get(obj, "ipolicy", _ipolicy, "", desc)
    tags = _get(obj, "tags", _read_strings, "", desc)
    return NodeGroup(name, uuid, policy, tags, (), ipolicy)  # networks: not read by htools


def _parse_node(obj: dict, groups: dict[str, str]) -> NodeReading:
    name = _get(obj, "name", _read_string, "", "Parsing new node")
    desc = f"Node '{name}', error while parsing data"

    def get(key: str, read: Callable[[Any], Any]) -> Any:
        return _get(obj, key, read, "", desc)

    offline = get("offline", _read_bool)
    drained = get("drained", _read_bool)
    vm_capable = _maybe(obj, "vm_capable", _read_bool, "", desc)
    vm_capable = True if vm_capable is None else vm_capable
    ndparams = get("ndparams", _read_object)
    excl = _get(ndparams, "exclusive_storage", _read_bool, "", desc)
    group = _maybe(obj, "group.uuid", _read_string, "", desc)
    group = check_group(groups, name, DEFAULT_GROUP_UUID if group is None else group)
    live = not offline and vm_capable

    def live_value(key: str, read: Callable[[Any], Any], default: Any) -> Any:
        return get(key, read) if live else default

    def live_or_default(key: str, read: Callable[[Any], Any], default: Any) -> Any:
        """Read when live, and then a missing or null value is the default too."""
        if not live:
            return default
        value = _maybe(obj, key, read, "", desc)
        return default if value is None else value

    if excl:
        spindles = live_value("sptotal", _read_int, 0)
    else:
        spindles = _get(ndparams, "spindle_count", _read_int, "", desc)
    free_spindles = live_or_default("spfree", _read_int, 0)
    total_memory = live_value("mtotal", _read_mib_double, 0.0)
    node_memory = live_value("mnode", _read_mib, 0)
    free_memory = live_value("mfree", _read_mib, 0)
    total_disk = live_or_default("dtotal", _read_mib_double, 0.0)
    free_disk = live_or_default("dfree", _read_mib, 0)
    total_cpus = live_value("ctotal", _read_double, 0.0)
    reserved_cpus = live_value("cnos", _read_int, 0)
    tags = get("tags", _read_strings)
    return NodeReading(
        name=name,
        group_uuid=group,
        offline=offline,
        drained=drained,
        vm_capable=vm_capable,
        exclusive_storage=excl,
        spindles=spindles,
        free_spindles=free_spindles,
        total_memory_mib=total_memory,
        node_memory_mib=node_memory,
        free_memory_mib=free_memory,
        total_disk_mib=total_disk,
        free_disk_mib=free_disk,
        total_cpus=total_cpus,
        reserved_cpus=reserved_cpus,
        tags=tags,
    )


def _maybe_ints(value: Any) -> tuple[int | None, ...]:
    """arrayMaybeFromJVal: a list whose nulls are unknown values."""
    if not isinstance(value, list):
        raise _Bad(f"Expecting array, got '{_compact(value)}'")
    return tuple(None if v is None else _read_int(v) for v in value)


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _parse_instance(obj: dict, nodes: set[str]) -> Instance:
    name = _get(obj, "name", _read_string, "", "Parsing new instance")
    desc = f"Instance '{name}', error while parsing data"

    def get(key: str, read: Callable[[Any], Any], where: dict = obj) -> Any:
        return _get(where, key, read, "", desc)

    disk_usage = get("disk_usage", _read_mib)
    disk_sizes = get("disk.sizes", _read_list(_read_mib))
    if "disk.spindles" not in obj:
        get("disk.spindles", _maybe_ints)  # raises htools' missing-key message
    try:
        disk_spindles = _maybe_ints(obj["disk.spindles"])
    except _Bad as exc:
        raise _Bad(f"{desc}: {exc.message}") from None
    beparams = get("beparams", _read_object)
    oper_ram = get("oper_ram", lambda v: v)  # required, null when the instance is down
    if _is_number(oper_ram):  # the memory the instance runs with, when it runs
        memory = _read_mib(oper_ram)
    else:
        try:
            memory = get("memory", _read_mib, beparams)
        except _Bad:
            memory = get("maxmem", _read_mib, beparams)
    vcpus = get("vcpus", _read_int, beparams)
    primary = check_node(nodes, name, get("pnode", _read_string))
    secondaries = get("snodes", _read_list(lambda v: v))
    secondary = ()
    if secondaries:
        try:
            first = _read_string(secondaries[0])
        except _Bad:
            raise _Bad("Wrong JSON type") from None
        secondary = (check_node(nodes, name, first),)
    status = get("status", _read_enum("InstanceStatus", sorted(INSTANCE_STATUSES)))
    tags = get("tags", _read_strings)
    auto_balance = get("auto_balance", _read_bool, beparams)
    template = get("disk_template", _read_enum("DiskTemplate", DISK_TEMPLATES))
    spindle_use = get("spindle_use", _read_int, beparams)
    forthcoming = obj.get("forthcoming")  # any failure reads as "not forthcoming"
    return instance_of(
        name,
        memory_mib=memory,
        disk_usage_mib=disk_usage,
        disk_sizes=disk_sizes,
        disk_spindles=disk_spindles,
        vcpus=vcpus,
        status=status,
        tags=tags,
        auto_balance=auto_balance,
        primary=primary,
        secondaries=secondary,
        disk_template=template,
        spindle_use=spindle_use,
        forthcoming=forthcoming if isinstance(forthcoming, bool) else False,
    )


def _parse_info(reply: Reply) -> ClusterInfo:
    try:
        obj = _read_object(decode_json(reply.body))
    except _Bad as exc:
        message = f"Parsing cluster info: {exc.message}"
        raise LiveSourceError(message, source=reply.where) from None
    try:
        desc = "Parsing cluster data"
        master = _get(obj, "master", _read_string, "", desc)
        tags = _get(obj, "tags", _read_strings, "", desc)
        ipolicy = _get(obj, "ipolicy", _ipolicy, "", desc)
        hypervisor = _get(
            obj, "default_hypervisor", _read_enum("Hypervisor", HYPERVISORS), "", desc
        )
    except _Bad as exc:
        raise LiveSourceError(exc.message, source=reply.where) from None
    return ClusterInfo(master, tags, ipolicy, hypervisor)


def parse(replies: RapiReplies, *, static_kvm_node_memory: int = 4096) -> Cluster:
    """The cluster htools builds from the four answers (same order, same defaults)."""
    groups = _parse_array(replies.groups, "group", _parse_group)
    known_groups = group_lookup(groups)
    readings = _parse_array(replies.nodes, "node", lambda o: _parse_node(o, known_groups))
    names = {n.name for n in readings}
    instances = _parse_array(replies.instances, "instance", lambda o: _parse_instance(o, names))
    info = _parse_info(replies.info)
    try:
        return assemble(groups, readings, instances, info, static_kvm_node_memory)
    except _Bad as exc:
        raise LiveSourceError(exc.message, source=replies.info.where) from None


def load_rapi(
    address: str, *, static_kvm_node_memory: int = 4096, timeouts: Timeouts | None = None
) -> Cluster:
    """Read a running cluster through RAPI (or a `file://` folder of its answers)."""
    return parse(fetch(address, timeouts), static_kvm_node_memory=static_kvm_node_memory)


def describe(address: str) -> str:
    """Where `address` reads from, for reports: the base URL or the folder."""
    if address.startswith(FILE_PREFIX):
        return os.path.abspath(address[len(FILE_PREFIX) :])
    return base_url(address)
