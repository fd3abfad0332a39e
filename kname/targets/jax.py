"""JAX: library code, with the libraries around it; compile-time work; the runs of its executables.

JAX launches nothing from Python: XLA's executables launch their kernels from C++, and
`kname profile` names them from CUPTI's callback, by the Python frames above the launch. So this
unit is first the rule that jax's frames are library code, with jaxlib, its CUDA plugins and the
libraries built on it (flax, optax, equinox, orbax, chex, jaxtyping): a jitted step's kernels
are named after the user's line calling it (`state = step(state, batch)`), never after
`ExecuteReplicated.__call__ jax/_src/interpreters/pxla.py` or `apply_primitive
jax/_src/dispatch.py`. jax makes no Python code of its own at run time that keeps its module
(what it runs with bare globals, from a pseudo-file, is library code by callsite's own rule).

Compile-time work is named apart, marked callsite.COMPILE_MARK: a launch beneath jax's lowering
(`jax._src.interpreters.mlir`) or XLA's compile (`jax._src.compiler`, its persistent cache).
XLA compiles in C++, on the calling thread and on threads of its own, and autotunes there (the
RedzoneAllocator's kernels, host copies): a launch with no Python frame while a compile runs is
named after the line that caused the compile, `(compile)`. That is a scope
(kname.profiling.backward), opened while a profile collects by the wrappers of the compile entry
points below; the first run of an executable (`ExecuteReplicated.__call__`, where XLA builds its
CUDA graphs, command buffers, on its own threads) opens one too, unmarked, and so does an eager
op's dispatch (`jax._src.dispatch.apply_primitive`), whose host operands PJRT copies to the
device from a transfer thread of its own, and an array's host read (`ArrayImpl._value`: its copy
to the host comes from that thread too). The cached call of a jitted function (the C++ fast
path) launches on the calling thread: its frames name it, with no wrapper.

KNAME_USER=jax (or a part, jax._src.interpreters) makes those frames user code again: for
people debugging jax itself.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kname.callsite import COMPILE_MARK
from kname.patching import Change, Patch, is_wrapper
from kname.targets import Library, Options, Target

# jax and jaxlib, jax's CUDA plugins (the PJRT plugin and its kernels, as packages of their own),
# and the libraries around jax whose frames stand between the user's line and a jitted call.
PACKAGES = (
    "jax",
    "jaxlib",
    "jax_plugins",
    "jax_cuda12_plugin",
    "jax_cuda12_pjrt",
    "jax_cuda13_plugin",
    "jax_cuda13_pjrt",
    "flax",
    "optax",
    "equinox",
    "orbax",
    "chex",
    "jaxtyping",
)

# Build-time work: lowering to StableHLO, compiling with XLA (its autotuning inside), reading and
# writing the persistent compilation cache.
COMPILE_MODULES = (
    "jax._src.interpreters.mlir",
    "jax._src.compiler",
    "jax._src.compilation_cache",
)

COMPILER = "jax._src.compiler"
# Its entry points across releases (the newer call the older or replace them): a compile runs
# beneath one of them, on this thread, while XLA works on its own.
COMPILE_ENTRIES = ("compile_or_get_cached", "backend_compile_and_load", "backend_compile")

EXECUTE = "jax._src.interpreters.pxla"
EXECUTE_ENTRY = "ExecuteReplicated.__call__"

# An eager op (jnp on device arrays, outside any jit): its host operands (a Python scalar, a
# numpy array) go to the device in host-to-device copies that PJRT launches on a transfer
# thread of its own while the op's call runs, with no Python frame there.
EAGER = "jax._src.dispatch"
EAGER_ENTRY = "apply_primitive"

# An array's value read on the host (float(loss), np.asarray, print): PJRT copies it to the host
# from its transfer thread while the reading line waits.
ARRAY = "jax._src.array"
ARRAY_VALUE = "ArrayImpl._value"


def xla_scope(entry: Any, mark: str) -> Any:
    """`entry`, naming what XLA launches on its own threads while it runs after the line calling
    it (`mark` after that name) when a profile collects; one module read when none does."""
    from kname.profiling import backward

    return backward.scoped(entry, "naming XLA's work for kname profile", mark)


def compile_changes(module: ModuleType, options: Options) -> list[Change]:
    """Compile scopes, marked (compile), around each compile entry point jax's release has."""
    changes: list[Change] = []
    for name in COMPILE_ENTRIES:
        entry = vars(module).get(name)
        if callable(entry) and not is_wrapper(entry):
            changes.append(Patch(module, name, xla_scope(entry, COMPILE_MARK)))
    return changes


def execute_changes(module: ModuleType, options: Options) -> list[Change]:
    """A scope around an executable's run through Python (a first call, an eager op's)."""
    owner = vars(module).get(EXECUTE_ENTRY.split(".")[0])
    entry = vars(owner).get("__call__") if isinstance(owner, type) else None
    if entry is None or is_wrapper(entry):
        return []
    return [Patch(owner, "__call__", xla_scope(entry, ""))]


def eager_changes(module: ModuleType, options: Options) -> list[Change]:
    """A scope around an eager op's dispatch (before the primitives take it as their impl)."""
    entry = vars(module).get(EAGER_ENTRY)
    if not callable(entry) or is_wrapper(entry):
        return []
    return [Patch(module, EAGER_ENTRY, xla_scope(entry, ""))]


def value_changes(module: ModuleType, options: Options) -> list[Change]:
    """A scope around an array's host read (the `_value` property's getter)."""
    owner = vars(module).get(ARRAY_VALUE.split(".")[0])
    value = vars(owner).get("_value") if isinstance(owner, type) else None
    if not isinstance(value, property) or value.fget is None or is_wrapper(value.fget):
        return []
    scoped = property(xla_scope(value.fget, ""), value.fset, value.fdel, value.__doc__)
    return [Patch(owner, "_value", scoped)]


LIBRARY = Library(
    name="jax",
    packages=PACKAGES,
    distributions=("jax", "jaxlib", "flax", "optax"),
    targets=(
        # Scopes for XLA's frameless launches, which a profile needs: none taken out.
        Target("jax", COMPILER, ", ".join(COMPILE_ENTRIES), compile_changes, False),
        Target("jax", EXECUTE, EXECUTE_ENTRY, execute_changes, False),
        Target("jax", EAGER, EAGER_ENTRY, eager_changes, False),
        Target("jax", ARRAY, ARRAY_VALUE, value_changes, False),
    ),
    compile_modules=COMPILE_MODULES,
)
