"""The ranked group list of an allocate (seed 001: "return the entire list to Ganeti"):
`exalloc hail --json` lists every group tried, ranked as hail ranks them, with its score,
nodes, successes and failure counts. The real hail says the same only in its info text; each
group's entry is held to that text on Ganeti's allocate requests."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

import cli

#: hail's line for a group with an answer, and for one without (solutionDescription).
_ANSWERED = re.compile(
    r"Group (?P<group>.+?) \((?P<policy>\w+)\): score: (?P<score>[\d.]+), "
    r"successes (?P<successes>\d+), failures (?P<failed>\d+) \((?P<modes>[^)]*)\) "
    r"for node\(s\) (?P<nodes>\S+)"
)
_NONE = re.compile(
    r"Group (?P<group>.+?) \((?P<policy>\w+)\): No valid allocation solutions, "
    r"failure reasons: (?P<modes>.*)"
)


def _hail_groups(info: str) -> tuple[str | None, dict[str, dict]]:
    """The group hail selected and each group's line, from its info text."""
    selected = re.search(r"Selected group: ([^,]+)", info)
    groups = {}
    for part in re.split(r", (?=Group )", info):
        found = _ANSWERED.search(part) or _NONE.search(part)
        if found:
            groups[found["group"]] = found.groupdict()
    return (selected[1] if selected else None), groups


def _modes(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(Fail\w+): (\d+)", text or "")}


@pytest.mark.reference
def test_every_group_tried_is_listed_and_ranked_as_hail(ganeti, capsys) -> None:
    requests = sorted(ganeti.data_dir.glob("hail-alloc*.json"))
    compared = 0
    for path in requests:
        if json.loads(path.read_text())["request"]["type"] != "allocate":
            continue
        for extra in ([], ["--no-capacity-checks"]):
            real = subprocess.run(
                [str(ganeti.hail), str(path), *extra], capture_output=True, text=True, timeout=60
            )
            info = json.loads(real.stdout)["info"]
            selected, lines = _hail_groups(info)
            code = cli.main(["hail", "--json", "--capacity-checks", "greedy", str(path), *extra])
            out = json.loads(capsys.readouterr().out)
            assert code == 0
            groups = out.get("groups", [])
            if not lines:  # a dedicated or one-group request hail words otherwise
                continue
            compared += 1
            ranks = [g["rank"] for g in groups if g["rank"] is not None]
            assert ranks == list(range(1, len(ranks) + 1)), path.name
            assert (groups[0]["group"] if ranks else None) == selected, path.name
            for g in groups:
                line = lines.get(g["group"])
                if "error" in g:
                    assert g["error"] in info, path.name
                    continue
                assert line is not None, (path.name, g["group"])
                assert g["policy"] == line["policy"]
                assert _modes(line["modes"]) == g["failures"], (path.name, g["group"])
                if g["score"] is None:
                    assert "score" not in line
                else:
                    assert f"{g['score']:.8f}" == line["score"], (path.name, g["group"])
                    assert g["successes"] == int(line["successes"])
                    assert ",".join(g["nodes"]) == line["nodes"].replace("/", ",")
    assert compared >= 10
