"""The layers only look down (docs/architecture.md): model <- formulations <- solvers <- service
<- programs <- cli. Every import of every module, at its top or inside a function, is read from
the source (ast), so that a lazy import counts as much as any other."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("model", "formulations", "solvers", "service", "programs", "cli")
RANK = {name: rank for rank, name in enumerate(LAYERS)}
#: Only the formulations build Pyomo models and only the solvers run them.
SOLVER_PACKAGES = ("pyomo", "highspy", "ortools", "pysat")
MAY_IMPORT_SOLVER_PACKAGES = ("formulations", "solvers")


def _modules() -> dict[str, Path]:
    found = {"cli": REPO / "cli.py"}
    for package in LAYERS[:-1]:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement in the module."""
    source = path.read_text(encoding="utf-8")
    return _imports_in(source, name, is_package=path.name == "__init__.py")


def _imports_in(source: str, name: str, *, is_package: bool) -> Iterator[tuple[str, int]]:
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:  # `from model import errors` imports model.errors
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else base), node.lineno


def _project_module(imported: str) -> str | None:
    """The project module an import names (`model.errors.printable` -> model.errors)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def _layer(name: str) -> str:
    return name.split(".")[0]


def test_every_layer_is_found() -> None:
    assert {_layer(m) for m in MODULES} == set(LAYERS)
    assert len(MODULES) > 100


def test_every_form_of_import_is_read() -> None:
    source = (
        "import model.cluster\n"
        "from solvers import options\n"
        "from . import hail\n"
        "from .sources import source_of\n"
        "def later():\n"
        "    from service.locking import LockManager\n"
    )
    found = sorted(_imports_in(source, "programs.info", is_package=False))
    assert found == [
        ("model.cluster", 1),
        ("programs.hail", 3),
        ("programs.sources", 4),
        ("service.locking", 6),
        ("solvers.options", 2),
    ]


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{MODULES[name].relative_to(REPO)}:{line}: {name} imports {imported}"
        for name in MODULES
        for imported, line in _imports(name, MODULES[name])
        if imported.split(".")[0] in RANK and RANK[imported.split(".")[0]] > RANK[_layer(name)]
    ]
    assert upward == []


def test_pyomo_and_the_solvers_only_under_formulations_and_solvers() -> None:
    outside = [
        f"{MODULES[name].relative_to(REPO)}:{line}: {name} imports {imported}"
        for name in MODULES
        if _layer(name) not in MAY_IMPORT_SOLVER_PACKAGES
        for imported, line in _imports(name, MODULES[name])
        if imported.split(".")[0] in SOLVER_PACKAGES
    ]
    assert outside == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph(key: Callable[[str], str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for imported, _ in _imports(name, path):
            target = _project_module(imported)
            if target is not None and target != name and key(target) != key(name):
                graph[key(name)].add(key(target))
    return graph


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(_graph(lambda name: name)) == []


def test_no_import_cycle_between_packages() -> None:
    assert _cycles(_graph(_layer)) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_live_service_is_its_own_layer() -> None:
    """model/ is the cluster, not a server: the lock manager, the journal and the service's
    state and scheduling live in service/, and only programs and cli.py import that."""
    moved = ("locking", "journal", "alloc_state", "alloc_service")
    assert {"service.locking", "service.journal", "service.state", "service.allocation"} <= set(
        MODULES
    )
    assert [m for m in MODULES if m.startswith("model.") and m.rsplit(".", 1)[1] in moved] == []
    importers = {
        _layer(name)
        for name in MODULES
        for imported, _ in _imports(name, MODULES[name])
        if imported.split(".")[0] == "service" and _layer(name) != "service"
    }
    assert importers == {"programs", "cli"}


#: The sizes docs/architecture.md holds the code to: a program reads its input, calls one
#: strategy and reports; a module holds one concept (a longer one says why in its docstring).
MAX_PROGRAM_LINES = 450
MAX_MODULE_LINES = 1000
MAX_CLI_LINES = 400
ONE_CONCEPT = "because it is one concept"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_programs_are_thin_and_cli_only_dispatches() -> None:
    long = {
        name: _lines(path)
        for name, path in MODULES.items()
        if _layer(name) == "programs" and _lines(path) > MAX_PROGRAM_LINES
    }
    assert long == {}
    assert _lines(MODULES["cli"]) <= MAX_CLI_LINES


def _unexplained(modules: dict[str, Path]) -> dict[str, int]:
    """The modules over MAX_MODULE_LINES whose docstring does not say why they are one concept."""
    return {
        name: _lines(path)
        for name, path in modules.items()
        if _lines(path) > MAX_MODULE_LINES
        and ONE_CONCEPT
        not in " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    }


def test_a_long_module_says_why_it_is_one_concept() -> None:
    assert _unexplained(MODULES) == {}


def test_the_size_rule_finds_a_long_module_that_does_not_say_why(tmp_path: Path) -> None:
    body = "x = 1\n" * (MAX_MODULE_LINES + 1)
    (tmp_path / "silent.py").write_text('"""A module."""\n' + body)
    (tmp_path / "said.py").write_text(f'"""Long {ONE_CONCEPT}: the reason."""\n' + body)
    (tmp_path / "short.py").write_text('"""A module."""\nx = 1\n')
    found = {p.stem: p for p in tmp_path.glob("*.py")}
    assert set(_unexplained(found)) == {"silent"}
