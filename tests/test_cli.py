"""The command line: cli.py's table of commands, each program owning its arguments, and start-up
that imports only what the chosen command needs (docs/architecture.md, docs/hail.md)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cli
from programs.options import attached_optionals

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("pyomo", "highspy", "ortools", "numpy", "matplotlib", "dask")


def _modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code` in the repository."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_every_command_is_a_program_with_its_arguments_and_run() -> None:
    for name, (module, line) in cli.COMMANDS.items():
        program = importlib.import_module(f"programs.{module}")
        assert callable(program.add_arguments) and callable(program.run), name
        assert line and "\n" not in line, name
    parser = cli.build_parser(ready=tuple(cli.COMMANDS))
    listed = parser.format_help()
    assert all(f"    {name}" in listed for name in cli.COMMANDS)


def test_building_every_command_line_imports_no_solver() -> None:
    """Pyomo, the solvers and numpy are the program's to import when it runs, never the
    parser's: a usage error or --help answers at once."""
    loaded = _modules_after(f"import cli\ncli.build_parser(ready={tuple(cli.COMMANDS)!r})")
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert heavy == []
    assert not [m for m in loaded if m.startswith(("solvers.strategies", "formulations"))]


def test_top_level_help_imports_no_program() -> None:
    loaded = _modules_after("import cli\ncli.build_parser().format_help()")
    programs = [m for m in loaded if m.startswith("programs.")]
    assert programs == ["programs.options", "programs.parser"]


def test_exalloc_hail_in_process_imports_only_hail() -> None:
    loaded = _modules_after("import cli\ncli.hail_parser()")
    programs = {m for m in loaded if m.startswith(("programs.", "service."))}
    assert programs == {
        "programs.options",
        "programs.parser",
        "programs.hail",
        "service.hail_client",
    }


def test_a_chosen_command_gets_its_arguments_when_parsed() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        attached_optionals(["--time-limit", "5", "squeeze", "-L", "--move", "drbd"])
    )
    assert (args.command, args.luxi, args.move, args.time_limit) == ("squeeze", "", "drbd", 5.0)
    assert args.run is importlib.import_module("programs.squeeze").run
    again = parser.parse_args(["squeeze", "-t", "x.data"])  # filled once, parsed again
    assert (again.text_data, again.move) == ("x.data", "ext")


def test_exalloc_hail_is_named_so_in_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.hail_main(["--capacity-checks", "bogus", "request.json"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: exalloc-hail ")
    assert "\nexalloc-hail: error: argument --capacity-checks: invalid choice: 'bogus'" in err


# -- htools' conventions on every command (issue 39; Ganeti's htools-basic/invalid.test) --------


def _exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `exalloc ARGV` in process."""
    try:
        code = cli.main(argv)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", [*cli.COMMANDS, None])
def test_every_command_has_htools_version_and_completion(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--version` and `--help-completion` exit 0 on every command; the completion lists
    every shown option in htools' form (`-V,--version none`); an unknown option is a usage
    error, exit 2."""
    words = [command] if command else []
    code, out, _ = _exit_of([*words, "--version"], capsys)
    assert code == 0 and out.startswith("exalloc ")
    code, out, _ = _exit_of([*words, "--help-completion"], capsys)
    lines = out.splitlines()
    assert code == 0 and "--help-completion none" in lines
    assert any(line.endswith("--version none") for line in lines)
    assert all(line.split(" ", 1)[0].startswith("-") or line.split()[1].isdigit() for line in lines)
    code, _, err = _exit_of([*words, "--no-such-option"], capsys)
    assert code == 2 and "error:" in err


def test_completion_of_positional_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """Positional arguments end the completion text as htools' `argComplToText` does: hail's
    one request file, hscan's any number of hosts."""
    assert _exit_of(["hail", "--help-completion"], capsys)[1].endswith("\nfile 1 1\n")
    assert _exit_of(["scan", "--help-completion"], capsys)[1].endswith("\nhost 0 none\n")
    assert _exit_of(["--help-completion"], capsys)[1].endswith(
        "\nchoices=" + ",".join(cli.COMMANDS) + " 1 1\n"
    )


@pytest.mark.parametrize("argv", [[], ["a.json", "b.json"]], ids=["no request", "two"])
def test_exalloc_hail_without_one_request_is_hails_error(htools, capsys, argv: list[str]) -> None:
    """hail's `wrapReadRequest`: its own line and exit 1 (htools-no-backend.test), not a
    usage error."""
    real = subprocess.run([str(htools.hail), *argv], capture_output=True, text=True, timeout=60)
    code = cli.hail_main(argv)
    out = capsys.readouterr()
    assert (code, out.out, out.err) == (real.returncode, real.stdout, real.stderr)
    assert code == 1


@pytest.mark.parametrize("command", ["roll", "space", "balance", "n1", "info", "squeeze"])
def test_a_refusal_under_json_is_a_json_object_on_stdout(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file the reader refuses: the one-line error on stderr as before, and with --json the
    same message as a JSON object on stdout with the exit code (stdout was empty, so a script
    reading --json got nothing to parse)."""
    bad = tmp_path / "bad.data"
    bad.write_text("garbage\n")
    code = cli.main([command, "-t", str(bad), "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    doc = json.loads(out)
    assert doc["exit_code"] == 1 and "Invalid format of the input file" in doc["error"]
    assert doc["error"] in err and err.count("\n") == 1
    assert set(doc["timing"]) == {"startup_s", "run_s", "total_s"}
    assert cli.main([command, "-t", str(bad)]) == 1
    assert capsys.readouterr().out == ""  # without --json, stdout stays empty
