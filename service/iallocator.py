"""The one place where the live allocation service asks exalloc's iallocator for nodes.

The service builds an IAllocator `allocate` request (with `restrict-to-nodes` for the locked
nodes, as Ganeti 2.16+ does) and hands it, with the current cluster, to `iallocator_answer`,
which calls the hail program's in-process answer and reads hail's JSON response. When the
allocation core moves, only this function changes.
"""

from __future__ import annotations

import json

from model.backends.iallocator import AllocateRequest, IAllocatorInput
from model.cluster import Cluster
from service.state import AllocatorAnswer
from solvers.options import SolverOptions


def iallocator_answer(
    cluster: Cluster,
    request: AllocateRequest,
    options: SolverOptions,
    capacity_checks: str = "exact",
) -> AllocatorAnswer:
    """hail's answer to one allocate request on `cluster` (checked by the independent checker
    inside hail's answer), with `exalloc hail`'s global N+1 check of that name (exact, greedy
    or none); ServiceError when exalloc's iallocator does not handle it."""
    from solvers.strategies.iallocator import IAllocatorOptions, answer

    choice = IAllocatorOptions(solver=options, capacity_checks=capacity_checks)
    report = answer(IAllocatorInput(cluster, request), choice)
    response = json.loads(report.response)
    # the service's clients (`exalloc create`, `loadtest`) get the solver's verdict at the end
    # of the info text: a creation's record has no other place for it
    info = response["info"] + (f" [exalloc {report.note}]" if report.note else "")
    return AllocatorAnswer(bool(response["success"]), tuple(response["result"]), info)
