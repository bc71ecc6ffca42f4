"""exalloc: exact answers to Ganeti's capacity questions and Bareon's disk layouts.

Where Ganeti's htools (hail, hsqueeze, hbal, hspace, hroller) decide greedily and Bareon's allocator
rounds a linear relaxation, exalloc solves each question exactly as a MIP (HiGHS or OR-Tools
CP-SAT), says how good the answer is (optimal, or the gap to a proven bound), checks it with an
independent checker, and shows what the greedy tool would have done.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager

# cli.py only builds the top-level parser, dispatches to a program, prints, and maps errors to
# exit codes; each program under programs/ owns its arguments (`add_arguments`) and its `run`.
# Nothing is imported at the top: `exalloc-hail` imports this module on every call it answers in
# process (docs/hail.md, "Start-up").

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): a bug, not bad input
REPORT_HINT = "this is a bug in exalloc: please report it with the command and its input"

PRODUCT = __doc__

#: Every command: the module of programs/ that owns its arguments and its `run`, and the line
#: `exalloc --help` shows. A module is imported only when its command is chosen.
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("info", "hinfo, byte for byte (snapshot, request or live); --summary: exalloc's view"),
    "scan": ("scan", "text snapshots of running clusters, like hscan"),
    "hail": ("hail", "IAllocator: answer a Ganeti allocation request, like hail"),
    "hail-server": (
        "hail_service",
        "keep exalloc loaded and answer exalloc-hail calls over a Unix socket",
    ),
    "squeeze": ("squeeze", "power nodes down (or standby nodes up), like hsqueeze"),
    "roll": ("roll", "rolling reboots in the fewest rounds, proven, like hroller"),
    "space": ("space", "how many more instances fit, proven, and hspace's tiered answer"),
    "balance": ("balance", "balance a group's score by hbal's moves (--greedy: hbal)"),
    "n1": ("n1", "exact N+1 health: can every node's failure be absorbed? --greedy: hcheck"),
    "redistribute": (
        "redistribute",
        "the fewest moves to healthy peer groups that make every group healthy, proven",
    ),
    "compress": (
        "compress",
        "which groups can be emptied into their peer groups, proven, and the best plan",
    ),
    "evacuate": ("evacuate", "evacuate nodes inside their group first, then across groups, proven"),
    "partition": ("partition", "integer Bareon disk layout from a dynamic schema"),
    "generate": (
        "generate",
        "write seeded synthetic snapshots, IAllocator requests and Bareon pairs",
    ),
    "compare": ("compare", "exalloc's exact answer beside the greedy tool's, input by input"),
    "batch": ("batch", "solve many inputs in parallel into a resumable JSONL file"),
    "report": ("report", "plots and a summary table from batch results"),
    "alloc-server": (
        "alloc_server",
        "live allocation service: concurrent creations under Ganeti's locks",
    ),
    "create": ("create", "create an instance through the allocation service"),
    "verify": ("verify", "cluster-wide check holding every node lock and the node-allocation lock"),
    "state": ("state", "the allocation service's cluster, locks and activities"),
    "loadtest": ("loadtest", "many concurrent creations against the allocation service, measured"),
}


def _add_program(name: str, parser: argparse.ArgumentParser) -> None:
    """The arguments and the `run` of command `name`, from its program module (once)."""
    if parser.get_default("run") is not None:
        return
    import importlib

    from programs.parser import standard_options

    program = importlib.import_module(f"programs.{COMMANDS[name][0]}")
    program.add_arguments(parser)
    standard_options(parser)  # -V/--version and --help-completion on every command
    parser.set_defaults(run=program.run, usage=parser.format_usage)
    if name == "hail-server":  # its workers answer each call through `main` (_warm_main)
        parser.set_defaults(make_main=_warm_main)


def build_parser(ready: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line; the commands in `ready` get their arguments now, the others when
    chosen."""
    import argparse

    from programs import options
    from programs.parser import Commands, Parser, standard_options

    parser = Parser(
        prog="exalloc",
        description=PRODUCT,
        epilog="Run 'exalloc COMMAND --help' for a command's options.\n"
        "README.md and docs/ explain each command and how its answers are proven.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    standard_options(parser)
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an internal error, print the traceback as well",
    )
    options.solver_options(parser, shown=False)
    options.json_option(parser, shown=False)
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=Parser, action=Commands
    )
    sub.required = True
    sub.fill = _add_program
    for name, (_, line) in COMMANDS.items():
        command = sub.add_parser(name, help=line)
        if name in ready:
            _add_program(name, command)
    return parser


#: Commands that serve until stopped: their process ends the ordinary way (`_exit_now`).
SERVING = frozenset({"hail-server", "alloc-server"})


def main(
    argv: Sequence[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    *,
    iallocator: bool = False,
    started_at: float | None = None,
) -> int:
    """Parse, run, print. `parser` lets a server reuse one built ahead of the call;
    `iallocator`: Ganeti's call (exalloc-hail, the hail-server), which shows no progress
    unless asked. `started_at` (perf_counter) is when the answer began, which --time-limit
    counts from: the process's start when `argv` is the process's own command line, else the
    call's (a server's worker, a test). When `argv` is the process's own command line
    (`exalloc`, `python -m cli`), the process ends once the answer is printed (`_exit_now`)."""
    code = _main(argv, parser, iallocator=iallocator, started_at=started_at)
    if argv is None and parser is None and not SERVING & set(sys.argv[1:]):
        _exit_now(code)
    return code


def _exit_now(code: int) -> int:
    """End the process with `code` as soon as its answer is out: the interpreter's teardown,
    freeing every model and solver object one by one, took 1.4 s after a 10 s `hail` answer
    on 200 nodes (load 6), time the user (or Ganeti) waits inside --time-limit for nothing.
    The atexit handlers run first (temporary directories' cleanup, logging); with a thread
    other than a daemon still alive, or stdout not flushed, the ordinary exit."""
    import atexit
    import os
    import threading

    main_thread = threading.main_thread()
    if any(t.is_alive() and not t.daemon and t is not main_thread for t in threading.enumerate()):
        return code
    atexit._run_exitfuncs()  # noqa: SLF001 - what the ordinary exit runs first
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    os._exit(code)


def _main(
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser | None,
    *,
    iallocator: bool,
    started_at: float | None,
) -> int:
    import json
    import time

    from model.errors import ExallocError, HtoolsError, UsageError, printable
    from programs.options import attached_optionals, settle_solver_options

    if started_at is None:
        from solvers.options import process_started

        started_at = process_started() if argv is None else time.perf_counter()
    words = sys.argv[1:] if argv is None else argv
    args = (parser or build_parser()).parse_args(attached_optionals(words))
    settle_solver_options(args, started_at)
    try:
        ran_at = time.perf_counter()
        with _progress(args, iallocator):
            report = args.run(args)
        if args.json:
            doc = report.to_json()
            if isinstance(doc, dict):  # where the time went, the start-up included
                doc = _with_timing(doc, started_at, ran_at)
            text = json.dumps(doc, indent=2)
        else:
            text = report.text()
        sys.stderr.write(getattr(report, "stderr", ""))  # the htools program's own bytes first
        for note in getattr(report, "notes", ()):
            print(f"exalloc: note: {printable(note)}", file=sys.stderr)
    except HtoolsError as err:  # the htools program's own line, as scripts match it
        body = err.message.rstrip("\n")  # a message's own newlines: htools' empty lines
        sys.stderr.write(f"Error: {printable(body)}\n" + "\n" * (len(err.message) - len(body)))
        return _error_json(args, body, err.exit_code, started_at, ran_at)
    except UsageError as err:  # as argparse's own: the command's usage line, then the error
        usage = getattr(args, "usage", None)
        sys.stderr.write(usage() if usage else "")
        print(f"exalloc: error: {printable(str(err))}", file=sys.stderr)
        return _error_json(args, str(err), err.exit_code, started_at, ran_at)
    except ExallocError as err:  # quoted input (a name, a yaql text) cannot break the line
        print(f"exalloc: error: {printable(str(err))}", file=sys.stderr)
        return _error_json(args, str(err), err.exit_code, started_at, ran_at)
    except KeyboardInterrupt:
        print("exalloc: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: a bug, never a traceback
        return _internal_error(err, debug=getattr(args, "debug", False))
    return _print(text, getattr(report, "exit_code", EXIT_OK))


def _error_json(
    args: argparse.Namespace, message: str, code: int, started: float, ran: float
) -> int:
    """With --json, a refusal is a JSON object on stdout too (`error`, `exit_code`, `timing`),
    as the programs' own refusals are: a script reading stdout gets an answer, not nothing."""
    if getattr(args, "json", False):
        import json

        doc = _with_timing({"error": message, "exit_code": code}, started, ran)
        _print(json.dumps(doc, indent=2), code)
    return code


def _with_timing(doc: dict, started_at: float, ran_at: float) -> dict:
    """`doc` with `timing` (added to a program's own): `startup_s`, Python's start-up, the
    imports and the command line's parsing (what --time-limit counts before the program
    runs), `run_s` the program's own run, `total_s` the two and the JSON's making."""
    import time

    now = time.perf_counter()
    timing = dict(doc.get("timing") or {})
    timing.update(
        startup_s=round(ran_at - started_at, 4),
        run_s=round(now - ran_at, 4),
        total_s=round(now - started_at, 4),
    )
    return {**doc, "timing": timing}


def _progress(args: argparse.Namespace, iallocator: bool) -> AbstractContextManager[object]:
    """The solves' status line on stderr (solvers/progress.py): with --progress, or when
    stderr is a terminal outside iallocator mode; never on stdout."""
    from solvers import progress

    terminal = sys.stderr.isatty()
    shown = getattr(args, "progress", False) or (terminal and not iallocator)
    if getattr(args, "own_progress", False):  # `batch` draws its own bar
        shown = False
    return progress.reporting(sys.stderr if shown else None, terminal=terminal)


def _print(text: str, exit_code: int) -> int:
    import contextlib
    import os

    try:
        if text:  # empty when the program printed as it went (squeeze -X)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `exalloc ... | head`: the reader left, nothing more to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return exit_code


def _internal_error(err: Exception, *, debug: bool) -> int:
    """One line naming the exception and where it was raised, a hint to report it, exit 70;
    the traceback only with --debug."""
    import os
    import traceback  # only on this path: exalloc-hail starts once per request

    from model.errors import printable

    if debug:
        traceback.print_exception(err, file=sys.stderr)
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    what = printable(" ".join(str(err).split()), 300)
    what = f"{type(err).__name__}: {what}" if what else type(err).__name__
    hint = "" if debug else "; rerun with --debug for the traceback"
    print(f"exalloc: internal error: {what}{where} ({REPORT_HINT}{hint})", file=sys.stderr)
    return EXIT_INTERNAL


# -- exalloc-hail and its server ----------------------------------------------------------------


def _warm_main() -> Callable[[list[str]], int]:
    """`main` with its parser built now: hail-server workers build it before their call."""
    import functools

    return functools.partial(main, parser=build_parser(ready=("hail",)), iallocator=True)


def hail_parser() -> argparse.ArgumentParser:
    """The command line as `exalloc-hail` sees it: `exalloc hail`, named exalloc-hail, its
    arguments added ahead of the call."""
    parser = build_parser(ready=("hail",))
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse has no API
        hail = getattr(action, "choices", {}).get("hail")
        if hail is not None:
            hail.prog = "exalloc-hail"
    return parser


def hail_main(argv: Sequence[str] | None = None, started_at: float | None = None) -> int:
    """`exalloc-hail [OPTIONS] REQUEST.json` answered in this process."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main(["hail", *args], parser=hail_parser(), iallocator=True, started_at=started_at)


def hail_console() -> int:
    """The `exalloc-hail` script (scripts/exalloc-hail): the answer of a running `exalloc
    hail-server` (service.hail_client.forward, which imports almost nothing), else this
    process's own (argparse and the rest imported only then)."""
    from service.hail_client import forward

    args = sys.argv[1:]
    code = forward(args)
    if code is not None:
        return code
    from solvers.options import process_started

    code = hail_main(args, started_at=process_started())  # the limit counts the start-up
    return _exit_now(code)  # Ganeti waits for the process's end, not for the answer's


if __name__ == "__main__":
    sys.exit(main())
