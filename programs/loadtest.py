"""`exalloc loadtest`: many concurrent creations against `exalloc alloc-server`, measured.

Parse -> draw the creations (seeded sizes from the cluster's instance policy) -> N client
threads submit them, each waiting for its answer -> the service's final state (score,
allocation vector, checker) -> report. What opportunistic locking buys in speed and costs in
balance is then one command away (docs/locking.md has the table).

A `temp_nores` answer is resubmitted up to `--retries` times; with `--reconnect` a request
whose answer was lost (the service died or stopped) is resubmitted with the same request id
until the service is back, and answered exactly once.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from model.backends.text import parse_text
from model.cluster import Cluster
from model.errors import ExallocError, InputError
from model.generate import instance_shapes
from programs.options import json_option, seconds_type, service_socket_option
from service.client import ConnectionLost, call, socket_path

#: Wait before resubmitting a temp_nores answer (Ganeti 3.0 retries every 2 s; creations
#: here are short).
RETRY_DELAY_S = 0.2
#: Wait between attempts to reach a service that is gone.
RECONNECT_DELAY_S = 0.1


@dataclass(frozen=True)
class Creation:
    request: dict[str, Any]

    @property
    def name(self) -> str:
        return self.request["name"]


@dataclass
class Outcome:
    name: str
    status: str = "error"  # created | temp_nores | nores | error
    latency_s: float = 0.0
    lock_wait_s: float = 0.0
    alloc_s: float = 0.0
    submissions: int = 0
    reconnects: int = 0
    nodes: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class LoadtestReport:
    summary: dict[str, Any]
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        s = self.summary
        return 1 if s["errors"] or s["check"] != "ok" else 0

    def text(self) -> str:
        s = self.summary
        lines = [
            f"loadtest: {s['creations']} creations by {s['clients']} clients, hold "
            f"{s['hold_s']:g} s, {s['mode']} locking",
            f"answers: created {s['created']}, temp_nores {s['temp_nores']}, nores {s['nores']}, "
            f"errors {s['errors']} ({s['resubmissions']} resubmissions, "
            f"{s['reconnects']} reconnects)",
            f"wall {s['wall_s']:.2f} s, throughput {s['throughput_per_s']:.2f} creations/s, "
            f"latency p50 {s['latency_p50_s']:.3f} s, p95 {s['latency_p95_s']:.3f} s",
            f"final state: score {s['score']:.6f} (before {s['score_before']:.6f})"
            + (
                f", lost allocations {s['lost_allocations']}"
                if s.get("lost_allocations") is not None
                else ""
            )
            + f", checker: {s['check']}",
        ]
        errors = Counter(o.error for o in self.outcomes if o.status == "error")
        lines += [f"error ({n}x): {e}" for e, n in errors.most_common(5)]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return dict(self.summary)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def draw_creations(
    cluster: Cluster, count: int, templates: list[str], seed: int, prefix: str
) -> list[Creation]:
    """Seeded instances the cluster's policy allows: the std spec times 1, 2, 4, ..."""
    groups = {n.group_uuid for n in cluster.nodes if not n.offline}
    group = next((g for g in cluster.groups if g.uuid in groups), None)
    if group is None:
        raise InputError("the service's cluster has no online node")
    allowed = [t for t in templates if t in group.ipolicy.disk_templates]
    if not allowed:
        raise InputError(
            f"--templates: none of {', '.join(templates)} is allowed by group {group.name} "
            f"({', '.join(group.ipolicy.disk_templates)})"
        )
    shapes = instance_shapes(group.ipolicy)
    rng = random.Random(seed)
    token = uuid.uuid4().hex[:8]
    out = []
    for k in range(count):
        shape = rng.choice(shapes)
        template = rng.choice(allowed)
        name = f"{prefix}-{k + 1:04d}"
        disks = [] if template == "diskless" else [shape.disk_size]
        out.append(
            Creation(
                {
                    "op": "create",
                    "request_id": f"{name}/{token}",
                    "name": name,
                    "template": template,
                    "memory": shape.memory_size,
                    "disks": disks,
                    "spindles": [1] * len(disks),
                    "vcpus": shape.cpu_count,
                    "spindle_use": shape.spindle_use,
                }
            )
        )
    return out


class Driver:
    """Submits creations and keeps each one's outcome."""

    def __init__(self, path: str, args: Any):
        self.path = path
        self.retries = args.retries
        self.reconnect_s = args.reconnect
        self.options = {
            "opportunistic": bool(args.opportunistic),
            "hold_s": args.hold,
            "lock_timeout_s": args.lock_timeout,
        }

    def call(self, request: dict[str, Any], outcome: Outcome | None = None) -> dict[str, Any]:
        """One answer; a lost connection is retried with the same request for --reconnect s."""
        deadline = None
        while True:
            try:
                return call(self.path, request)
            except ConnectionLost:
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.reconnect_s
                if now >= deadline:
                    raise
                if outcome is not None:
                    outcome.reconnects += 1
                time.sleep(RECONNECT_DELAY_S)

    def create(self, creation: Creation) -> Outcome:
        outcome = Outcome(creation.name)
        request = {**creation.request, **self.options}
        start = time.perf_counter()
        retries = self.retries
        try:
            while True:
                outcome.submissions += 1
                result = self.call(request, outcome)
                if result["status"] == "temp_nores" and retries > 0:
                    retries -= 1
                    time.sleep(RETRY_DELAY_S)
                    continue
                break
        except ExallocError as exc:
            outcome.error = str(exc)
            outcome.latency_s = time.perf_counter() - start
            return outcome
        outcome.status = result["status"]
        outcome.latency_s = time.perf_counter() - start
        outcome.lock_wait_s = result["lock_wait_s"]
        outcome.alloc_s = result["alloc_s"]
        outcome.nodes = tuple(result["nodes"])
        return outcome


def _lost(before: list[int] | None, after: list[int] | None) -> list[int] | None:
    if before is None or after is None:
        return None
    width = max(len(before), len(after))
    b = list(before) + [0] * (width - len(before))
    a = list(after) + [0] * (width - len(after))
    return [x - y for x, y in zip(b, a, strict=True)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    service_socket_option(parser)
    parser.add_argument(
        "--clients", type=int, default=8, metavar="N", help="concurrent clients (8)"
    )
    parser.add_argument("--creations", type=int, default=40, metavar="M", help="creations (40)")
    parser.add_argument(
        "--hold",
        type=seconds_type,
        default=0.5,
        metavar="SECONDS",
        help="hold per creation (0.5)",
    )
    parser.add_argument("--opportunistic", action="store_true", help="opportunistic locking")
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="R",
        help="resubmit a temp_nores answer up to R times (default 0)",
    )
    parser.add_argument(
        "--reconnect",
        type=seconds_type,
        default=0.0,
        metavar="SECONDS",
        help="when the service is gone, resubmit the same request for this long (default 0)",
    )
    parser.add_argument(
        "--lock-timeout",
        dest="lock_timeout",
        type=seconds_type,
        metavar="SECONDS",
        help="per creation",
    )
    parser.add_argument(
        "--templates", default="plain,drbd", metavar="LIST", help="disk templates (plain,drbd)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance sizes (0)")
    parser.add_argument("--prefix", metavar="NAME", help="instance name prefix (default: random)")
    parser.add_argument(
        "--no-progress", dest="no_progress", action="store_true", help="no progress bar"
    )
    json_option(parser)
    parser.set_defaults(no_solver=True)


def run(args: Any) -> LoadtestReport:
    """CLI entry: `exalloc loadtest --socket PATH --clients N --creations M --hold S ...`."""
    if args.clients < 1 or args.creations < 1 or args.retries < 0:
        raise InputError("--clients and --creations must be at least 1, --retries at least 0")
    path = socket_path(args.socket)
    driver = Driver(path, args)
    before = driver.call({"op": "state", "text": True})
    cluster = parse_text(before["text"], "the service's state")
    templates = [t for t in args.templates.split(",") if t]
    prefix = args.prefix or f"lt-{uuid.uuid4().hex[:6]}"
    creations = draw_creations(cluster, args.creations, templates, args.seed, prefix)
    show = not args.no_progress and sys.stderr.isatty()
    outcomes: list[Outcome] = []
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.clients, thread_name_prefix="client") as pool:
        futures = [pool.submit(driver.create, c) for c in creations]
        bar = _progress(len(futures), show)
        for future in as_completed(futures):
            outcomes.append(future.result())
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(_tally(outcomes), refresh=False)
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - start
    after = driver.call({"op": "state"})
    counts = Counter(o.status for o in outcomes)
    answered = [o for o in outcomes if o.status != "error"]
    summary: dict[str, Any] = {
        "mode": "opportunistic" if args.opportunistic else "blocking",
        "clients": args.clients,
        "creations": args.creations,
        "hold_s": args.hold,
        "created": counts["created"],
        "temp_nores": counts["temp_nores"],
        "nores": counts["nores"],
        "errors": counts["error"],
        "resubmissions": sum(o.submissions - 1 for o in outcomes),
        "reconnects": sum(o.reconnects for o in outcomes),
        "wall_s": wall,
        "throughput_per_s": counts["created"] / wall if wall > 0 else 0.0,
        "latency_p50_s": percentile([o.latency_s for o in answered], 0.5),
        "latency_p95_s": percentile([o.latency_s for o in answered], 0.95),
        "lock_wait_p50_s": percentile([o.lock_wait_s for o in answered], 0.5),
        "alloc_p50_s": percentile([o.alloc_s for o in answered], 0.5),
        "score_before": before["score"],
        "score": after["score"],
        "allocation_vector_before": before["allocation_vector"],
        "allocation_vector_after": after["allocation_vector"],
        "lost_allocations": _lost(before["allocation_vector"], after["allocation_vector"]),
        "check": "ok" if after["check_ok"] else "; ".join(after["violations"]),
        "prefix": prefix,
    }
    return LoadtestReport(summary, outcomes)


def _tally(outcomes: list[Outcome]) -> str:
    counts = Counter(o.status for o in outcomes)
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _progress(total: int, show: bool) -> Any:
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="creation", file=sys.stderr, dynamic_ncols=True)
