"""The import graph of ``src/fastlower`` has no cycle: layers point one way.

The graph is built from the source with ``ast`` (nothing is imported), one node per
module (a package is its ``__init__``). An edge ``a -> b`` is any of:

* an ``import`` / ``from ... import`` statement in ``a`` naming ``b``, at module
  level *or inside a function* (a lazy import hides a cycle without removing it);
  ``from p import x`` points at ``p.x`` when that is a module, else at ``p``;
* a ``"fastlower.b:attribute"`` string literal in ``a``: the ``"module:attribute"``
  form fastlower imports by name later (``patch.ENTRY_POINTS``), a dependency all
  the same.

* the implicit import of the target's parent packages: ``import p.m`` (or ``from p.m
  import x``) runs ``p/__init__`` first, so it is an edge to ``p [as run]`` too, unless
  the importer is inside ``p`` (``p`` is then being imported already; a package whose
  ``__init__`` re-exports its own modules is no cycle). ``p [as run]`` is the package's
  ``__init__`` as it runs: its edges but those under ``if TYPE_CHECKING:``, which
  declare the names a lazy ``__init__`` (PEP 562) exports, dependencies of whoever
  imports those names from ``p`` but not of whoever imports a light ``p.m``.

* an import under ``if TYPE_CHECKING:``: never run, but a type named across layers is a
  dependency all the same (kind "type checking").

Not counted, on purpose: ``importlib.import_module`` of names computed at run time (user
modules, ``fastlower._core``), which are not fastlower layers.

Every cycle fails the test, named module by module with the line of each import,
except those of ``KNOWN_CYCLES`` (empty; it may not grow past ``MAX_KNOWN``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

import fastlower

PACKAGE = "fastlower"
_ROOT_IN_TREE = Path(__file__).resolve().parents[1] / "src" / PACKAGE
# the source tree when run from a checkout, else the installed package
ROOT = _ROOT_IN_TREE if _ROOT_IN_TREE.is_dir() else Path(fastlower.__file__).parent

# "fastlower.cache:to_executorch": a module named for a later import by name
_BY_NAME = re.compile(rf"^({PACKAGE}(?:\.\w+)*):\w+$")

Edge = Tuple[str, int, str]  # target module, line, "module" / "function" / "by name" / ...
AS_RUN = " [as run]"  # a package's __init__ as it runs (see the module docstring)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def modules(root: Path = ROOT) -> Dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, kind: str = "module") -> Iterator[Tuple[ast.AST, str]]:
    """Every node under ``node``, with where it is: "module", "function" (inside a
    function) or "type checking" (under ``if TYPE_CHECKING:``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.body:
                yield other, "type checking"
                yield from _walk(other, "type checking")
            for other in child.orelse:
                yield other, kind
                yield from _walk(other, kind)
            continue
        inner = kind
        if kind == "module" and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda)):
            inner = "function"
        yield child, inner
        yield from _walk(child, inner)


def _resolve(current: str, is_package: bool, module: Optional[str], level: int) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:-(level - 1)]
    return ".".join(base + ([module] if module else []))


def imports(name: str, path: Path, known: Set[str]) -> List[Edge]:
    """The fastlower modules ``name`` imports, with line and kind."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    edges: List[Edge] = []

    def add(target: str, line: int, kind: str) -> None:
        if target in known and target != name:
            edges.append((target, line, kind))
            # importing p.m runs p/__init__ first, unless the importer is inside p (then p
            # is being imported already)
            parts = target.split(".")
            for k in range(len(parts) - 1, 0, -1):
                package = ".".join(parts[:k])
                if name == package or name.startswith(package + "."):
                    break
                if package in known:
                    edges.append((package + AS_RUN, line, f"{kind}, package __init__"))

    for node, kind in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.module, node.level)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base, node.lineno, kind)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _BY_NAME.match(node.value)
            if match:
                add(match.group(1), node.lineno, "by name")
    return edges


def import_graph(root: Path = ROOT) -> Dict[str, List[Edge]]:
    """Module -> the fastlower modules it imports (see the module docstring)."""
    mods = modules(root)
    known = set(mods)
    graph = {name: imports(name, path, known) for name, path in mods.items()}
    for name, path in mods.items():
        if path.name == "__init__.py":
            graph[name + AS_RUN] = [e for e in graph[name] if e[2] != "type checking"]
    return graph


def cycles(graph: Dict[str, List[Edge]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), each
    sorted, listed in sorted order."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        # iterative enough for a package of this size; recursion depth = longest path
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in graph.get(v, ()):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_cycle(graph: Dict[str, List[Edge]], component: List[str]) -> List[Tuple[str, Edge]]:
    """One shortest cycle through the component's first module, edge by edge."""
    members = set(component)
    start = component[0]
    # breadth-first from start back to start, inside the component
    previous: Dict[str, Tuple[str, Edge]] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for edge in graph[v]:
                w = edge[0]
                if w not in members:
                    continue
                if w == start:
                    path = [(v, edge)]
                    while v != start:
                        v, e = previous[v]
                        path.append((v, e))
                    return path[::-1]
                if w not in seen:
                    seen.add(w)
                    previous[w] = (v, edge)
                    nxt.append(w)
        frontier = nxt
    return []


def describe(graph: Dict[str, List[Edge]], component: List[str]) -> str:
    steps = shortest_cycle(graph, component)
    lines = [f"cycle among {len(component)} modules: {', '.join(component)}",
             "  e.g.:"]
    for source, (target, line, kind) in steps:
        lines.append(f"    {source} -> {target}  (line {line}, {kind})")
    return "\n".join(lines)


#: cycles tolerated for now, each made by one function-level import, and why it is there
KNOWN_CYCLES: dict = {}
MAX_KNOWN = 0  # the list only shrinks


def test_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 50, f"found only {len(graph)} modules under {ROOT}"
    found = [c for c in cycles(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles in src/fastlower:\n" + "\n".join(
        describe(graph, c) for c in found)


def test_known_cycles_are_few_and_still_there():
    assert len(KNOWN_CYCLES) <= MAX_KNOWN
    graph = import_graph()
    present = {frozenset(c) for c in cycles(graph)}
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in present]
    assert not gone, f"fixed: strike these from KNOWN_CYCLES: {gone}"
    for component in KNOWN_CYCLES:  # each is one lazy import, nothing worse
        lazy = [(s, t) for s in component for t, _, kind in graph[s]
                if t in component and kind == "function"]
        assert len(lazy) == 1, (sorted(component), lazy)


# --- the checker itself -----------------------------------------------------------------

def _package(tmp_path: Path, files: Dict[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("b_text, kind", [
    ("from .a import x\n", "module"),
    ("def f():\n    from . import a\n", "function"),
    ("import fastlower.a\n", "module"),
    ("ENTRY = 'fastlower.a:thing'\n", "by name"),
    ("from .sub import mod\n", None),  # no cycle: sub.mod does not import b
])
def test_checker_finds_cycles(tmp_path, b_text, kind):
    root = _package(tmp_path, {
        "__init__.py": "", "a.py": "from .b import y\n", "b.py": b_text,
        "sub/__init__.py": "", "sub/mod.py": "X = 1\n",
    })
    graph = import_graph(root)
    found = cycles(graph)
    if kind is None:
        assert found == [], found
        assert ("fastlower.sub.mod", 1, "module") in graph["fastlower.b"]
        return
    assert found == [["fastlower.a", "fastlower.b"]]
    assert any(k == kind for t, _, k in graph["fastlower.b"] if t == "fastlower.a")
    assert "fastlower.a -> fastlower.b" in describe(graph, found[0])


def test_checker_counts_the_package_init(tmp_path):
    """``pkg/__init__`` lazily imports ``b``, which imports ``pkg.mod``: running
    ``pkg/__init__`` first, a cycle; ``pkg.mod`` importing its sibling is none."""
    root = _package(tmp_path, {
        "__init__.py": "", "b.py": "from .pkg import mod\n",
        "pkg/__init__.py": "def __getattr__(name):\n    from .. import b\n    return b\n",
        "pkg/mod.py": "from . import other\n", "pkg/other.py": "X = 1\n",
    })
    graph = import_graph(root)
    assert ("fastlower.pkg [as run]", 1, "module, package __init__") in graph["fastlower.b"]
    assert all(t not in ("fastlower.pkg", "fastlower.pkg [as run]")
               for t, _, _ in graph["fastlower.pkg.mod"])
    assert cycles(graph) == [["fastlower.b", "fastlower.pkg [as run]"]]


def test_checker_counts_type_checking(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "a.py": "from .b import y\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
    })
    graph = import_graph(root)
    assert ("fastlower.a", 3, "type checking") in graph["fastlower.b"]
    assert cycles(graph) == [["fastlower.a", "fastlower.b"]]


# a lazy __init__ as ``base.lazy.lazy_exports`` makes one: the import is by a computed name
LAZY_INIT = ("from importlib import import_module\nfrom typing import TYPE_CHECKING\n"
             "def __getattr__(name):\n    return import_module('.heavy', __name__).f\n"
             "if TYPE_CHECKING:\n    from .heavy import f\n")


@pytest.mark.parametrize("b_text, cycle", [
    ("from .pkg import light\n", False),  # runs pkg/__init__, which imports nothing
    ("from .pkg import f\n", True),  # the name pkg/__init__ exports from pkg.heavy
])
def test_checker_lazy_package_init(tmp_path, b_text, cycle):
    """A lazy ``__init__``'s TYPE_CHECKING re-exports are a dependency of whoever imports
    those names from the package, not of whoever imports a light module of it."""
    root = _package(tmp_path, {
        "__init__.py": "", "b.py": b_text, "pkg/__init__.py": LAZY_INIT,
        "pkg/light.py": "X = 1\n", "pkg/heavy.py": "from .. import b\nf = b\n",
    })
    found = cycles(import_graph(root))
    assert bool(found) == cycle, found


# --- the layers, stated directly -------------------------------------------------------

def test_report_model_is_plain_data():
    """``report.model`` imports nothing of fastlower but the neutral records."""
    graph = import_graph()
    neutral = {"fastlower.base.records", "fastlower.base" + AS_RUN}
    assert {t for t, _, _ in graph["fastlower.report.model"]} <= neutral
    assert {t for t, _, _ in graph["fastlower.base.records"]} <= {"fastlower.base" + AS_RUN}
    assert graph["fastlower.base" + AS_RUN] == []


def test_report_stays_below_the_lowering():
    """No module of ``fastlower.report`` (its ``__init__`` included) reaches the lowering,
    the API, ``patch``, the previews or ExecuTorch's driver, even lazily."""
    graph = import_graph()
    above = {"fastlower.lowering", "fastlower.patch", "fastlower.in_process.dispatch",
             "fastlower.frontends", "fastlower.core.plan"}
    for name, edges in graph.items():
        if name == "fastlower.report" or name.startswith("fastlower.report."):
            # a module of ``above`` or of a package it becomes (``lowering/``)
            reached = [t for t, _, _ in edges
                       if t in above or any(t.startswith(a + ".") for a in above)]
            assert not reached, (name, reached)


def test_partition_key_is_built_once():
    from fastlower.base.records import partition_key
    from fastlower.report.model import PartitionRecord

    assert partition_key("forward", "", "tag0") == "forward/tag0"
    assert partition_key("forward", "true_graph_0", "tag1") == "forward/true_graph_0/tag1"
    record = PartitionRecord(tag="t", backend="b", method="m", graph="g/h")
    assert record.key == partition_key("m", "g/h", "t") == "m/g/h/t"
    # the modules that name partitions (the report, its writers, the cache's miss report)
    # join paths only through records
    naming = [*ROOT.joinpath("report").rglob("*.py"), ROOT / "cache" / "report.py",
              ROOT / "base" / "records.py"]
    text = "".join(p.read_text() for p in naming)
    assert text.count('"/".join(') == 1, "a second '/'.join: a partition key built twice?"
