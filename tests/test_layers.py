"""The package's layers (docs/architecture.md): imports only go down, and there is no cycle.

Read from the source with ast, deferred imports inside functions included, so an arrow hidden in
a function body counts too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from support import REPO

PACKAGE = REPO / "kname"

# Highest first; a module may import from its own layer's modules and any layer below.
LAYERS = [
    {"kname.cli", "kname.doctor", "kname.__main__", "kname.pytest_plugin", "kname.show_ranges"},
    {"kname._startup", "kname._bootstrap"},
    {"kname", "kname.lifecycle", "kname.ipython"},
    {"kname.targets"},  # and every kname.targets.* unit
    {"kname.profiling", "kname.driver_hook"},  # and every kname.profiling.* module
    {
        "kname.importhooks",
        "kname.census",
        "kname.rename",
        "kname.stretch",
        "kname.census_view",
    },
    {"kname.documents"},  # and every kname.documents.* module: saved censuses and profiles
    {"kname.launch"},
    {
        "kname.callsite",
        "kname.counters",
        "kname.naming",
        "kname.paths",
        "kname.ranges",
        "kname.cells",
    },
    {"kname.hotpath", "kname.pyhotpath"},
    {
        "kname.config",
        "kname.faults",
        "kname.patching",
        "kname._locks",
        "kname._sigterm",
        "kname._warnings",
        "kname._version",
        "kname._watched",
        "kname.ranks",
        "kname.rank_paths",
        "kname.importable",
    },
]
HOT_PATH = {
    "kname.launch",
    "kname.callsite",
    "kname.counters",
    "kname.naming",
    "kname.paths",
    "kname.ranges",
    "kname.cells",
    "kname.hotpath",
    "kname.pyhotpath",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kname_imports(path: Path) -> set[str]:
    """Every kname module `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "kname")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "kname":
                continue
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                submodule = PACKAGE.parent / (candidate.replace(".", "/"))
                is_module = submodule.with_suffix(".py").exists() or submodule.is_dir()
                found.add(candidate if is_module else node.module)
    return found


@functools.cache  # parsed once for all the tests below
def graph() -> dict[str, set[str]]:
    return {module_name(p): kname_imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    for index, layer in enumerate(LAYERS):
        if module in layer or any(module.startswith(m + ".") for m in layer if m != "kname"):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


@pytest.mark.parametrize("module", sorted(graph()))
def test_each_module_imports_only_its_layer_or_below(module: str) -> None:
    upward = [i for i in graph()[module] if layer_of(i) < layer_of(module)]
    assert upward == [], f"{module} imports up: {upward}"


def test_the_hot_path_imports_nothing_of_the_lifecycle_or_the_units() -> None:
    edges = graph()
    for module in HOT_PATH:
        above = {i for i in edges[module] if i not in HOT_PATH and layer_of(i) <= layer_of(module)}
        assert not above, f"{module} imports {above}"


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(edges.get(module, ())):
            if imported == module or imported not in edges:
                continue
            if state.get(imported) == 1:
                cycle = [*path[path.index(imported) :], imported]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in edges:
        if module not in state:
            visit(module, [module])
