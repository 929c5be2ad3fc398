"""The structure of python/roughnet and of the crates, read from their own imports (docs/architecture.md, "Layers").

Every ``import`` of a roughnet module counts, at the top of a file or inside a function (a lazy import is
still an arrow); only those under ``if TYPE_CHECKING:`` do not (they never run).  Checked: no import circle,
no arrow from a lower layer to a backend, the local cluster or the CLI (a backend brings its link engines and
its ledger cleaners by registering them: links.base.register_engine, a ledger entry's ``cleaner``), and the
CLI imported by nothing outside it; and no file over 1000 lines.  In the crates: no circle of modules
(``crate::...`` and ``super::`` paths), no Rust file over 1000 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "roughnet"

#: Layers that must not know the backends, the local cluster or the CLI.
LOWER = ("roughnet.errors", "roughnet.units", "roughnet.runspec", "roughnet.spec", "roughnet.topo", "roughnet.links",
         "roughnet.services", "roughnet.results", "roughnet.capture")
UPPER = ("roughnet.backends", "roughnet.cluster", "roughnet.cli")


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["roughnet", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _under_type_checking(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def import_graph() -> dict[str, set[str]]:
    """module -> the roughnet modules it imports (``from x import name`` counts as x.name when that is a module)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _under_type_checking(tree)
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    deps.add(f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_checker_finds_a_circle_and_an_upward_arrow() -> None:
    """The checks below on a made-up graph: a circle of three, and a lower layer importing a backend."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "roughnet.links.x": {"roughnet.backends.y"},
         "roughnet.backends.y": set()}
    assert circles(g) == [["a", "b", "c"]]
    assert _in("roughnet.links.x", LOWER) and _in("roughnet.backends.y", UPPER)


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones() -> None:
    g = import_graph()
    assert "roughnet.links.kernel" in g["roughnet.links.engines"]  # imported inside engine_for
    assert "roughnet.topo.build" not in g["roughnet.links.base"]  # under `if TYPE_CHECKING:` only
    assert len(g) > 100


def test_no_import_circle() -> None:
    found = circles(import_graph())
    assert found == [], "import circles (each a set of modules that reach each other):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_lower_layer_imports_a_backend_the_cluster_or_the_cli() -> None:
    g = import_graph()
    upward = sorted(f"{m} -> {d}" for m, deps in g.items() if _in(m, LOWER) for d in deps if _in(d, UPPER))
    assert upward == [], "lower layers importing backends, the cluster or the CLI:\n" + "\n".join(upward)


def test_only_the_cli_imports_the_cli() -> None:
    g = import_graph()
    outside = sorted(f"{m} -> {d}" for m, deps in g.items() if not _in(m, ("roughnet.cli",))
                     for d in deps if _in(d, ("roughnet.cli",)))
    assert outside == [], "\n".join(outside)


#: Longest source file (lines): a longer one is two things in one file.
MAX_LINES = 1000


def test_no_python_file_over_1000_lines() -> None:
    long = sorted(f"{p.relative_to(PACKAGE.parent)}: {n}" for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert long == [], "split these:\n" + "\n".join(long)


# ---- the crates ----------------------------------------------------------------------------------------------

CRATES = Path(__file__).resolve().parents[2] / "crates"


def rust_graph(src: Path) -> dict[str, set[str]]:
    """A crate's modules (``host``, ``drivers::mqtt::client``) -> the modules it names (``crate::a::b``,
    ``use crate::{a, b}``, ``super::sibling``).  A module naming its own ancestors or descendants is its
    own tree, not an arrow between modules; comments do not count."""
    mods: dict[tuple[str, ...], list[Path]] = {}
    for path in src.rglob("*.rs"):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts and parts not in (("lib",), ("main",)):
            mods.setdefault(parts, []).append(path)

    def related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
        return a[: len(b)] == b or b[: len(a)] == a

    graph: dict[str, set[str]] = {"::".join(m): set() for m in mods}
    for m, paths in mods.items():
        for path in paths:
            text = re.sub(r"//.*", "", path.read_text())
            named = [tuple(r.split("::")) for r in re.findall(r"crate::((?:\w+::)*\w+)", text)]
            for inner in re.findall(r"use crate::\{([^}]*)\}", text):
                named += [(n,) for n in re.findall(r"\b(\w+)\b", inner)]
            named += [m[:-1] + (r,) for r in re.findall(r"\bsuper::(\w+)", text) if len(m) > 1]
            for ref in named:
                target = next((ref[:k] for k in range(len(ref), 0, -1) if ref[:k] in mods), None)
                if target is not None and not related(m, target):
                    graph["::".join(m)].add("::".join(target))
    return graph


def test_the_rust_reader_sees_a_crates_arrows() -> None:
    g = rust_graph(CRATES / "agent" / "src")
    assert "drivers::brokered" in g["drivers::mqtt"]  # use super::brokered::{...}
    assert "host::udp_group" in g and "host" not in g["host::udp_group"]  # its parent: the same tree


def test_no_module_circle_in_the_crates() -> None:
    found = {c.name: circles(rust_graph(c / "src")) for c in sorted(CRATES.iterdir()) if (c / "src").is_dir()}
    assert all(not v for v in found.values()), {k: v for k, v in found.items() if v}


def test_no_rust_file_over_1000_lines() -> None:
    long = sorted(f"{p.relative_to(CRATES.parent)}: {n}" for p in CRATES.rglob("*.rs")
                  if "target" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert long == [], "split these:\n" + "\n".join(long)
