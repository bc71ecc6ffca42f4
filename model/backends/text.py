"""htools' text backend (`-t FILE`, what `-S` writes), read and written exactly as htools 3.0.2.

The rules follow Backend/Text.hs: Haskell `lines`, sections split at every empty line, `|`
fields, trailing fields padded with the defaults of older format versions, numbers read with
Haskell `read` (so `12.0` is not an Int, `0x10` is), and htools' own error messages, each
raised as `InputError` with the file and the 1-based line that caused it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

from model.cluster import (
    ALLOC_POLICIES,
    DEFAULT_IPOLICY,
    DISK_TEMPLATES,
    INSTANCE_STATUSES,
    MIRRORED_TEMPLATES,
    Cluster,
    Disk,
    Instance,
    IPolicy,
    ISpec,
    MinMax,
    Node,
    NodeGroup,
    read_name,
)
from model.errors import InputError
from model.validate import (
    MAX_COUNT,
    MAX_MIB,
    cluster_problem,
    keyed_occurrences,
    quantity_message,
    quantity_problem,
)

# ---------------------------------------------------------------------------------------------
# Haskell `read` for Int and Double, as Ganeti's `tryRead` uses it.

_INT64 = 1 << 64
_SPACE = frozenset(" \t\n\r\f\v\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007")
_SPACE |= frozenset("\u2008\u2009\u200a\u202f\u205f\u3000")
_SYMBOL_CHARS = frozenset("!@#$%&*+./<=>?\\^|:-~")
_DEC = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(r"0[xX]([0-9a-fA-F]+)")
_OCT = re.compile(r"0[oO]([0-7]+)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_']*")


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in _SPACE:
        pos += 1
    return pos


def _number_token(s: str, pos: int, want_int: bool) -> tuple[int | float, int] | None:
    """One numeric lexeme at `pos` (maximal munch, like GHC's Text.Read.Lex), converted."""
    for pattern, base in ((_HEX, 16), (_OCT, 8)):
        m = pattern.match(s, pos)
        if m:
            value = int(m.group(1), base)
            if want_int:
                return value, m.end()
            # Haskell's fromInteger :: Double gives Infinity where Python's float() raises
            return (float(value) if value.bit_length() <= 1024 else math.inf), m.end()
    m = _DEC.match(s, pos)
    if m:
        text = m.group(0)
        if want_int:
            if "." in text or "e" in text or "E" in text:
                return None  # an Int never reads a fractional or exponent lexeme
            return int(text), m.end()
        return float(text), m.end()
    if not want_int:
        m = _IDENT.match(s, pos)
        if m and m.group(0) in ("NaN", "Infinity"):
            return float(m.group(0).replace("Infinity", "inf")), m.end()
    return None


def _read_at(s: str, pos: int, want_int: bool) -> list[tuple[int | float, int]]:
    """All parses of a (possibly parenthesised, possibly negated) number starting at `pos`."""
    pos = _skip_space(s, pos)
    results: list[tuple[int | float, int]] = []
    if pos < len(s) and s[pos] == "(":
        for value, end in _read_at(s, pos + 1, want_int):
            end = _skip_space(s, end)
            if end < len(s) and s[end] == ")":
                results.append((value, end + 1))
        return results
    end = pos
    while end < len(s) and s[end] in _SYMBOL_CHARS:
        end += 1
    if end > pos:
        if s[pos:end] != "-":
            return results
        token = _number_token(s, _skip_space(s, end), want_int)
        if token is not None:
            results.append((-token[0], token[1]))
        return results
    token = _number_token(s, pos, want_int)
    if token is not None:
        results.append(token)
    return results


def _wrap_int(value: int) -> int:
    """Haskell's `fromInteger :: Integer -> Int` wraps modulo 2^64."""
    value %= _INT64
    return value - _INT64 if value >= _INT64 // 2 else value


def _read_number(name: str, text: str, want_int: bool, *, wrap: bool = True) -> int | float:
    parses = _read_at(text, 0, want_int)
    if len(parses) == 1:
        value, end = parses[0]
        if end == len(text):
            if want_int:
                return _wrap_int(int(value)) if wrap else int(value)
            return float(value)
        raise ValueError(f"{name}: leftover characters when parsing '{text}': '{text[end:]}'")
    raise ValueError(f"{name}: cannot parse string '{text}'")


def reads_int(text: str) -> tuple[int, str] | None:
    """Haskell `reads :: ReadS Int` where it gives exactly one parse (how Utils.parseUnit
    reads the number before a unit: `0x10g`, `(1)`, `- 1` are numbers, `1e3` and `1.5` are
    not): the value, wrapped as `fromInteger` wraps, and the text after it; None otherwise."""
    parses = _read_at(text, 0, True)
    if len(parses) != 1:
        return None
    value, end = parses[0]
    return _wrap_int(int(value)), text[end:]


def read_int(text: str, name: str = "") -> int:
    """Haskell `read :: Int` with Ganeti's `tryRead` messages; raises ValueError."""
    return int(_read_number(name, text, True))


def read_double(text: str, name: str = "") -> float:
    """Haskell `read :: Double` (accepts `1`, `1e3`, `0x10`, `NaN`; rejects `.5`, `1.`)."""
    return float(_read_number(name, text, False))


# ---------------------------------------------------------------------------------------------
# Haskell `show`/`printf` for the writer and the error messages.


def _float_digits(x: float) -> tuple[str, int]:
    """Shortest digits and exponent e with |x| = 0.digits * 10^e (Haskell floatToDigits)."""
    if x == 0:
        return "0", 0
    _, digits, exponent = Decimal(repr(abs(x))).as_tuple()
    text = "".join(map(str, digits))
    significant = text.rstrip("0")
    exponent = int(exponent) + len(text) - len(significant)
    significant = significant.lstrip("0")
    return significant, len(significant) + exponent


def _non_finite(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return None


def show_double(x: float) -> str:
    """Haskell `show :: Double -> String` (`4.0`, `0.1`, `1.0e-2`, `1.0e7`)."""
    special = _non_finite(x)
    if special is not None:
        return special
    sign = "-" if x < 0 or (x == 0 and math.copysign(1.0, x) < 0) else ""
    digits, e = _float_digits(x)
    if x != 0 and (e < 0 or e > 7):
        exp = e - 1
        if len(digits) == 1:
            return f"{sign}{digits}.0e{exp}"
        return f"{sign}{digits[0]}.{digits[1:]}e{exp}"
    return sign + _fixed(digits, e)


def _fixed(digits: str, e: int) -> str:
    if e <= 0:
        return "0." + "0" * (-e) + digits
    whole = digits[:e].ljust(e, "0")
    frac = digits[e:]
    return (whole or "0") + "." + (frac or "0")


def printf_f(x: float) -> str:
    """Haskell `printf "%f"`: shortest digits in fixed notation (`1.0`, `0.001`)."""
    special = _non_finite(x)
    if special is not None:
        return special
    sign = "-" if x < 0 or (x == 0 and math.copysign(1.0, x) < 0) else ""
    digits, e = _float_digits(x)
    return sign + _fixed(digits, e)


def _round_to(ndigits: int, digits: list[int]) -> tuple[int, list[int]]:
    """GHC's roundTo (base 10): round the digit list to `ndigits`, halves to even."""

    def go(n: int, prev_even: bool, rest: list[int]) -> tuple[int, list[int]]:
        if not rest:
            return 0, [0] * n
        if n == 0:
            head, tail = rest[0], rest[1:]
            if head == 5 and prev_even and all(d == 0 for d in tail):
                return 0, []
            return (1 if head >= 5 else 0), []
        carry, out = go(n - 1, rest[0] % 2 == 0, rest[1:])
        digit = carry + rest[0]
        return (1, [0, *out]) if digit == 10 else (0, [digit, *out])

    carry, out = go(ndigits, True, digits)
    return (1, [1, *out]) if carry else (0, out)


def printf_0f(x: float) -> str:
    """Haskell `printf "%.0f"`: rounds the shortest decimal digits, halves to even."""
    special = _non_finite(x)
    if special is not None:
        return special
    sign = "-" if x < 0 or (x == 0 and math.copysign(1.0, x) < 0) else ""
    text, e = _float_digits(x)
    if e < 0 or x == 0:
        return sign + "0"
    carry, out = _round_to(e, [int(c) for c in text])
    whole = "".join(map(str, out[: e + carry]))
    return sign + (whole or "0")


def printf_fixed(x: float, precision: int) -> str:
    """Haskell `printf "%.Nf"` (showFFloat): rounds the shortest decimal digits, halves to
    even, which can differ from C's rounding of the binary value (hail's `score: %.8f`)."""
    special = _non_finite(x)
    if special is not None:
        return special
    sign = "-" if x < 0 or (x == 0 and math.copysign(1.0, x) < 0) else ""
    text, e = _float_digits(x)
    digits = [int(c) for c in text]
    if e >= 0:
        carry, out = _round_to(precision + e, digits)
        whole = "".join(map(str, out[: e + carry])) or "0"
        frac = "".join(map(str, out[e + carry :]))
    else:
        carry, out = _round_to(precision, [0] * (-e) + digits)
        out = out if carry else [0, *out]
        whole, frac = str(out[0]), "".join(map(str, out[1:]))
    return sign + whole + ("." + frac if frac else "")


def printf_g(x: float, precision: int = 6) -> str:
    """Haskell `printf "%.Ng"` (showGFloat): fixed notation for exponents 0..7 of the
    shortest digits (0.1 <= |x| < 10^7, and 0), else `d.ddddddeN` (hbal's well-balanced
    message: `1.000000e-9`)."""
    special = _non_finite(x)
    if special is not None:
        return special
    text, e = _float_digits(x)
    if x == 0 or 0 <= e <= 7:
        return printf_fixed(x, precision)
    sign = "-" if x < 0 else ""
    carry, out = _round_to(max(precision, 1) + 1, [int(c) for c in text])
    digits = out[:-1] if carry else out
    return f"{sign}{digits[0]}.{''.join(map(str, digits[1:]))}e{e - 1 + carry}"


#: GHC's `asciiTab`: the names `showLitChar` gives the control characters it has no letter for.
_ASCII_NAMES = (
    "NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI "
    "DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB ESC FS GS RS US"
).split()
_LETTER_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def show_string(s: str) -> str:
    """Haskell `show :: String -> String` (GHC's `showLitString`), used verbatim in htools'
    error messages and `hail -v -v`: letter escapes, `\\DEL`, named control characters
    (`\\SOH`), code points above 127 in decimal, and `\\&` where the next character would
    run into an escape (a digit after a decimal one, `H` after `\\SO`)."""
    out: list[str] = []
    protect = ""  # the characters that may not follow the last escape as they are
    for ch in s:
        if ch in protect:
            out.append("\\&")
        protect = ""
        code = ord(ch)
        if ch in _LETTER_ESCAPES:
            out.append(_LETTER_ESCAPES[ch])
        elif code > 127:
            out.append(f"\\{code}")
            protect = "0123456789"
        elif code == 127:
            out.append("\\DEL")
        elif code >= 32:
            out.append(ch)
        else:
            out.append("\\" + _ASCII_NAMES[code])
            protect = "H" if ch == "\x0e" else ""
    return '"' + "".join(out) + '"'


def show_list(items: Sequence[str]) -> str:
    return "[" + ",".join(show_string(i) for i in items) + "]"


# ---------------------------------------------------------------------------------------------
# Splitting.


def haskell_lines(text: str) -> list[str]:
    """Haskell `lines`: split at `\\n`; a final newline does not add an empty line."""
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def sep_split(sep: str, items: Sequence) -> list:
    """Ganeti's `sepSplit`: like str.split, except that empty input gives no pieces."""
    if not items:
        return []
    if isinstance(items, str):
        return items.split(sep)
    out: list[list] = [[]]
    for item in items:
        if item == sep:
            out.append([])
        else:
            out[-1].append(item)
    return out


def comma_split(text: str) -> tuple[str, ...]:
    return tuple(sep_split(",", text))


# ---------------------------------------------------------------------------------------------
# The reader.

_NODE_DEFAULTS = ("1", "", "N", "0", "1", "1.0")  # fields 10..15
_INSTANCE_DEFAULTS = ("1", "-", "N")  # fields 11..13


_T = TypeVar("_T")


class _Fail(Exception):
    """A load error of one line; the caller adds the file and line number."""


def _num(name: str, text: str, want_int: bool, what: str, limit: int = MAX_COUNT) -> int | float:
    """A quantity field as htools reads it, then held to exalloc's rule (model.validate):
    finite, from 0 (free amounts: -limit) to `limit` (MAX_MIB for sizes, else MAX_COUNT),
    checked before an Int would wrap as Haskell's does."""
    try:
        value = _read_number(name, text, want_int, wrap=False)
    except ValueError as exc:
        raise _Fail(str(exc)) from None
    signed = what.startswith("free ")
    problem = quantity_problem(value, limit=limit, signed=signed)
    if problem is not None:
        message = quantity_message(what, text, problem, limit=limit, signed=signed)
        raise _Fail(f"{name}: {message}")
    return value


def _enum(type_name: str, value: str, allowed: Iterable[str]) -> str:
    if value not in allowed:
        raise _Fail(f"Invalid string value for type {type_name}: {show_string(value)}")
    return value


def _parse_group(fields: list[str]) -> NodeGroup:
    if len(fields) < 4:
        raise _Fail(f"Invalid/incomplete group data: '{show_list(fields)}'")
    name, uuid, policy, tags = fields[:4]
    networks = fields[4] if len(fields) > 4 else ""
    _enum("AllocPolicy", policy, ALLOC_POLICIES)
    return NodeGroup(name, uuid, policy, comma_split(tags), comma_split(networks))


def _parse_node(fields: list[str], group_uuids: set[str]) -> Node:
    if len(fields) < 9:
        raise _Fail(f"Invalid/incomplete node data: '{show_list(fields)}'")
    fields = list(fields[:15]) + list(_NODE_DEFAULTS[len(fields) - 9 :])
    name, tm, nm, fm, td, fd, tc, role, gu, sp, tags, excl, fsp, ncpu, speed = fields
    if gu not in group_uuids:
        raise _Fail(f"Unknown group '{gu}' for node {name}")
    if "?" in (tm, nm, fm, td, fd, tc):
        # htools: Node.create name 0 0 0 0 0 0 0 True 0 0 gdx False (no tags, no master)
        return Node(name, 0.0, 0, 0, 0.0, 0, 0.0, gu, offline=True, spindles=0, reserved_cpus=0)
    numbers = (
        (tm, False, "total memory", MAX_MIB),
        (nm, True, "node memory", MAX_MIB),
        (fm, True, "free memory", MAX_MIB),
        (td, False, "total disk", MAX_MIB),
        (fd, True, "free disk", MAX_MIB),
        (tc, False, "total cpus", MAX_COUNT),
    )
    values = [_num(name, v, k, what, limit) for v, k, what, limit in numbers]
    ncpu_v = _num(name, ncpu, True, "reserved cpus")
    spindles = _num(name, sp, True, "spindles")
    cpu_speed = _num(name, speed, False, "cpu speed")
    free_spindles = _num(name, fsp, True, "free spindles")
    if excl not in ("Y", "N"):
        raise _Fail(f"Invalid exclusive_storage value for node '{name}': {excl}")
    t_mem, n_mem, f_mem, t_dsk, f_dsk, t_cpu = values
    return Node(
        name=name,
        total_memory_mib=float(t_mem),
        node_memory_mib=int(n_mem),
        free_memory_mib=int(f_mem),
        total_disk_mib=float(t_dsk),
        free_disk_mib=int(f_dsk),
        total_cpus=float(t_cpu),
        group_uuid=gu,
        offline=role == "Y",
        master=role == "M",
        drained=False,
        spindles=int(spindles),
        tags=comma_split(tags),
        exclusive_storage=excl == "Y",
        free_spindles=int(free_spindles),
        reserved_cpus=int(ncpu_v),
        cpu_speed=float(cpu_speed),
    )


def _parse_instance(fields: list[str], node_names: set[str]) -> Instance:
    if len(fields) < 10:
        raise _Fail(f"Invalid/incomplete instance data: '{show_list(fields)}'")
    fields = list(fields[:13]) + list(_INSTANCE_DEFAULTS[len(fields) - 10 :])
    name, mem, dsk, vcpus, status, auto_bal, pnode, snode, dt, tags, su, spin, forth = fields
    for node in (pnode, snode) if snode else (pnode,):
        if node not in node_names:
            raise _Fail(f"Unknown node '{node}' for instance {name}")
    memory = _num(name, mem, True, "memory", MAX_MIB)
    disk = _num(name, dsk, True, "disk", MAX_MIB)
    cpus = _num(name, vcpus, True, "vcpus")
    _enum("InstanceStatus", status, INSTANCE_STATUSES)
    if auto_bal not in ("Y", "N"):
        raise _Fail(f"Invalid auto_balance value '{auto_bal}' for instance {name}")
    if dt not in DISK_TEMPLATES:
        raise _Fail(
            f"Instance {name}: Invalid string value for type DiskTemplate: {show_string(dt)}"
        )
    spindle_use = _num(name, su, True, "spindle use")
    disk_spindles = None if spin == "-" else int(_num(name, spin, True, "spindles"))
    if forth not in ("Y", "N"):
        raise _Fail(f"Invalid forthcoming value '{forth}' for instance {name}")
    if dt in MIRRORED_TEMPLATES and snode == pnode:
        raise _Fail(f"Instance {name} has same primary and secondary node - {pnode}")
    return Instance(
        name=name,
        memory_mib=int(memory),
        disks=(Disk(int(disk), disk_spindles),),
        vcpus=int(cpus),
        status=status,
        auto_balance=auto_bal == "Y",
        primary=pnode,
        secondary=snode or None,
        disk_template=dt,
        tags=comma_split(tags),
        spindle_use=int(spindle_use),
        forthcoming=forth == "Y",
    )


def _parse_ispec(owner: str, text: str) -> ISpec:
    parts = comma_split(text)
    if len(parts) < 6:
        raise _Fail(f"Invalid ispec data for {owner}: {show_list(parts)}")
    keys = ("memsize", "cpucount", "disksize", "diskcount", "niccount", "spindleuse")
    return ISpec(
        *(
            int(_num(f"{owner}/{k}", v, True, k, MAX_MIB if k in _ISPEC_MIB else MAX_COUNT))
            for k, v in zip(keys, parts, strict=False)
        )
    )


_ISPEC_MIB = ("memsize", "disksize")


def _parse_ipolicy(fields: list[str]) -> tuple[str, IPolicy]:
    if len(fields) < 6:
        raise _Fail(f"Invalid ipolicy data: '{show_list(fields)}'")
    owner, std, minmax, templates, vcpu_ratio, spindle_ratio = fields[:6]
    std_spec = _parse_ispec(f"{owner}/stdspec", std)
    specs = sep_split(";", minmax)
    if len(specs) % 2:
        raise _Fail(f"Odd number of min/max specs for {owner}")
    pairs = tuple(
        MinMax(
            _parse_ispec(f"{owner}/minspec", specs[i]),
            _parse_ispec(f"{owner}/maxspec", specs[i + 1]),
        )
        for i in range(0, len(specs), 2)
    )
    dts = comma_split(templates)
    for dt in dts:
        _enum("DiskTemplate", dt, DISK_TEMPLATES)
    vcpu = _num(f"{owner}/vcpu_ratio", vcpu_ratio, False, "vcpu ratio")
    spindle = _num(f"{owner}/spindle_ratio", spindle_ratio, False, "spindle ratio")
    return owner, IPolicy(pairs, std_spec, dts, float(vcpu), float(spindle))


def _numbered_sections(lines: list[str]) -> list[list[tuple[int, str]]]:
    """Sections of (1-based line number, line), split at every empty line (`sepSplit ""`)."""
    return sep_split("", [(n, line) if line else "" for n, line in enumerate(lines, 1)])


def _load_section(
    source: str, rows: list[tuple[int, str]], parse: Callable[[list[str]], _T]
) -> list[_T]:
    out = []
    for number, line in rows:
        try:
            out.append(parse(sep_split("|", line)))
        except _Fail as exc:
            raise InputError(str(exc), source=source, line=number) from None
    return out


def parse_text(text: str, source: str = "<text>") -> Cluster:
    """Parse the text format; errors name `source` and the offending line."""
    lines = haskell_lines(text)
    sections = _numbered_sections(lines)
    if len(sections) < 4:
        raise InputError(
            f"Invalid format of the input file: {len(sections)} sections instead of 4 or more",
            source=source,
        )
    group_rows, node_rows, instance_rows, tag_rows = sections[:4]
    policy_rows = sections[4] if len(sections) > 4 else []
    groups = _load_section(source, group_rows, _parse_group)
    uuids = {g.uuid for g in groups}
    nodes = _load_section(source, node_rows, lambda f: _parse_node(f, uuids))
    names = {n.name for n in nodes}
    instances = _load_section(source, instance_rows, lambda f: _parse_instance(f, names))
    keys, ambiguous = keyed_occurrences(i.name for i in instances)
    if ambiguous:  # htools keeps every instance of a repeated name: so does exalloc, keyed apart
        instances = [replace(i, name=key) for i, key in zip(instances, keys, strict=True)]
    cluster_policy = DEFAULT_IPOLICY
    group_policies: dict[int, IPolicy] = {}
    for number, line in policy_rows:
        try:
            owner, policy = _parse_ipolicy(sep_split("|", line))
            if owner == "":
                cluster_policy = policy
                continue
            matches = [i for i, g in enumerate(groups) if owner in (g.name, g.uuid)]
            if len(matches) != 1:
                raise _Fail(f"Wrong number of elems found with name {owner}")
            group_policies[matches[0]] = policy
        except _Fail as exc:
            raise InputError(str(exc), source=source, line=number) from None
    groups = [
        NodeGroup(g.name, g.uuid, g.alloc_policy, g.tags, g.networks, group_policies[i])
        if i in group_policies
        else g
        for i, g in enumerate(groups)
    ]
    cluster = Cluster(
        groups=tuple(groups),
        nodes=tuple(nodes),
        instances=tuple(instances),
        cluster_tags=tuple(line for _, line in tag_rows),
        cluster_policy=cluster_policy,
        ambiguous_instances=ambiguous,
    )
    problem = cluster_problem(cluster)  # duplicates and cross-references (model.validate)
    if problem is not None:
        rows = {"group": group_rows, "node": node_rows, "instance": instance_rows}[problem.kind]
        raise InputError(problem.message, source=source, line=rows[problem.index][0])
    return cluster


def load_text(path: str | os.PathLike[str], *, static_kvm_node_memory: int = 4096) -> Cluster:
    """Read a text-backend file (UTF-8, undecodable bytes kept as surrogates).

    `static_kvm_node_memory` (htools' `--static-kvm-node-memory`) replaces the node memory of
    nodes whose hypervisor is kvm; the text format names no hypervisor, so, as in htools, it
    changes nothing here. It is taken so that every loader accepts the same options.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror}", source=source) from None
    return parse_text(text, source)


# ---------------------------------------------------------------------------------------------
# The writer (`-S` format: all 15 node fields, all 13 instance fields, every policy line).


def _spindles_field(inst: Instance) -> str:
    """htools' getTotalSpindles: the sum, `-` when any disk's spindles are unknown."""
    if any(d.spindles is None for d in inst.disks):
        return "-"
    return str(sum(d.spindles for d in inst.disks))  # type: ignore[misc]


def _ispec_field(spec: ISpec) -> str:
    return ",".join(
        str(v)
        for v in (
            spec.memory_size,
            spec.cpu_count,
            spec.disk_size,
            spec.disk_count,
            spec.nic_count,
            spec.spindle_use,
        )
    )


def _ipolicy_line(owner: str, policy: IPolicy) -> str:
    minmax = ";".join(f"{_ispec_field(m.min)};{_ispec_field(m.max)}" for m in policy.minmax)
    return "|".join(
        (
            owner,
            _ispec_field(policy.std),
            minmax,
            ",".join(policy.disk_templates),
            show_double(policy.vcpu_ratio),
            show_double(policy.spindle_ratio),
        )
    )


def _node_line(node: Node) -> str:
    role = "Y" if node.offline else ("M" if node.master else "N")
    return "|".join(
        (
            node.name,
            printf_0f(node.total_memory_mib),
            str(node.node_memory_mib),
            str(node.free_memory_mib),
            printf_0f(node.total_disk_mib),
            str(node.free_disk_mib),
            printf_0f(node.total_cpus),
            role,
            node.group_uuid,
            str(node.spindles),
            ",".join(node.tags),
            "Y" if node.exclusive_storage else "N",
            str(node.free_spindles),
            str(node.reserved_cpus),
            printf_f(node.cpu_speed),
        )
    )


def _instance_line(inst: Instance) -> str:
    return "|".join(
        (
            read_name(inst.name),
            str(inst.memory_mib),
            str(inst.disk_mib),
            str(inst.vcpus),
            inst.status,
            "Y" if inst.auto_balance else "N",
            inst.primary,
            inst.secondary or "",
            inst.disk_template,
            ",".join(inst.tags),
            str(inst.spindle_use),
            _spindles_field(inst),
            "Y" if inst.forthcoming else "N",
        )
    )


def _unlines(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


def dump_text(cluster: Cluster) -> str:
    """The cluster in htools' `-S` format (serializeCluster), byte for byte."""
    groups = _unlines(
        "|".join((g.name, g.uuid, g.alloc_policy, ",".join(g.tags), ",".join(g.networks)))
        for g in cluster.groups
    )
    nodes = _unlines(_node_line(n) for n in cluster.nodes)
    instances = _unlines(_instance_line(i) for i in cluster.instances)
    policies = _unlines(
        [_ipolicy_line("", cluster.cluster_policy)]
        + [_ipolicy_line(g.name, g.ipolicy) for g in cluster.groups]
    )
    return "\n".join((groups, nodes, instances, _unlines(cluster.cluster_tags), policies))


def save_text(cluster: Cluster, path: str | os.PathLike[str]) -> None:
    """Write atomically (model.files: whole or not at all; OutputError when it cannot)."""
    from model.files import write_file

    write_file(path, dump_text(cluster))


# ---------------------------------------------------------------------------------------------
# Common-suffix stripping (Loader.longestDomain / computeAlias): names stay whole, display
# aliases drop the longest `.`-starting suffix shared by every node and instance name.


def common_suffix(names: Sequence[str]) -> str:
    """Longest suffix of the first name that starts with `.` and ends every name ("" if none)."""
    if not names:
        return ""
    first, rest = names[0], names[1:]
    for i, ch in enumerate(first):
        if ch == "." and all(n.endswith(first[i:]) for n in rest):
            return first[i:]
    return ""


def cluster_suffix(cluster: Cluster) -> str:
    """The suffix htools strips for display (`Stripping common suffix of '...' from names`)."""
    names = [n.name for n in cluster.nodes] + [read_name(i.name) for i in cluster.instances]
    return common_suffix(names)


def alias(name: str, suffix: str) -> str:
    """The display name htools prints: `name` without `suffix` when it ends with it."""
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name
