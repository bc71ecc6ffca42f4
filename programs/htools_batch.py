"""hspace's, hbal's and hroller's questions in `exalloc batch` and `exalloc compare`
(docs/batch.md): problems `space`, `balance` and `roll`.

A text snapshot in a folder named `space/`, `balance/` or `roll/` poses that problem alone
(a snapshot elsewhere keeps its other problems, programs/tasks.py): the standard count of
new instances of the cluster's std spec (hspace's defaults), the least group score within
K of hbal's moves (K = hbal's length), the fewest reboot rounds under hroller's rules (not
`--memory-aware`, which asks another question, so both sides answer the same one).

The exact side calls the strategies as `exalloc space`, `balance` and `roll` do (each answer
passes the independent checker there or is refused). The greedy side is the real hspace,
hbal or hroller when installed, else exalloc's byte-for-byte port of it (`--greedy`, run in
this process on the same command line; the tool is then labelled "(port)"), and its answer
is judged by the same checkers from what the tool printed or wrote: hspace's `-S` file of
the standard phase, hbal's solution table, hroller's rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from model.errors import ExallocError

METRICS: dict[str, tuple[str, str]] = {
    "space": ("instances placed", "max"),
    "balance": ("score after K moves", "min"),
    "roll": ("rounds", "min"),
}
#: What the batch summary adds up per problem (programs/batch.py TOTALS).
TOTALS = {"space": "instances placed", "balance": "score after", "roll": "rounds"}
#: The htools program that answers each problem greedily, and exalloc's command for it.
TOOLS = {"space": "hspace", "balance": "hbal", "roll": "hroller"}
#: The real tool's path, when not the one on PATH.
TOOL_ENV = {
    "hspace": "EXALLOC_REAL_HSPACE",
    "hbal": "EXALLOC_REAL_HBAL",
    "hroller": "EXALLOC_REAL_HROLLER",
}


def problem_of(path: str) -> str | None:
    """The problem a snapshot's folder poses: its nearest parent folder named after one."""
    for parent in Path(path).parents:
        if parent.name in METRICS:
            return parent.name
    return None


# --- running a program as the command line would --------------------------------------------


def _args(command: str, argv: list[str], o: Any) -> argparse.Namespace:
    """`exalloc COMMAND ARGV` parsed as cli.py parses it, with the batch's solver options."""
    import importlib

    from programs.options import attached_optionals, settle_solver_options
    from programs.parser import Parser

    program = importlib.import_module(f"programs.{command}")
    parser = Parser(prog=f"exalloc {command}")
    program.add_arguments(parser)
    args = parser.parse_args(attached_optionals(argv))
    settle_solver_options(args)
    args.solver_options = o.solver
    return args


def _run(command: str, argv: list[str], o: Any) -> Any:
    import importlib

    return importlib.import_module(f"programs.{command}").run(_args(command, argv, o))


def _greedy_output(problem: str, argv: list[str], o: Any) -> tuple[str, str, float]:
    """The tool's stdout on `argv`, its label and wall time: the real tool when installed,
    else exalloc's port (`--greedy`) on the same command line."""
    from programs.reference import run_tool

    name = TOOLS[problem]
    real = os.environ.get(TOOL_ENV[name]) or shutil.which(name)
    if real:
        out, wall = run_tool([real, *argv], o.greedy_timeout)
        return out, name, wall
    start = time.perf_counter()
    report = _run(problem, [*argv, "--greedy"], o)
    if report.exit_code:
        last = (report.stderr.strip().splitlines() or [f"exit {report.exit_code}"])[-1]
        raise ExallocError(f"{name}'s port failed: {last}")
    return report.stdout, f"{name} (port)", time.perf_counter() - start


# --- space ----------------------------------------------------------------------------------


def _space_problem(path: str) -> Any:
    """hspace's standard question with its defaults: the cluster policy's std spec and first
    disk template, on the cluster as loaded."""
    from model.backends.text import load_text
    from model.space import default_options, standard_spec
    from model.state import node_states

    cluster = load_text(path)
    return node_states(cluster), standard_spec(cluster), default_options(cluster)


def _exact_space(path: str, o: Any) -> dict[str, Any]:
    from solvers.strategies.space import standard

    state, spec, options = _space_problem(path)
    r = standard(state, spec, options, o.solver)  # checked by model.check.check_space there
    return {
        "status": r.status,
        "objective": [r.count],
        "bound": None if r.bound is None else [r.bound],
        "gap": r.gap,
        "build_s": round(r.build_s, 6),
        "solve_s": round(r.solve_s, 6),
        "answer": {"instances": r.count, "by_group": r.by_group, "binding": r.binding_text()},
        "value": r.count,
        "violations": 0,
    }


def judge_space(path: str, standard_file: str) -> dict[str, Any]:
    """hspace's standard phase as exalloc's checker sees it: the new instances of the `-S`
    file (`new-0`, `new-1`, … in the order hspace added them) replayed on the snapshot by
    `model.check.check_space`, global N+1 decided exactly for each node it asks about."""
    from model.backends.text import load_text
    from model.check import check_space
    from model.space import NewPlacement, SpaceAnswer, space_problem
    from solvers.strategies.n1 import decide

    state, spec, options = _space_problem(path)
    problem = space_problem(state, spec, options)
    after = load_text(standard_file)
    known = set(state.cluster.instance_index)
    new = [i for i in after.instances if i.name not in known]
    new.sort(key=lambda i: int(i.name.rsplit("-", 1)[-1]) if i.name[-1:].isdigit() else 0)
    answer = SpaceAnswer(
        spec, tuple(NewPlacement(i.name, i.primary, i.secondary or None) for i in new)
    )
    plans = {}
    if problem.global_n1:
        final = check_space(problem, answer, {}).objectives["final_state"]
        for nodes in problem.n1_scope.values():
            for n in nodes:
                verdict = decide(final, n, offline_targets=options.offline_targets)
                if verdict.plan is not None:
                    plans[n] = verdict.plan
    report = check_space(problem, answer, plans)
    broken = list(report.violations)
    return {
        "answer": {"instances": answer.count, "by_group": answer.by_group(state)},
        "value": answer.count,
        "violations": len(broken),
        **({"broken": [str(v) for v in broken[:5]]} if broken else {}),
    }


def _greedy_space(path: str, o: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="exalloc-hspace-") as scratch:
        save = os.path.join(scratch, "snap")
        argv = ["-t", path, "--machine-readable", "-q", "-S", save]
        out, tool, wall = _greedy_output("space", argv, o)
        judged = judge_space(path, f"{save}.standard")
    said = next((line for line in out.splitlines() if line.startswith("HTS_ALLOC_INSTANCES=")), "")
    printed = int(said.split("=", 1)[1]) if said else None
    if printed is not None and printed != judged["value"]:
        judged["broken"] = [f"{tool} printed {printed} instances, its -S file holds another count"]
        judged["violations"] += 1
    return {"tool": tool, **judged, "wall_s": round(wall, 6)}


# --- balance --------------------------------------------------------------------------------


def _exact_balance(path: str, o: Any) -> dict[str, Any]:
    """`exalloc balance -t FILE`: the least score within K = hbal's length, checked by
    `model.check.check_balance` there."""
    report = _run("balance", ["-t", path], o)
    data = report.json or {}
    if report.exit_code or "score_after" not in data:
        raise ExallocError(data.get("error") or report.stderr.strip() or "balance failed")
    k = data["max_steps"]
    return {
        "status": data["status"],
        "objective": [data["score_after"]],
        "bound": None if data.get("bound") is None else [data["bound"]],
        "gap": data.get("gap"),
        "build_s": data.get("build_s"),
        "solve_s": data.get("solve_s"),
        "answer": {"steps": len(data["steps"]), "k": k, "score_before": data["score_before"]},
        "value": round(data["score_after"], 8),
        "violations": 0,
    }


def _greedy_balance(path: str, o: Any) -> dict[str, Any]:
    """hbal's steps, replayed by `model.check.check_balance`; the score is the checker's."""
    from model.backends.text import load_text
    from model.balance import BalanceProblem, BalanceRules, steps_from_hbal
    from model.check import check_balance
    from model.space import with_node_status
    from model.state import node_states

    out, tool, wall = _greedy_output("balance", ["-t", path], o)
    steps = steps_from_hbal(out)
    cluster = load_text(path)
    if len(cluster.groups) != 1:
        raise ExallocError(f"{path}: balance in batch takes a snapshot of one group")
    state = with_node_status(node_states(cluster), [], None, 0.0)  # as `exalloc balance`
    problem = BalanceProblem(state, cluster.groups[0].uuid, len(steps), BalanceRules())
    report = check_balance(problem, steps)
    broken = list(report.violations)
    score = report.objectives.get("score")
    return {
        "tool": tool,
        "answer": {"steps": len(steps), "k": len(steps)},
        "value": None if score is None else round(score, 8),
        "violations": len(broken),
        **({"broken": [str(v) for v in broken[:5]]} if broken else {}),
        "wall_s": round(wall, 6),
    }


# --- roll -----------------------------------------------------------------------------------


def _exact_roll(path: str, o: Any) -> dict[str, Any]:
    """`exalloc roll -t FILE` under hroller's rules, checked by `model.roll.check_plan` there."""
    report = _run("roll", ["-t", path, "--json"], o)
    data = report.json or {}
    if report.exit_code or "objective" not in data:
        raise ExallocError(data.get("error") or report.stderr.strip() or "roll failed")
    return {
        "status": data["status"],
        "objective": [data["objective"]],
        "bound": [data["bound"]],
        "gap": data.get("gap"),
        "build_s": data.get("build_s"),
        "solve_s": data.get("solve_s"),
        "answer": {"rounds": [list(r) for r in data["groups"]]},
        "value": data["objective"],
        "violations": 0,
    }


def _greedy_roll(path: str, o: Any) -> dict[str, Any]:
    """hroller's rounds, each packed (its moves found) and the plan replayed by
    `model.roll.check_plan`, from the snapshot alone."""
    from model.backends.text import load_text
    from model.errors import CheckFailedError
    from model.htools.hroller import RollerAnswer, prelude
    from model.roll import check_plan
    from model.roll import problem_of as roll_problem
    from programs.roll import roller_options, rules_of
    from solvers.strategies.roll import pack_rounds

    out, tool, wall = _greedy_output("roll", ["-t", path], o)
    lines = out.splitlines()
    rounds = [line.split(",") for line in lines[1:] if line.strip()]  # after the header
    args = _args("roll", ["-t", path], o)
    cluster = load_text(path)
    start = prelude(cluster, roller_options(args))
    if isinstance(start, RollerAnswer):
        raise ExallocError(start.stderr.strip() or "hroller's prelude failed")
    rules = rules_of(args)
    problem = roll_problem(cluster, start.considered_names, rules, start.offline, start.loaded)
    broken: list[str] = []
    plans = pack_rounds(problem, rounds, o.solver)
    if plans is None:
        broken.append("a round's instances cannot all be moved off its nodes")
    else:
        try:
            check_plan(cluster, start.considered_names, rules, plans, start.offline)
        except CheckFailedError as err:
            broken.append(str(err))
    return {
        "tool": tool,
        "answer": {"rounds": rounds},
        "value": len(rounds),
        "violations": len(broken),
        **({"broken": broken} if broken else {}),
        "wall_s": round(wall, 6),
    }


# --- the registry's entry points ------------------------------------------------------------

_EXACT = {"space": _exact_space, "balance": _exact_balance, "roll": _exact_roll}
_GREEDY = {"space": _greedy_space, "balance": _greedy_balance, "roll": _greedy_roll}


def exact(problem: str, path: str, o: Any) -> dict[str, Any]:
    return _EXACT[problem](path, o)


def greedy(problem: str, path: str, o: Any) -> dict[str, Any]:
    return _GREEDY[problem](path, o)
