"""The package layering of src/tunempi, read from the source with `ast` (lazy imports inside functions count).

docs/architecture.md gives each package its room; an import cycle between packages means two rooms share a
concern. Writers are pure syntax: they know no library, launcher or tuning run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tunempi"
ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"


def _package(module: str) -> str:
    """'tunempi.mpi.mpich' -> 'mpi'; top-level modules ('tunempi.units') are their own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _module_of(path: Path) -> str:
    relative = path.relative_to(SRC.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_by_package() -> dict[str, set[str]]:
    """package -> the other tunempi packages its modules import."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = _module_of(path)
        if module == "tunempi":
            continue
        package = _package(module)
        graph.setdefault(package, set())
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module
                    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                    targets = [".".join([*base, node.module] if node.module else base)]
                elif node.module == "tunempi":  # `from tunempi import evidence` imports tunempi.evidence
                    targets = [f"tunempi.{alias.name}" for alias in node.names]
                elif node.module:
                    targets = [node.module]
            for target in targets:
                if target.startswith("tunempi.") and _package(target) != package:
                    graph[package].add(_package(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_the_source() -> None:
    graph = imports_by_package()
    assert {"mpi", "writers", "tune", "cli", "rules"} <= set(graph)
    assert "mpi" in graph["tune"] and "tune" in graph["cli"]  # imports that must be seen, or the test is blind


def test_no_import_cycle_between_packages() -> None:
    assert cycles(imports_by_package()) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_writers_are_pure_syntax() -> None:
    assert imports_by_package()["writers"] & {"mpi", "launch", "tune", "bench", "store"} == set()


def documented_layers() -> dict[str, int]:
    """package -> its layer, from the numbered list under '## Layers' in docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for number, names in re.findall(r"^(\d+)\. (.+)$", section, flags=re.M):
        for name in names.split(","):
            layers[name.strip().strip("`").rstrip("/")] = int(number)
    return layers


def test_every_package_has_a_documented_layer() -> None:
    assert set(imports_by_package()) == set(documented_layers())


def test_no_package_imports_from_its_own_layer_or_above() -> None:
    layers = documented_layers()
    upward = sorted(f"{package} (layer {layers[package]}) imports {other} (layer {layers[other]})"
                    for package, others in imports_by_package().items() for other in others
                    if layers[other] >= layers[package])
    assert upward == []


def test_the_graph_sees_from_tunempi_import_module() -> None:
    assert "evidence" in imports_by_package()["search"]
