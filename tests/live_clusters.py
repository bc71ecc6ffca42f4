"""Small dedicated clusters built so that a given answer of the allocation service must occur
(tests of `exalloc alloc-server` and `service.allocation`)."""

from __future__ import annotations

from model.backends.text import dump_text
from model.cluster import Cluster, Node, NodeGroup
from model.generate import DEDICATED_IPOLICY

GROUP_UUID = "7a1f0c6e-0000-4000-8000-000000000001"


def dedicated_text(nodes: list[tuple[str, int]], node_memory_mib: int = 1024) -> str:
    """Empty exclusive-storage nodes (name, total memory MiB), 1 TiB of disk, 16 CPUs and 12
    spindles each, in one group with model.generate's dedicated policy (min specs 1, 4 and
    16 GiB)."""
    group = NodeGroup("group-01", GROUP_UUID, ipolicy=DEDICATED_IPOLICY)
    built = tuple(
        Node(
            name=name,
            total_memory_mib=float(memory),
            node_memory_mib=node_memory_mib,
            free_memory_mib=memory - node_memory_mib,
            total_disk_mib=1048576.0,
            free_disk_mib=1048576,
            total_cpus=16.0,
            group_uuid=GROUP_UUID,
            master=k == 0,
            spindles=12,
            exclusive_storage=True,
            free_spindles=12,
        )
        for k, (name, memory) in enumerate(nodes)
    )
    return dump_text(Cluster(groups=(group,), nodes=built, instances=()))


#: One roomy node (two 6 GiB instances fit, not three) and two small ones (no 6 GiB instance
#: fits): while a creation holds `big`, a 6 GiB opportunistic creation is temp_nores; once
#: `big` has two, every 6 GiB creation is nores.
ONE_BIG_TWO_SMALL = dedicated_text([("big", 16384), ("small-1", 6144), ("small-2", 6144)])


def roomy_text(count: int = 8, memory_mib: int = 65536) -> str:
    """`count` equal roomy nodes."""
    return dedicated_text([(f"node-{k + 1:02d}", memory_mib) for k in range(count)])
