"""The architecture as tests: walk every shipped module's imports with ``ast`` and check the rules hold.

Shipped code is what pyproject packages: ``storage``, ``broker``, ``connectors``, ``loadtest`` and the
client ``magnetar`` (clients/python/magnetar). Every ``import`` counts, wherever it is written: at the top
of a module, inside a function (a lazy import is still a dependency, it only runs later) and under
``if TYPE_CHECKING:`` (a type is a dependency on the module that defines it).

A *package* is the directory a module sits in (``storage/bookie/journal.py`` belongs to ``storage.bookie``),
except that a module directly in a top-level directory (``storage/errors.py``, ``broker/cli.py``,
``magnetar/__init__.py``) counts on its own: a top-level directory holds both the foundations every
subpackage imports (errors, config, the ledger metadata) and the entry points that wire the subpackages
together (``broker.cli``, ``broker.service``, the ``magnetar`` facade), so as one node it would be in a
"cycle" with every subpackage it wires. The rules:

* no cycle among packages (and none among a few named modules that once formed one);
* shipped code never imports ``tests`` (what tests and benchmarks share lives in ``storage.testing``);
* the dependency direction of DESIGN.md: ``magnetar`` depends on nothing of the server; ``storage`` never
  imports ``broker``; ``connectors`` uses the client; ``loadtest`` uses the clients and starts servers only
  through their CLIs (see ``ALLOWED`` for exactly what each may import).

A failure prints every offending import with its file and line, and each cycle as a chain.
"""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "storage": REPO / "storage",
    "broker": REPO / "broker",
    "connectors": REPO / "connectors",
    "loadtest": REPO / "loadtest",
    "magnetar": REPO / "clients" / "python" / "magnetar",
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (a project module, or the raw name for a non-project import)
    path: Path
    line: int
    text: str
    lazy: bool

    def where(self) -> str:
        how = " (inside a function)" if self.lazy else ""
        return f"{self.path.relative_to(REPO)}:{self.line} `{self.text}`{how}"


def module_files() -> dict[str, Path]:
    """Every shipped module by dotted name (a package by the name of its ``__init__``)."""
    out = {}
    for top, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """The longest prefix of ``name`` that is a project module (``name`` itself when none is)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return name


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, modules: dict[str, Path], source: str):
        self.module, self.path, self.modules, self.source = module, path, modules, source
        self.package = package_of(module, path)
        self.depth = 0
        self.found: list[Import] = []

    def _add(self, node: ast.AST, target: str) -> None:
        text = (ast.get_source_segment(self.source, node) or "").split("\n")[0]
        self.found.append(Import(self.module, target, self.path, node.lineno, text, self.depth > 0))

    def _nested(self, node) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, _resolve(alias.name, self.modules))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module
        for alias in node.names:
            self._add(node, _resolve(f"{stem}.{alias.name}", self.modules))


def collect_imports() -> tuple[dict[str, Path], list[Import]]:
    modules = module_files()
    found: list[Import] = []
    for module, path in modules.items():
        source = path.read_text()
        collector = _Collector(module, path, modules, source)
        collector.visit(ast.parse(source, str(path)))
        found.extend(collector.found)
    return modules, found


MODULES, IMPORTS = collect_imports()
PROJECT_IMPORTS = [i for i in IMPORTS if i.target in MODULES]


def node_of(module: str) -> str:
    """The package a module belongs to for the cycle rule (a top-level directory's modules stand alone)."""
    package = package_of(module, MODULES[module])
    return module if "." not in package else package


def _graph(edges: list[tuple[str, str, Import]]) -> dict[str, dict[str, list[Import]]]:
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for a, b, evidence in edges:
        if a != b and evidence not in graph[a][b]:  # `from x import a, b` is one import, once
            graph[a][b].append(evidence)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's components of more than one node, each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(graph: dict[str, dict[str, list[Import]]], start: str, within: set[str]) -> list[str]:
    """start -> ... -> start by breadth-first search inside one component."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, {})):
            if w not in within:
                continue
            if w == start:
                chain = [v]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return [start, *reversed(chain[:-1]), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in a component but on no cycle")


def describe_cycles(graph: dict[str, dict[str, list[Import]]], components: list[list[str]]) -> str:
    lines = []
    for component in components:
        chain = shortest_cycle(graph, component[0], set(component))
        lines.append(f"cycle among {', '.join(component)}:")
        lines.append(f"  {' -> '.join(chain)}")
        for a, b in zip(chain, chain[1:]):
            lines.append(f"  {a} -> {b}:")
            lines.extend(f"      {evidence.where()}" for evidence in graph[a][b])
    return "\n".join(lines)


def package_graph() -> dict[str, dict[str, list[Import]]]:
    return _graph([(node_of(i.source), node_of(i.target), i) for i in PROJECT_IMPORTS])


def module_graph() -> dict[str, dict[str, list[Import]]]:
    return _graph([(i.source, i.target, i) for i in PROJECT_IMPORTS])


# ---- the rules ---------------------------------------------------------------------------------------------


def test_the_walk_sees_the_project():
    """Guards the rules below against passing vacuously (a moved root, a parser that finds nothing)."""
    tops = {m.split(".")[0] for m in MODULES}
    assert tops == set(ROOTS)
    assert "storage.client.ledger_handle" in MODULES and "magnetar.protocol" in MODULES
    lazy = [i for i in PROJECT_IMPORTS if i.lazy]
    assert lazy, "function-level imports must be collected too"
    assert len({node_of(m) for m in MODULES}) >= 15


def test_no_package_import_cycles():
    graph = package_graph()
    components = strongly_connected(graph)
    assert not components, "package import cycles:\n" + describe_cycles(graph, components)


# Module pairs that once imported each other (the ledger handle lazily imported the ensemble change, which
# imported the handle for its type). Module cycles inside one package are otherwise allowed, but not these.
RETIRED_MODULE_CYCLES = [("storage.client.ledger_handle", "storage.client.ensemble_change")]


def test_retired_module_cycles_stay_gone():
    graph = module_graph()
    components = strongly_connected(graph)
    bad = [c for c in components if any(a in c and b in c for a, b in RETIRED_MODULE_CYCLES)]
    assert not bad, "module import cycles that were broken are back:\n" + describe_cycles(graph, bad)


def test_shipped_code_never_imports_tests():
    bad = {f"  {i.source}: {i.where()}" for i in IMPORTS if i.target == "tests" or i.target.startswith("tests.")}
    assert not bad, "shipped code imports tests/ (move what it needs to storage.testing):\n" + "\n".join(sorted(bad))


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


# What each top-level package may import from the others (DESIGN.md, "Dependency direction"). A prefix names a
# package and everything below it. Imports inside one top-level package are not restricted here.
ALLOWED: dict[str, list[str]] = {
    # The client depends on nothing of the server; it owns the wire codec the broker imports.
    "magnetar": [],
    # storage never imports broker (nor the magnetar client, connectors or loadtest: nothing above it).
    "storage": [],
    # broker depends on storage and on the client's codec.
    "broker": ["storage", "magnetar"],
    # The Spark connector uses the client.
    "connectors": ["magnetar"],
    # loadtest uses the clients: the Pulsar client, the Spark connector, and the ledger store's client side
    # (ledger client, managed ledger and its cursor codecs, autorecovery's metadata views, the shell's write
    # loop) that the ledger, cursor and recovery suites drive against bookie processes. It starts servers
    # only through their CLIs (storage.testing), so the servers' code (storage.bookie, broker) is out.
    "loadtest": ["magnetar", "connectors", "storage"],
}
FORBIDDEN_BELOW_ALLOWED: dict[str, list[str]] = {
    "loadtest": ["storage.bookie"],
}


def direction_violations() -> list[Import]:
    bad = []
    for i in PROJECT_IMPORTS:
        source_top, target_top = i.source.split(".")[0], i.target.split(".")[0]
        if source_top == target_top:
            continue
        allowed = any(_under(i.target, p) for p in ALLOWED[source_top])
        forbidden = any(_under(i.target, p) for p in FORBIDDEN_BELOW_ALLOWED.get(source_top, []))
        if not allowed or forbidden:
            bad.append(i)
    return bad


def test_only_loadtest_imports_the_testing_package():
    """storage.testing is for tests and benchmarks; no server or client code may come to depend on it."""
    bad = [i for i in PROJECT_IMPORTS if _under(i.target, "storage.testing")
           and not (_under(i.source, "storage.testing") or _under(i.source, "loadtest"))]
    assert not bad, "shipped code imports storage.testing:\n" + "\n".join(f"  {i.source}: {i.where()}" for i in bad)


def test_dependency_direction_of_design():
    bad = direction_violations()
    assert not bad, "imports against DESIGN.md's dependency direction:\n" + "\n".join(
        f"  {i.source} -> {i.target}: {i.where()}" for i in bad)


# ---- the checker itself, on small graphs -----------------------------------------------------------------


def _edges(*pairs: str) -> dict[str, dict[str, list[Import]]]:
    stub = Import("a", "b", REPO / "x.py", 1, "import b", False)
    return _graph([(p.split(">")[0], p.split(">")[1], stub) for p in pairs])


def test_cycle_finder_on_tables():
    assert strongly_connected(_edges("a>b", "b>c")) == []
    assert strongly_connected(_edges("a>b", "b>a", "b>c")) == [["a", "b"]]
    assert strongly_connected(_edges("a>b", "b>c", "c>a", "c>d", "d>e", "e>d")) == [["a", "b", "c"], ["d", "e"]]
    graph = _edges("a>b", "b>c", "c>a", "b>a")
    assert shortest_cycle(graph, "a", {"a", "b", "c"}) == ["a", "b", "a"]


def test_import_resolution():
    modules = {"storage": Path("storage/__init__.py"), "storage.client": Path("storage/client/__init__.py"),
               "storage.client.faults": Path("storage/client/faults.py")}
    source = ("from storage.client import faults, FaultPlan\nfrom . import faults as f\n"
              "def later():\n    from .. import errors\n    import tests.harness\n")
    collector = _Collector("storage.client.connection", Path("storage/client/connection.py"), modules, source)
    collector.visit(ast.parse(source))
    assert [(i.target, i.lazy) for i in collector.found] == [
        ("storage.client.faults", False), ("storage.client", False), ("storage.client.faults", False),
        ("storage", True), ("tests.harness", True)]
