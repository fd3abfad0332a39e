"""The package's layers (docs/architecture.md): imports only go down, and there is no cycle.

Read from the source with ast, deferred imports inside functions included, so an arrow hidden in
a function body counts too. The C likewise: each extension's files call and read one another
without a circle (read from the compiled objects' symbols), every C file is in a folder, and none
is over 700 lines.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest
from support import REPO, kname_setup

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
        "kname.site_faults",
        "kname.site_cache",
        "kname.kernel_refs",
        "kname.walk",
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
        "kname.build_cache",
    },
]
HOT_PATH = {
    "kname.launch",
    "kname.callsite",
    "kname.site_faults",
    "kname.site_cache",
    "kname.kernel_refs",
    "kname.walk",
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


def first_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `edges` (a path that comes back to its start), or None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for reached in sorted(edges.get(node, ())):
            if reached == node or reached not in edges:
                continue
            if state.get(reached) == 1:
                return [*path[path.index(reached) :], reached]
            if reached not in state and (cycle := visit(reached, [*path, reached])):
                return cycle
        state[node] = 2
        return None

    for node in edges:
        if node not in state and (cycle := visit(node, [node])):
            return cycle
    return None


def test_there_is_no_import_cycle() -> None:
    cycle = first_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# --------------------------------------------------------------------------
# The C
# --------------------------------------------------------------------------

COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
MAX_C_LINES = 700


def test_the_package_root_holds_python_modules_and_folders_only() -> None:
    """C lives in the folder of its extension (the .pyi stubs type the extension modules, so they
    sit beside them; py.typed marks the package as typed)."""
    loose = [
        path.name
        for path in PACKAGE.iterdir()
        if path.is_file()
        and path.suffix not in (".py", ".pyi", ".so", ".pyd")
        and path.name != "py.typed"
    ]
    assert loose == []


def test_no_c_file_is_over_700_lines() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in sorted([*PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")])
        if (lines := len(path.read_text().splitlines())) > MAX_C_LINES
    }
    assert long == {}


def symbols(obj: Path, *which: str) -> set[str]:
    done = subprocess.run(["nm", *which, str(obj)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in done.stdout.splitlines() if line.strip()}


def c_arrows(sources: list[Path], flags: list[str], out: Path) -> dict[str, set[str]]:
    """Which of `sources` each one calls or reads (a symbol another defines), by their
    compiled objects."""
    defined, needed = {}, {}
    for source in sources:
        name = str(source.relative_to(PACKAGE))
        obj = out / (name.replace("/", "_") + ".o")
        command = [COMPILER, "-c", "-O2", "-fPIC", *flags, str(source), "-o", str(obj)]
        subprocess.run(command, capture_output=True, text=True, check=True)
        defined[name] = symbols(obj, "--defined-only", "--extern-only")
        needed[name] = symbols(obj, "--undefined-only")
    return {
        name: {other for other in defined if other != name and needed[name] & defined[other]}
        for name in defined
    }


@functools.cache  # compiled once for the tests below
def extension_arrows(extension: str) -> dict[str, set[str]]:
    """c_arrows of an extension's files, built as setup.py builds them (without NVTX's headers)."""
    (ext,) = [ext for ext in kname_setup().extensions(None) if ext.name == extension]
    flags = [
        f"-I{sysconfig.get_paths()['include']}",
        *(f"-I{REPO / folder}" for folder in ext.include_dirs),
        *(f"-D{name}={value}" for name, value in ext.define_macros),
    ]
    with tempfile.TemporaryDirectory() as out:
        return c_arrows([REPO / source for source in ext.sources], flags, Path(out))


needs_cc_and_nm = pytest.mark.skipif(
    COMPILER is None or shutil.which("nm") is None, reason="no cc or nm here"
)


@needs_cc_and_nm
@pytest.mark.parametrize("extension", [ext.name for ext in kname_setup().extensions(None)])
def test_no_circle_among_an_extensions_c_files(extension: str) -> None:
    """What one C file calls or reads of another makes an arrow; the arrows of each extension
    make no circle (a file that registers its own methods and types needs no table above it
    pointing down into it and back)."""
    cycle = first_cycle(extension_arrows(extension))
    assert cycle is None, "C files calling in a circle: " + " -> ".join(cycle or [])


@needs_cc_and_nm
def test_the_hot_paths_own_c_calls_no_library_units_c() -> None:
    """A library unit's C (targets/<lib>/) registers itself with kname._native; none of the
    extension's own files calls or reads anything of a unit's."""
    arrows = extension_arrows("kname._native")
    upward = {
        name: sorted(reached for reached in arrows[name] if reached.startswith("targets/"))
        for name in arrows
        if not name.startswith("targets/")
    }
    assert {name: up for name, up in upward.items() if up} == {}
