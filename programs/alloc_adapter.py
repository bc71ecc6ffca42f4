"""The one place where the live allocation service asks exalloc's iallocator for nodes.

The service builds an IAllocator `allocate` request (with `restrict-to-nodes` for the locked
nodes, as Ganeti 2.16+ does) and hands it, with the current cluster, to `iallocator_answer`,
which calls the hail program's in-process answer and reads hail's JSON response. When the
allocation core moves, only this function changes.
"""

from __future__ import annotations

import json

from model.alloc_state import AllocatorAnswer
from model.backends.iallocator import AllocateRequest, IAllocatorInput
from model.cluster import Cluster
from model.errors import ServiceError
from solvers.options import SolverOptions


def iallocator_answer(
    cluster: Cluster, request: AllocateRequest, options: SolverOptions
) -> AllocatorAnswer:
    """hail's answer to one allocate request on `cluster` (checked by the independent checker
    inside hail's answer); ServiceError when exalloc's iallocator does not handle it."""
    from programs.hail import Options, answer

    report = answer(
        IAllocatorInput(cluster, request),
        Options(options.solver, options.time_limit, options.gap, options.threads),
    )
    response = json.loads(report.response)
    if report.kind == "unsupported":
        raise ServiceError(f"the iallocator cannot place this instance: {response['info']}")
    return AllocatorAnswer(bool(response["success"]), tuple(response["result"]), response["info"])
