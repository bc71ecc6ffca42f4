"""`exalloc space --compare`: hspace's counts beside the exact answer (docs/space.md, "The
command"): the real hspace on the same question (programs.reference.real_hspace), or hspace's
port on the same cluster state when there is no hspace."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model.space import Spec


def _spec_text(spec: Spec) -> str:
    return f"{spec.disk_mib},{spec.memory_mib},{spec.vcpus},{spec.spindles}"


def hspace_argv(args: argparse.Namespace) -> list[str]:
    """The same question for the real hspace, machine-readable, nothing written."""
    argv: list[str] = []
    if args.text_data is not None:
        argv += ["-t", args.text_data]
    if args.master is not None:
        argv += ["-m", args.master]
    if args.luxi is not None:
        argv += [f"--luxi={args.luxi}"] if args.luxi else ["-L"]
    if args.ialloc_src is not None:
        argv += ["-I", args.ialloc_src]
    argv += [f"--simulate={s}" for s in args.simulate or ()]
    if args.disk_template:
        argv.append(f"--disk-template={args.disk_template}")
    if args.spindle_use is not None:
        argv.append(f"--spindle-use={args.spindle_use}")
    if args.standard_alloc:
        argv.append(f"--standard-alloc={_spec_text(args.standard_alloc)}")
    if args.tiered_alloc:
        argv.append(f"--tiered-alloc={_spec_text(args.tiered_alloc)}")
    if args.max_length != -1:
        argv += ["-l", str(args.max_length)]
    flags = {
        "--independent-groups": args.independent_groups,
        "--accept-existing-errors": args.accept_existing,
        "--no-capacity-checks": not args.capacity_checks,
    }
    argv += [f for f, on in flags.items() if on]
    argv += [f"-O{n}" for n in args.offline]
    if args.max_cpu is not None:
        argv.append(f"--max-cpu={args.max_cpu}")
    if args.min_disk:
        argv.append(f"--min-disk={args.min_disk}")
    argv.append(f"--static-kvm-node-memory={args.static_kvm_node_memory}")
    return [*argv, "--machine-readable", "-q"]


def compare(
    out, cluster, state, template: str, su: int, args: argparse.Namespace, run_port
) -> None:  # noqa: ANN001
    """hspace's counts beside exalloc's: the real hspace, else the port on the same state."""
    import re
    import subprocess

    from programs.reference import real_hspace

    tool = real_hspace()
    if tool is not None:
        proc = subprocess.run(
            [str(tool), *hspace_argv(args)], capture_output=True, text=True, timeout=3600
        )
        text, code, who = proc.stdout, proc.returncode, str(tool)
    else:
        ns = argparse.Namespace(**vars(args))
        ns.machine_readable, ns.save, ns.print_nodes, ns.verbose = True, None, None, 0
        port = run_port(cluster, state, template, su, ns)
        text, code, who = "".join(port.stdout), port.exit_code, "hspace's port (no hspace found)"
    values = dict(re.findall(r"^HTS_(\w+)=(.*)$", text, re.M))
    standard = int(values["ALLOC_INSTANCES"]) if "ALLOC_INSTANCES" in values else None
    tspec = values.get("TSPEC", "").strip("'")
    tiered = sum(int(part.rsplit("=", 1)[1]) for part in tspec.split() if "=" in part)
    mine = out.json.get("standard", {}).get("instances")
    out.json["hspace"] = {
        "program": who,
        "exit_code": code,
        "standard": standard,
        "tiered": tiered if standard is not None else None,
        "tspec": tspec,
    }
    if standard is None:
        out.notes = (*out.notes, f"{who}: no answer (exit {code})")
        return
    more = "" if mine is None else f"; exalloc places {mine - standard} more"
    out.notes = (*out.notes, f"{who}: standard {standard}, tiered {tiered} ({tspec}){more}")
