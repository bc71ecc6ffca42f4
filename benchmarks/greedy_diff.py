"""The greedy ports beside the real htools 3.0.2 on snapshots the other sweeps do not make.

    python benchmarks/greedy_diff.py PROGRAM FIRST LAST [--max-nodes N] [--timeout S] [-v]

PROGRAM is hinfo, hcheck, hbal, hspace, hroller or simulate (hspace --simulate). Each seed
FIRST..LAST-1 writes a text snapshot directly (not through tests/htools_gen.py and the
IAllocator reader, as the sweep_* scripts do): 1-4 groups (an empty one, unallocable and
last-resort ones, group tags), node sizes jittered, free spindles on nodes without exclusive
storage, exclusive storage with spindles, node tags (location tags among them), a master, an
offline node or an unknown ('?') one, instances of one template mix in every status
(running, ADMIN_down/offline, ERROR_*, USER_down), auto_balance N, forthcoming, exclusion and
location tags in the cluster tags, reported free memory below what the instances leave
(the loader's warning), several instance policies. The program's options are drawn from its
real option list (the same seed draws the same command); exalloc's stand-in runs in this
process (`exalloc info`, `n1 --greedy`, `balance --greedy`, `space --greedy`,
`roll --greedy`). Compared: stdout, stderr, exit code and every file written (-S, -C FILE).

Counted apart: an input both refuse at load (exalloc's one-line `exalloc: error: FILE:LINE`
where htools says `Error: failed to load data, aborting: ...`, docs/info.md) and a case the
real program does not finish within --timeout. Prints each difference (the first lines of
the diff with -v) and the counts; docs/reliability.md quotes them.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import cli  # noqa: E402

STATUSES = (
    *("running",) * 3,
    "ADMIN_down",
    "ADMIN_offline",
    "ERROR_down",
    "ERROR_up",
    "ERROR_nodedown",
    "ERROR_nodeoffline",
    "ERROR_wrongnode",
    "USER_down",
)
TEMPLATES = ("plain", "drbd", "file", "sharedfile", "diskless", "ext", "rbd", "blockdev", "gluster")
MIXES = (("drbd",), ("drbd", "plain"), TEMPLATES, ("plain",), ("ext", "rbd", "drbd"))
SHAPES = ((32768, 512000, 8), (65536, 1048576, 16), (131072, 2097152, 24), (16384, 204800, 4))
SIZES = ((512, 10240, 1), (1024, 20480, 1), (2048, 51200, 2), (4096, 102400, 2), (8192, 204800, 4))
FIELDS = (
    "idx name fqdn status tmem nmem xmem fmem umem amem imem rmem tdsk fdsk tcpu ucpu pcnt "
    "scnt plist slist pfmem pfdsk rcpu cload mload dload nload ptags peermap spindle_count "
    "hi_spindles inst_spindles"
).split()


def _join(values) -> str:  # noqa: ANN001
    return ",".join(map(str, values))


def _policy(rng: random.Random, owner: str) -> str:
    """One line of the policy section: std spec, min/max pairs, templates, ratios."""
    mins = [rng.choice((128, 512, 1024)), 1, rng.choice((1024, 10240)), 1, 1, 1]
    maxs = [
        rng.choice((8192, 32768, 65536)),
        rng.choice((4, 8, 16)),
        rng.choice((204800, 1048576)),
        rng.choice((4, 16)),
        8,
        rng.choice((4, 12)),
    ]
    pairs = [(mins, maxs)]
    if rng.random() < 0.2:
        pairs = [
            ([128, 1, 1024, 1, 1, 1], [2048, 2, 51200, 2, 8, 2]),
            ([4096, 2, 102400, 1, 1, 1], [32768, 8, 1048576, 16, 8, 12]),
        ]
    std = [max(mins[0], 1024), 1, max(mins[2], 10240), 1, 1, 1]
    templates = list(TEMPLATES)
    if rng.random() < 0.3:
        templates = rng.sample(templates, rng.randint(2, len(templates)))
    vcpu = rng.choice((4.0, 4.0, 1.0, 2.0, 8.0, 64.0))
    spindle = rng.choice((32.0, 32.0, 2.0, 4.0, 8.0))
    minmax = ";".join(f"{_join(a)};{_join(b)}" for a, b in pairs)
    return f"{owner}|{_join(std)}|{minmax}|{','.join(templates)}|{vcpu}|{spindle}"


def snapshot(seed: int, max_nodes: int = 12) -> str:
    """The seed's cluster in htools' text format (Text.serializeCluster's layout)."""
    rng = random.Random(seed)
    groups = [f"grp{g}" for g in range(rng.choice((1, 1, 2, 2, 3, 4)))]
    glines = []
    for g in groups:
        policy = rng.choice(("preferred", "preferred", "preferred", "last_resort", "unallocable"))
        glines.append(f"{g}|uuid-{g}|{policy}|{rng.choice(('', '', 'gtag1', 'a,b'))}|")
    if all("|unallocable|" in line for line in glines):
        glines[0] = glines[0].replace("unallocable", "preferred")
    live = groups[:-1] if len(groups) > 1 and rng.random() < 0.3 else groups  # an empty group
    n_nodes = rng.randint(max(2, len(live)), max_nodes)
    excl = rng.random() < 0.2
    if rng.random() < 0.5:
        names = [f"n{i + 1}.example.com" for i in range(n_nodes)]  # a common suffix
    else:
        names = [f"node{rng.randint(0, 99):02d}{chr(97 + i % 26)}{i}" for i in range(n_nodes)]
    nodes: dict[str, dict] = {}
    for i, name in enumerate(names):
        mem, dsk, cpu = rng.choice(SHAPES)
        if rng.random() < 0.3:
            mem += rng.randint(-1000, 1000)
            dsk += rng.randint(-5000, 5000)
        nodes[name] = {
            "g": live[i % len(live)] if rng.random() < 0.8 else rng.choice(live),
            "mem": mem,
            "dsk": dsk,
            "cpu": cpu,
            "nmem": rng.choice((0, 512, 1024, 4096)),
            "used_mem": 0,
            "used_dsk": 0,
            "used_sp": 0,
            "spindles": rng.choice((1, 2, 4, 12)) if excl or rng.random() < 0.3 else 1,
            "off": rng.random() < 0.08,
            "master": False,
            "tags": rng.choice(
                ("", "", "", "rack:a", "rack:b", "power:x,rack:a", "htools:nlocation:x")
            ),
            "ncpu": rng.choice((1, 1, 2, 4)),
            "speed": rng.choice((1.0, 1.0, 1.5)),
        }
    rng.choice(list(nodes.values()))["master"] = True
    by_group: dict[str, list[str]] = {}
    for name, n in nodes.items():
        by_group.setdefault(n["g"], []).append(name)
    fill = rng.choice((0.0, 0.2, 0.5, 0.8, 0.95, None))
    mix = rng.choice(MIXES)
    insts = []
    for name, n in nodes.items():
        target = fill if fill is not None else rng.choice((0.0, 0.3, 0.6, 0.9))
        for _ in range(20):
            if n["used_mem"] >= target * n["mem"]:
                break
            m, d, v = rng.choice(SIZES)
            if n["used_mem"] + m > 0.97 * n["mem"] or n["used_dsk"] + d > n["dsk"]:
                continue
            t = rng.choice(mix)
            sec = ""
            if t == "drbd":
                peers = [
                    p
                    for p in by_group[n["g"]]
                    if p != name and nodes[p]["used_dsk"] + d <= nodes[p]["dsk"]
                ]
                t, sec = ("drbd", rng.choice(peers)) if peers else ("plain", "")
            status = rng.choice(STATUSES)
            spindles = rng.choice((1, 2)) if excl else "-"
            dsk = 0 if t == "diskless" else d
            k = len(insts) + 1
            iname = f"inst{k}" if rng.random() < 0.7 else f"i{k}.example.com"
            forthcoming = "Y" if rng.random() < 0.03 else "N"
            tags = rng.choice(("", "", "", "svc:web", "svc:db", "svc:web,other"))
            balanced = "Y" if rng.random() < 0.9 else "N"
            insts.append(
                f"{iname}|{m}|{dsk}|{v}|{status}|{balanced}|{name}|{sec}|{t}|{tags}|"
                f"{rng.choice((1, 1, 2))}|{spindles}|{forthcoming}"
            )
            if forthcoming == "N":
                if status in ("running", "ERROR_up", "ERROR_wrongnode"):
                    n["used_mem"] += m
                if t in ("plain", "drbd"):
                    n["used_dsk"] += dsk
                    if sec:
                        nodes[sec]["used_dsk"] += dsk
            if spindles != "-":
                n["used_sp"] += spindles
                if sec:
                    nodes[sec]["used_sp"] += spindles
    nlines = []
    for name, n in nodes.items():
        if rng.random() < 0.02:
            nlines.append(f"{name}|?|?|?|?|?|?|Y|uuid-{n['g']}|1||N|0|1|1.0")
            continue
        fmem = n["mem"] - n["nmem"] - n["used_mem"]
        if rng.random() < 0.1:
            fmem -= rng.choice((1024, 4096, -512))
        fdsk = max(n["dsk"] - n["used_dsk"] - rng.choice((0, 0, 1024)), 0)
        flag = "Y" if n["off"] else ("M" if n["master"] else "N")
        nlines.append(
            f"{name}|{n['mem']}|{n['nmem']}|{max(fmem, 0)}|{n['dsk']}|{fdsk}|{n['cpu']}|{flag}|"
            f"uuid-{n['g']}|{n['spindles']}|{n['tags']}|{'Y' if excl else 'N'}|"
            f"{max(n['spindles'] - n['used_sp'], 0)}|{n['ncpu']}|{n['speed']:f}"
        )
    ctags = []
    if rng.random() < 0.4:
        ctags.append("htools:iextags:svc")
    if rng.random() < 0.2:
        ctags.append("htools:nlocation:rack")
    if rng.random() < 0.1:
        ctags += ["htools:migration:rack", "htools:allowmigration:rack:a::rack:b"]
    if rng.random() < 0.1:
        ctags.append("htools:desiredlocation:rack")
    policies = [_policy(rng, ""), *(_policy(rng, g) for g in groups)]
    sections = (glines, nlines, insts, ctags, policies)
    return "\n".join("".join(line + "\n" for line in s) for s in sections)


# --- each program's options, drawn from its real option list ------------------------------


def _names(text: str) -> tuple[list[str], list[str], list[str]]:
    groups, nodes, insts = (text.split("\n\n") + ["", "", ""])[:3]
    return tuple(  # type: ignore[return-value]
        [line.split("|")[0] for line in s.splitlines() if line] for s in (groups, nodes, insts)
    )


def _fields(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.2:
        return "-p"
    if r < 0.3:
        return "-p+" + ",".join(rng.sample(FIELDS, 2))
    fields = rng.sample(FIELDS, rng.randint(1, 6))
    if rng.random() < 0.05:
        fields.append("bogus")
    return "-p" + ",".join(fields)


def _verbosity(rng: random.Random) -> list[str]:
    r = rng.random()
    for bound, flags in ((0.15, ["-v"]), (0.25, ["-v"] * 2), (0.32, ["-v"] * 3), (0.4, ["-q"])):
        if r < bound:
            return flags
    return []


def _search(rng: random.Random, nodes: list[str], out: list[str], hbal: bool) -> list[str]:
    """hbal's search options (hcheck's simulation takes them too, but the migration rule)."""
    for pick in rng.sample(range(9), rng.choice((0, 1, 1, 2, 3))):
        out += (
            ["-l", str(rng.randint(0, 4))],
            ["--evac-mode"],
            [rng.choice(("--no-disk-moves", "--no-instance-moves"))],
            ["--ignore-soft-errors"],
            [
                "-g",
                rng.choice(("0", "0.05", "0.5")),
                "--min-gain-limit",
                rng.choice("0 1 10".split()),
            ],
            ["-e", rng.choice(("0.1", "1", "5"))],
            ["-O", rng.choice(nodes)],
            ["--ignore-dynu"],
            ["--restricted-migration"] if hbal else [],
        )[pick]
    return out


def _loader(rng: random.Random, insts: list[str], out: list[str]) -> list[str]:
    """The loader options hbal and hcheck share."""
    if rng.random() < 0.15 and insts:
        out += ["--select-instances", ",".join(rng.sample(insts, min(len(insts), 3)))]
    if rng.random() < 0.15 and insts:
        out += ["--exclude-instances", ",".join(rng.sample(insts, min(len(insts), 3)))]
    if rng.random() < 0.15:
        out += ["--exclusion-tags", rng.choice(("svc", "rack", "svc,rack"))]
    if rng.random() < 0.12:
        out += ["--max-cpu", rng.choice(("1", "2.5", "8"))]
    if rng.random() < 0.12:
        out += ["--min-disk", rng.choice(("0.1", "0.3"))]
    return out


def hinfo_options(rng: random.Random, text: str) -> list[str]:
    _, nodes, _ = _names(text)
    out = _verbosity(rng)
    if rng.random() < 0.5:
        out.append(_fields(rng))
    if rng.random() < 0.3:
        out.append("--print-instances")
    if rng.random() < 0.2:
        out += ["-O", rng.choice(nodes)]
    if rng.random() < 0.1:
        out.append("--ignore-dynu")
    return out


def hcheck_options(rng: random.Random, text: str) -> list[str]:
    _, nodes, insts = _names(text)
    out = _verbosity(rng)
    for flag, p in (("--machine-readable", 0.4), ("--no-simulation", 0.3)):
        if rng.random() < p:
            out.append(flag)
    if rng.random() < 0.2:
        out.append("--no-capacity-checks")
    if rng.random() < 0.1:
        out.append(rng.choice(("--machine-readable=yes", "--machine-readable=no")))
    _loader(rng, insts, out)
    return _search(rng, nodes, out, hbal=False)


def hbal_options(rng: random.Random, text: str) -> list[str]:
    groups, nodes, insts = _names(text)
    out = _verbosity(rng)
    if rng.random() < 0.6:
        out += ["-G", rng.choice(groups)]
    _search(rng, nodes, out, hbal=True)
    _loader(rng, insts, out)
    if rng.random() < 0.2:
        out.append(_fields(rng))
    for flag, p in (("--print-instances", 0.15), ("-C", 0.3)):
        if rng.random() < p:
            out.append(flag)
    if rng.random() < 0.2:
        out += ["-S", "saved"]
    return out


def hspace_options(rng: random.Random, text: str) -> list[str]:
    _, nodes, _ = _names(text)
    out = _verbosity(rng)
    template = rng.choice((None, "drbd", "plain", "diskless", "ext", "sharedfile", "file", "rbd"))
    if template:
        out.append(f"--disk-template={template}")
    disk, mem, cpu = rng.choice(((10240, 1024, 1), (51200, 4096, 2), (102400, 8192, 4)))
    spindles = f",{rng.randint(1, 3)}" if rng.random() < 0.3 else ""
    if rng.random() < 0.7:
        out.append(f"--standard-alloc={disk},{mem},{cpu}{spindles}")
    if rng.random() < 0.6 or not out or not out[-1].startswith("--standard"):
        tmem, tdisk = rng.choice(((1024, 10240), (4096, 51200), (256, 2048)))
        out.append(f"--tiered-alloc={tdisk},{tmem},{cpu}")  # shrinks a few times at most
        if rng.random() < 0.7:
            out += ["-l", str(rng.randint(1, 6))]
    if rng.random() < 0.3:
        out.append("--machine-readable")
    if rng.random() < 0.2:
        out.append(_fields(rng))
    for flag, p in (
        ("--independent-groups", 0.2),
        ("--accept-existing-errors", 0.2),
        ("--no-capacity-checks", 0.15),
    ):
        if rng.random() < p:
            out.append(flag)
    if rng.random() < 0.1 and nodes:
        out += ["-O", rng.choice(nodes)]
    if rng.random() < 0.1:
        out.append(f"--max-cpu={rng.choice(('1', '2.0', '8'))}")
    if rng.random() < 0.1:
        out.append(f"--min-disk={rng.choice(('0.05', '0.2'))}")
    if rng.random() < 0.1:
        out.append(f"--spindle-use={rng.randint(0, 2)}")
    if rng.random() < 0.15:
        out += ["-S", "saved"]
    return out


def simulate_options(rng: random.Random, text: str) -> list[str]:
    """1-3 --simulate groups (policy, count, disk, memory, cpus, [spindles]) and hspace's
    options but -O."""
    sims = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        policy = rng.choice(("p", "preferred", "a", "u", "last_resort"))
        disk = rng.choice(("100g", "1T", "512000", "2t", "50G"))
        mem = rng.choice(("16g", "64G", "32768", "128g"))
        spindles = rng.choice(("", "", f",{rng.randint(1, 8)}"))
        sims.append(
            f"--simulate={policy},{rng.randint(1, 6)},{disk},{mem},"
            f"{rng.choice((4, 8, 16))}{spindles}"
        )
    out = hspace_options(rng, text)
    while "-O" in out:
        at = out.index("-O")
        del out[at : at + 2]
    return sims + out


def hroller_options(rng: random.Random, text: str) -> list[str]:
    groups, nodes, _ = _names(text)
    out = _verbosity(rng)
    for flag, p in (
        ("--offline-maintenance", 0.2),
        ("--no-headers", 0.2),
        ("--print-moves", 0.3),
        ("--full-evacuation", 0.2),
        ("--skip-non-redundant", 0.2),
        ("--ignore-non-redundant", 0.2),
        ("-f", 0.2),
        ("--one-step-only", 0.15),
    ):
        if rng.random() < p:
            out.append(flag)
    if rng.random() < 0.3:
        out += ["-G", rng.choice(groups)]
    if rng.random() < 0.2:
        out += ["--node-tags", rng.choice(("rack:a", "rack:b", "rack:a,power:x", "nothere"))]
    if rng.random() < 0.1:
        out += ["-O", rng.choice(nodes)]
    if rng.random() < 0.1:
        out += ["-S", "saved"]
    return out


#: program: (the real binary, exalloc's arguments, the options, reads the snapshot)
PROGRAMS = {
    "hinfo": ("hinfo", ["info"], hinfo_options, True),
    "hcheck": ("hcheck", ["n1", "--greedy"], hcheck_options, True),
    "hbal": ("hbal", ["balance", "--greedy"], hbal_options, True),
    "hspace": ("hspace", ["space", "--greedy"], hspace_options, True),
    "simulate": ("hspace", ["space", "--greedy"], simulate_options, False),
    "hroller": ("hroller", ["roll", "--greedy"], hroller_options, True),
}


def _files(where: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(where.iterdir()) if p.is_file()}


def _exalloc(argv: list[str], where: Path) -> tuple[str, str, int]:
    """exalloc's CLI in this process, in `where` (its -S files land there)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(old)
    return out.getvalue(), err.getvalue(), code


def compare(program: str, seed: int, max_nodes: int, timeout: float, verbose: bool) -> str:
    """One seed: 'same', 'differ', 'load error' (both refuse the input) or 'slow'."""
    binary, args, options_of, reads = PROGRAMS[program]
    text = snapshot(seed, max_nodes)
    options = options_of(random.Random(seed * 7919 + sum(map(ord, program))), text)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "cluster.data"
        data.write_text(text)
        source = ["-t", str(data)] if reads else []
        (Path(tmp) / "real").mkdir()
        (Path(tmp) / "port").mkdir()
        try:
            r = subprocess.run(
                [binary, *source, *options],
                capture_output=True,
                text=True,
                cwd=Path(tmp) / "real",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return "slow"
        real = (r.stdout, r.stderr, r.returncode, _files(Path(tmp) / "real"))
        ours = (
            *_exalloc([*args, *source, *options], Path(tmp) / "port"),
            _files(Path(tmp) / "port"),
        )
    if ours == real:
        return "same"
    refused = real[1].startswith("Error: failed to load data") and ours[1].startswith(
        "exalloc: error: "
    )
    if refused and real[2] == ours[2] and real[0] == ours[0]:
        return "load error"
    print(f"differs: {program} seed {seed}: {' '.join(options)}", flush=True)
    if verbose:
        for what, a, b in zip(("stdout", "stderr", "exit code", "files"), real, ours, strict=True):
            if a == b:
                continue
            if isinstance(a, str):
                lines = difflib.unified_diff(a.splitlines(), b.splitlines(), "real", "exalloc")
                print(f"  {what}:\n" + "\n".join(list(lines)[:30]))
            else:
                print(f"  {what}: real {a!r:.300}, exalloc {b!r:.300}")
    return "differ"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program", choices=sorted(PROGRAMS))
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--max-nodes", type=int, default=12)
    p.add_argument("--timeout", type=float, default=60.0, help="for the real program")
    p.add_argument("-v", "--verbose", action="store_true", help="show each difference")
    args = p.parse_args()
    counts = dict.fromkeys(("same", "differ", "load error", "slow"), 0)
    start = time.perf_counter()
    for seed in range(args.first, args.last):
        counts[compare(args.program, seed, args.max_nodes, args.timeout, args.verbose)] += 1
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"{args.program} seeds {args.first}-{args.last - 1} (up to {args.max_nodes} nodes): "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f"; {time.perf_counter() - start:.0f} s, load {load}"
    )
    return 1 if counts["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
