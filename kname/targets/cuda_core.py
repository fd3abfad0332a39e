"""cuda.core (cuda-python): the module-level `launch(stream, config, kernel, *args)`.

`launch` is a Cython function in `cuda.core._launcher` (`cuda.core.experimental._launcher` before
cuda-core 0.5), re-exported by `cuda.core` and bound by name in modules that did
`from cuda.core import launch`: numba-cuda's dispatcher is one. When `_launcher` is imported,
kname binds one wrapper under that name in `_launcher` and in those modules.

A numba-cuda launch reaches this `launch` from inside numba's own launch, which kname already
names. Where the numba target is in use too, numba's dispatcher keeps (or gets back) cuda.core's
own `launch`, so the inner call costs nothing; that is decided by the chosen targets, not by
which hook runs first. Anywhere else, a wrapped `launch` called beneath another kname launch
finds that launch's wrapper frame before any user frame and emits no range: each kernel sits in
exactly one kname range either way.

The kernel's name comes from the driver (`cuKernelGetName`, CUDA 12.3+), once per kernel object;
cuda-core's Kernel has no name attribute.

CUDA graphs: the replay of a graph, `graph.launch(stream)`, is named after its line where
cuda-core's `Graph` is a Python class (`cuda.core.experimental._graph`, `cuda.core._graph`:
cuda-core before 0.6). In later releases (`cuda.core.graph`) it is a Cython type that refuses
attribute assignment, made only by Cython code (GraphBuilder.complete, GraphDefinition.
instantiate): kname leaves it alone, and a replay has no range of its own there. Either way,
`kname profile` gives each kernel of a replay the line that captured or added it (CUPTI sees the
graph's nodes made, whatever the library).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kname.launch import KernelArg, LaunchSpec
from kname.patching import Change, Rebind, is_wrapper
from kname.targets import Library, Options, Target, wraps

LIB = "cuda.core"
LAUNCHER_MODULES = ("cuda.core._launcher", "cuda.core.experimental._launcher")
# Where cuda-core's Graph was a Python class (its launch is wrapped in place).
GRAPH_MODULES = ("cuda.core.experimental._graph", "cuda.core._graph")
GRAPH_KERNEL_NAME = "cuda graph"  # what a graph launch is counted as, in the census and range
IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a type that refuses attribute assignment
# Modules that bind `launch` by name: the package (re-export) and known importers.
NUMBA_DISPATCHER = "numba.cuda.dispatcher"
REBINDERS = ("cuda.core", "cuda.core.experimental", NUMBA_DISPATCHER)
MAX_NAMES = 4096

_names: dict[Any, str] = {}  # Kernel -> name (Kernel hashes and compares by its handle)
# id(original launch) -> (original, the install's switch, its wrapper)
_wrappers: dict[int, tuple[Any, Any, Any]] = {}


# The Kernel being launched: `launch(stream, config, kernel, *kernel_args)`.
kernel_of = KernelArg(2)


def kernel_name(kernel: Any) -> str:
    """The kernel's name as the driver knows it (mangled for C++), asked once per kernel."""
    try:
        name = _names.get(kernel)
    except TypeError:  # not hashable: not a cuda.core Kernel
        return type(kernel).__name__
    if name is None:
        name = _driver_name(kernel) or "kernel"
        if len(_names) >= MAX_NAMES:
            _names.clear()
        _names[kernel] = name
    return name


def _driver_name(kernel: Any) -> str | None:
    try:
        from cuda.bindings import driver

        error, name = driver.cuKernelGetName(kernel.handle)
        if error == driver.CUresult.CUDA_SUCCESS and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no GPU, an old driver or bindings: name it by its type
        pass
    return None


def _wrapper_for(original: Any, options: Options) -> Any:
    """One wrapper per original `launch` and install(), shared by every module that binds it."""
    entry = _wrappers.get(id(original))
    if entry is None or entry[0] is not original or entry[1] is not options.switch:
        wrapper = options.wrapper(original, LAUNCH)
        entry = (original, options.switch, wrapper)
        _wrappers[id(original)] = entry
    return entry[2]


def bind_wrapper(module: ModuleType, options: Options) -> list[Change]:
    """Bind the wrapped `launch` in cuda.core's launcher and wherever it is bound by name."""
    original = vars(module)["launch"]
    if is_wrapper(original):
        return []  # already ours: the hook fired again
    homes = (module.__name__, *REBINDERS)
    if "numba" in options.chosen:
        # Numba's own launch is named a level up; the inner wrapper would only find that it is
        # nested, at a cost per launch.
        homes = tuple(home for home in homes if home != NUMBA_DISPATCHER)
    return [Rebind(homes, "launch", original, _wrapper_for(original, options))]


def unwrap_in_numba(dispatcher: ModuleType, options: Options) -> list[Change]:
    """Where the numba target names launches, numba's dispatcher calls cuda.core's own launch.

    The dispatcher takes `launch` by name from cuda.core: the wrapper, if cuda.core was wrapped
    first. Without kname it holds the original, so putting that back needs no record.
    """
    bound = vars(dispatcher).get("launch")
    if "numba" in options.chosen and is_wrapper(bound):
        dispatcher.launch = bound.__wrapped__
    return []


LAUNCH = LaunchSpec(LIB, kernel_name, kernel_of)


def graph_name(graph: Any) -> str:
    return GRAPH_KERNEL_NAME


GRAPH_LAUNCH = LaunchSpec(LIB, graph_name, KernelArg(0))  # Graph.launch(self, stream)


def has_python_graph(module: ModuleType) -> bool:
    """Whether `module` has a Graph class whose `launch` can be wrapped in place."""
    graph = getattr(module, "Graph", None)
    return isinstance(graph, type) and not graph.__flags__ & IMMUTABLE_TYPE


LIBRARY = Library(
    name="cuda_core",
    packages=("cuda",),
    distributions=("cuda-core", "cuda-python", "cuda-bindings"),
    targets=(
        *(Target("cuda_core", module, "launch", bind_wrapper) for module in LAUNCHER_MODULES),
        Target("cuda_core", NUMBA_DISPATCHER, "launch", unwrap_in_numba),
        *(
            Target(
                "cuda_core",
                module,
                "Graph.launch",
                wraps("Graph.launch", GRAPH_LAUNCH, has_python_graph),
            )
            for module in GRAPH_MODULES
        ),
    ),
)
