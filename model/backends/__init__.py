"""Readers and writers of the formats Ganeti speaks: the htools text snapshot, IAllocator JSON,
and a running cluster read through RAPI (`rapi.py`) or LUXI (`luxi.py`, docs/live.md).

Each produces or consumes the same `model.cluster.Cluster`, so every program works on any input.
"""

from __future__ import annotations

import os

from model.cluster import Cluster


def load_cluster(path: str | os.PathLike[str], *, static_kvm_node_memory: int = 4096) -> Cluster:
    """The cluster in a file: an IAllocator request (`.json`: its cluster part) or an htools
    text snapshot (anything else), read as htools reads it."""
    if str(path).lower().endswith(".json"):
        from model.backends.iallocator import load_request

        return load_request(path, static_kvm_node_memory=static_kvm_node_memory).cluster
    from model.backends.text import load_text

    return load_text(path)
