"""What every htools program says about a cluster it has just loaded, as htools says it.

Ganeti's shell tests check these lines on the stand-ins (htools-text-backend.test):

* `update_missing` follows `Loader.updateMissing`: a node whose memory or disk the loaded
  instances do not account for (more than 512 MiB of memory, or 1024 MiB of disk) gets the
  message `node NAME is missing N MB ram and N GB disk`; `ExtLoader.loadExternalData` shows
  them, unless `-q`, through `CLI.maybeShowWarnings` (`inconsistent_data_warning`), on stderr,
  before anything else the program prints.
* `suffix_note` follows `Hinfo.commonInfo` / `Hbal.main`: with `-v -v` (verbosity above 2,
  htools counting from 1) they print `Note: Stripping common suffix of '.SUFFIX' from names`
  (`Loader.commonSuffix`: the longest `.`-starting suffix of every node and instance name).
"""

from __future__ import annotations

from model.backends.text import cluster_suffix
from model.cluster import MEMORY_USING_STATUSES, Cluster

#: htools' thresholds above which a node's unaccounted resources are reported (MiB).
MISSING_MEMORY_LIMIT_MIB = 512
MISSING_DISK_LIMIT_MIB = 1024


def update_missing(cluster: Cluster) -> list[str]:
    """`Loader.updateMissing`'s messages, in its order (its `mapAccum` prepends each node's
    to the list: the last node's first). Read off the instances directly rather than a loaded
    state: hail prints them on every call, and loading a 1,000-node cluster twice costs
    0.1-0.2 s; `missing_memory_mib` of model.resources.loaded_states is the same xMem."""
    # `nodeImem`: the memory of the primaries in the node's pList that use memory;
    # `nodeIdsk`: the disk of the instances in its pList and sList (forthcoming instances are
    # on neither list)
    used_memory_mib = {node.name: 0 for node in cluster.nodes}
    used_disk_mib = {node.name: 0 for node in cluster.nodes}
    for inst in cluster.instances:
        if inst.forthcoming:
            continue
        primary, secondary, disk = inst.primary, inst.secondary, inst.disk_mib
        if inst.status in MEMORY_USING_STATUSES:  # `uses_memory`, forthcoming ones skipped
            used_memory_mib[primary] += inst.memory_mib
        used_disk_mib[primary] += disk
        if secondary:
            used_disk_mib[secondary] += disk
    messages = []
    for node in cluster.nodes:
        missing_memory_mib = (
            int(node.total_memory_mib)
            - node.node_memory_mib
            - node.free_memory_mib
            - used_memory_mib[node.name]
        )
        missing_disk_mib = int(node.total_disk_mib) - node.free_disk_mib - used_disk_mib[node.name]
        if (
            missing_memory_mib > MISSING_MEMORY_LIMIT_MIB
            or missing_disk_mib > MISSING_DISK_LIMIT_MIB
        ):
            messages.append(
                f"node {node.name} is missing {missing_memory_mib} MB ram and "
                f"{missing_disk_mib // 1024} GB disk"
            )
    return messages[::-1]


def inconsistent_data_warning(messages: list[str]) -> str:
    """`CLI.maybeShowWarnings`'s text for stderr ("" without messages): the heading, a line per
    message, and the empty line its `hPutStrLn . unlines` leaves."""
    if not messages:
        return ""
    listed = "".join(f"  - {message}\n" for message in messages)
    return f"Warning: cluster has inconsistent data:\n{listed}\n"


def loading_warning(cluster: Cluster) -> str:
    """What `loadExternalData` prints on stderr for `cluster` at the default verbosity."""
    return inconsistent_data_warning(update_missing(cluster))


def merged_twice(cluster: Cluster) -> Cluster:
    """A request's cluster as htools' `-I` leaves it: `IAlloc.parseData` merges it with
    `mergeData` and `ExtLoader` merges what it returns once more, so every instance is on its
    nodes twice (docs/htools-facts.md §5)."""
    from dataclasses import replace

    return replace(cluster, instances=cluster.instances * 2)


def request_warnings(cluster: Cluster) -> str:
    """What `-I REQUEST` prints on stderr at the default verbosity: each merge's warning, the
    second on the doubled cluster."""
    return loading_warning(cluster) + loading_warning(merged_twice(cluster))


def suffix_note(cluster: Cluster) -> str | None:
    """hinfo's and hbal's note at `-v -v` (without its newline), None when no suffix is common."""
    suffix = cluster_suffix(cluster)
    return f"Note: Stripping common suffix of '{suffix}' from names" if suffix else None
