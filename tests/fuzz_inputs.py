"""Hypothesis strategies for hostile inputs: valid seeds (generated and from the repository),
mutated the way a careless tool or an attacker would (issue 14; docs/reliability.md).

Every mutation works on a real file format: fields of an htools text snapshot, values and
keys of an IAllocator JSON tree, spaces and disks of a Bareon schema and its hardware info,
and plain characters of any of them.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import dedicated_gen
import yaml
from hypothesis import strategies as st

from model.backends.text import dump_text
from model.generate import (
    DEDICATED_IPOLICY,
    ClusterSpec,
    generate_bareon,
    generate_cluster,
    generate_request,
)

REPO = Path(__file__).resolve().parent.parent

# -- tokens ---------------------------------------------------------------------------------------

HEX300 = "0x" + "f" * 300
#: Numbers as text: overflowing, non-finite, negative, absurd, odd but valid Haskell `read`s.
NUMBER_TOKENS = (
    "1e400", "1e309", "1e308", "-1e308", "NaN", "Infinity", "-Infinity", HEX300, "0x10", "0o17",
    "9007199254740992", "9007199254740993", "-9007199254740993", "99999999999999999999999",
    "-1", "-0", "0", "1", "2", "1.5", "12.0", "1e3", "(5)", "- 5", " 12", "12 ", "", "?",
    "\uff11\uff12", "1_000", "+3", ".5", "5.", "0x", "--1",
)  # fmt: skip
#: Anything else a field may hold.
TEXT_TOKENS = (
    "", " ", "|", ",", "\t", "Y", "N", "M", "?", "-", "running", "drbd", "plain", "ext",
    "diskless", "preferred", "unallocable", "x" * 5000, "\x00", "\udcff", "é", "\u2028",
    "a,b,,c", "htools:standby:auto", "node-01", "inst-00",
)  # fmt: skip
#: JSON values in place of any value of a request.
JSON_VALUES = (
    None, True, False, 0, -1, 1, 2, -(2**63), 2**63, 2**64 + 1, 10**30, 9007199254740993,
    0.5, 1e308, -1e308, 1e-308, "", "12", "x" * 10_000, "\x00", [], [1], {}, {"a": 1},
    [[[[[[]]]]]], "drbd", "plain", "up", "allocate", "multi-allocate",
)  # fmt: skip
#: yaql expressions: the ones schemas use, odd ones, and hostile ones (the sandbox's to stop).
YAQL_EXPRESSIONS = (
    "$.ram * 2", "$.get(ram, 1024) * 2", 'len($.disks.where($.type = "hdd")) * 10240',
    '$.disks.where($.type = "ssd")', "$.disks", "$.disks.select($.size).sum()", "16385 / 2",
    "$.ram * 0.3", "1 / 0", "$.nope", "$.disks[0].size", "$.disks[99]", "-1", "0",
    "pow(10, 300)", "pow(2, 100000000)", "range(0, 1000000000)", "range(0, 1000000000).len()",
    "'x' * 100000000", "$.__class__", "__import__('os')", "open('/etc/passwd')", "[[[[", "",
    "(" * 1500 + ")" * 1500, "'" + "a" * 3000 + "'", "$.disks.select($.id)", "true", "null",
    "float('inf')", "float('nan')", "let(x => 1) -> $x", "dict(a => 1)",
)  # fmt: skip
#: YAML scalars and fragments in place of a value or inside the text.
YAML_FRAGMENTS = (
    ".nan", ".inf", "-.inf", "1.0e+308", "1e400", "-5", "~", "[", "]", "{", "}", ": ", "- ",
    "&a ", "*a", "!!python/object:os.system", "? ", "\t", "'", '"', "#", "%YAML 1.1\n", "---\n",
    "...\n", "<<: *a", "\x00", "\ufeff",
)  # fmt: skip


#: Sizes in place of a schema's or a disk's.
SIZES = (1e308, -5, 2**60, 0.5, float("nan"), float("inf"), 0, 1)
HW_SIZES = (*SIZES, "100", None)


# -- valid seeds ----------------------------------------------------------------------------------


def _small_cluster(seed: int, exclusive: bool) -> Any:
    spec = ClusterSpec(
        nodes=4 + seed % 3,
        fill=0.4,
        exclusive_storage=exclusive,
        ipolicy=DEDICATED_IPOLICY if exclusive else ClusterSpec().ipolicy,
        templates=("plain", "drbd") if exclusive else ("ext", "plain", "drbd"),
        standby=seed % 2,
    )
    return generate_cluster(spec, seed)


def text_seeds() -> list[str]:
    """Small valid htools text snapshots: generated, and the repository's own."""
    seeds = [dump_text(_small_cluster(seed, exclusive=seed % 2 == 1)) for seed in range(6)]
    seeds += [p.read_text() for p in sorted((REPO / "data" / "squeeze").glob("*.data"))]
    return seeds


def request_seeds() -> list[dict[str, Any]]:
    """Small valid IAllocator requests exalloc answers (dedicated groups), and others."""
    out = []
    for seed in range(4):
        rng = random.Random(seed)
        out.append(dedicated_gen.allocate(rng, 5, fits=True))
        out.append(dedicated_gen.multi_allocate(rng, 5, 2, fits=True, template="drbd"))
    for seed in range(2):
        cluster = _small_cluster(seed, exclusive=True)
        out.append(generate_request(cluster, seed, "multi-allocate", 2))
    out += [json.loads(p.read_text()) for p in sorted((REPO / "data" / "requests").glob("*.json"))]
    return out


def fixture_seeds() -> list[dict[str, Any]]:
    """Bareon fixture documents (dynamic_schema + hw_info): the repository's, with yaql, and
    generated ones."""
    out = []
    for folder in ("fixtures", "probes"):
        for path in sorted((REPO / "data" / "bareon" / folder).glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            if isinstance(doc, dict) and "dynamic_schema" in doc and "hw_info" in doc:
                doc.pop("expected", None)
                out.append(doc)
    out += [generate_bareon(seed, 2, 4) for seed in range(4)]
    return out


# -- mutations ------------------------------------------------------------------------------------


def mutate_chars(data: st.DataObject, text: str, extra: tuple[str, ...] = ()) -> str:
    """A few character-level edits: truncate, insert, delete, replace."""
    for _ in range(data.draw(st.integers(0, 2), label="char edits")):
        if not text:
            break
        at = data.draw(st.integers(0, len(text)), label="at")
        op = data.draw(st.sampled_from(("truncate", "insert", "delete", "token")), label="op")
        if op == "truncate":
            text = text[:at]
        elif op == "insert":
            text = text[:at] + data.draw(st.text(max_size=8), label="chars") + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)) :]
        else:
            pool = NUMBER_TOKENS + extra
            text = text[:at] + data.draw(st.sampled_from(pool), label="token") + text[at:]
    return text


def _field_token(data: st.DataObject) -> str:
    kind = data.draw(st.sampled_from(("number", "text", "random")), label="token kind")
    if kind == "number":
        return data.draw(st.sampled_from(NUMBER_TOKENS), label="number")
    if kind == "text":
        return data.draw(st.sampled_from(TEXT_TOKENS), label="text")
    return data.draw(st.text(max_size=12), label="random")


def mutate_snapshot(data: st.DataObject, text: str) -> str:
    """Field-, line- and character-level edits of an htools text snapshot."""
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        live = [k for k, line in enumerate(lines) if line]
        if not live:
            break
        k = data.draw(st.sampled_from(live), label="line")
        op = data.draw(
            st.sampled_from(
                ("field", "field", "field", "name", "drop", "double", "swap", "blank", "fields")
            ),
            label="line op",
        )
        fields = lines[k].split("|")
        if op == "field":
            fields[data.draw(st.integers(0, len(fields) - 1))] = _field_token(data)
            lines[k] = "|".join(fields)
        elif op == "name":  # a name or reference replaced by another line's first field
            other = lines[data.draw(st.sampled_from(live), label="other")].split("|")[0]
            fields[data.draw(st.integers(0, len(fields) - 1))] = other
            lines[k] = "|".join(fields)
        elif op == "drop":
            del lines[k]
        elif op == "double":
            lines.insert(k, lines[k])
        elif op == "swap":
            j = data.draw(st.sampled_from(live), label="swap with")
            lines[k], lines[j] = lines[j], lines[k]
        elif op == "blank":
            lines.insert(k, "")
        else:  # fields added or removed at the end
            cut = data.draw(st.integers(0, len(fields) + 2), label="fields")
            lines[k] = "|".join((fields + ["1", "Y", "x"])[:cut])
    return mutate_chars(data, "\n".join(lines), TEXT_TOKENS)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside a JSON-like tree (dict keys and list indexes)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:20]):
            out += _paths(item, (*prefix, index))
    return out


def _at(tree: Any, path: tuple) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def mutate_tree(data: st.DataObject, tree: Any, values: tuple) -> Any:
    """Values replaced, keys removed, renamed or added anywhere in a JSON-like tree."""
    tree = copy.deepcopy(tree)
    for _ in range(data.draw(st.integers(1, 3), label="tree edits")):
        paths = [p for p in _paths(tree) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent, last = _at(tree, path[:-1]), path[-1]
        op = data.draw(
            st.sampled_from(("value", "value", "value", "number", "delete", "rename", "add")),
            label="tree op",
        )
        if op == "value":
            parent[last] = copy.deepcopy(data.draw(st.sampled_from(values), label="value"))
        elif op == "number":
            parent[last] = data.draw(
                st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False)), label="num"
            )
        elif op == "delete":
            del parent[last]
        elif op == "rename" and isinstance(parent, dict) and len(parent) > 1:
            other = data.draw(st.sampled_from(sorted(map(str, parent))), label="other key")
            parent[other] = parent.pop(last)  # two entries become one: a reference left dangling
        elif op == "add" and isinstance(parent, dict):
            parent[data.draw(st.text(max_size=6), label="key")] = parent[last]
    return tree


def dump_json(data: st.DataObject, tree: Any) -> str:
    """JSON text, sometimes with a key repeated, non-standard numbers or deep nesting."""
    text = json.dumps(tree, indent=data.draw(st.sampled_from((None, 1)), label="indent"))
    op = data.draw(st.sampled_from(("none", "none", "repeat", "token", "nest", "chars")))
    if op == "repeat" and '"nodes": {' in text:  # a node named twice, as raw JSON
        name = data.draw(st.sampled_from(sorted(tree.get("nodes") or {"n": 0})), label="name")
        text = text.replace('"nodes": {', f'"nodes": {{"{name}": {{}}, ', 1)
    elif op == "token":
        numbers = [k for k, ch in enumerate(text) if ch.isdigit()]
        if numbers:
            at = data.draw(st.sampled_from(numbers), label="number at")
            token = data.draw(st.sampled_from(("NaN", "Infinity", "1e400", HEX300, "-0")))
            text = text[:at] + token + text[at + 1 :]
    elif op == "nest":
        depth = data.draw(st.sampled_from((10, 999, 5000, 100_000)), label="depth")
        text = text.replace("[]", "[" * depth + "]" * depth, 1) if "[]" in text else text
    elif op == "chars":
        text = mutate_chars(data, text, ('"', "{", "}", "[", "]", ":", ","))
    return text


def _yaql(data: st.DataObject) -> str:
    return "yaql=" + data.draw(st.sampled_from(YAQL_EXPRESSIONS), label="yaql")


def mutate_schema(data: st.DataObject, schema: Any) -> Any:
    """Spaces of a dynamic schema edited: sizes, ids, types, disk preferences, yaql."""
    values = (*JSON_VALUES, "lv", "vg", "partition", "partitions", "unallocated", "sda")
    for _ in range(data.draw(st.integers(1, 3), label="schema edits")):
        if not isinstance(schema, list) or not schema:
            return mutate_tree(data, schema, values)
        k = data.draw(st.integers(0, len(schema) - 1), label="space")
        space = schema[k]
        op = data.draw(
            st.sampled_from(("yaql", "yaql", "size", "tree", "duplicate", "drop", "alias")),
            label="schema op",
        )
        if not isinstance(space, dict):
            schema[k] = data.draw(st.sampled_from(values), label="space value")
        elif op == "yaql":
            key = data.draw(st.sampled_from(("size", "min_size", "max_size", "weight",
                                             "best_with_disks", "id", "type")))  # fmt: skip
            space[key] = _yaql(data)
        elif op == "size":
            key = data.draw(st.sampled_from(("size", "min_size", "max_size", "weight")))
            space[key] = data.draw(st.one_of(st.sampled_from(SIZES), st.integers(-(2**64), 2**64)))
        elif op == "tree":
            schema[k] = mutate_tree(data, space, values)
        elif op == "duplicate":
            schema.append(copy.deepcopy(space))
        elif op == "drop":
            del schema[k]
        else:  # the same object twice: YAML writes an anchor and an alias
            schema.append(space)
    return schema


def mutate_hardware(data: st.DataObject, hw: Any) -> Any:
    """Disks of a hardware info edited: sizes, ids, types, and other keys yaql may read."""
    values = (*JSON_VALUES, "ssd", "hdd", "nvme", "sda")
    for _ in range(data.draw(st.integers(1, 3), label="hw edits")):
        disks = hw.get("disks") if isinstance(hw, dict) else None
        op = data.draw(
            st.sampled_from(("size", "size", "id", "type", "tree", "drop", "double", "ram")),
            label="hw op",
        )
        if not isinstance(disks, list) or not disks or op == "tree":
            hw = mutate_tree(data, hw, values)
            continue
        k = data.draw(st.integers(0, len(disks) - 1), label="disk")
        disk = disks[k]
        if not isinstance(disk, dict):
            disks[k] = data.draw(st.sampled_from(values))
        elif op == "size":
            disk["size"] = data.draw(
                st.one_of(st.sampled_from(HW_SIZES), st.integers(-(2**64), 2**64))
            )
        elif op == "id":
            first = disks[0].get("id") if isinstance(disks[0], dict) else "sda"  # a repeated id
            disk["id"] = data.draw(st.sampled_from((None, "", 7, first, ["a"])))
        elif op == "type":
            disk["type"] = data.draw(st.sampled_from(values))
        elif op == "drop":
            del disks[k]
        elif op == "double":
            disks.append(copy.deepcopy(disk))
        else:  # what the schema's yaql reads, e.g. $.ram
            hw["ram"] = data.draw(st.sampled_from(values))
    return hw


def dump_yaml(data: st.DataObject, doc: Any) -> str:
    """YAML text of `doc` (aliases where an object repeats), sometimes edited as characters."""
    try:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:  # e.g. a float('nan') key: fall back to JSON, which YAML reads
        text = json.dumps(doc, default=str)
    return mutate_chars(data, text, YAML_FRAGMENTS)
