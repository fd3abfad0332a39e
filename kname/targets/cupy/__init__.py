"""CuPy: RawKernel (also from RawModule.get_function), ElementwiseKernel, ReductionKernel,
cupyx.jit.rawkernel and cupy.fuse; and the replay of a CUDA graph, `graph.launch()` (graph.py,
beside this file).

CuPy's kernel classes are Cython types that refuse attribute assignment, so their `__call__`
cannot be wrapped in place. kname makes, once per process, a Python subclass of each, with the
same name and module, and binds it under the class's name in the defining module and in the
modules that re-export it (`cupy._core`, `cupy`). A post-import hook fires when the defining
module has run, before `cupy._core/__init__` and `cupy/__init__` read the name with
`from ... import`, so `cupy.RawKernel(...)` builds a named kernel. install() adds the named
`__call__` to the subclass; disable() and uninstall() take it away again and bind CuPy's classes
back, so kernels made meanwhile launch exactly as CuPy's own. RawModule's subclass gets a
`get_function` that returns a kernel of the named RawKernel subclass. `Fusion` (behind
`cupy.fuse`) and cupyx.jit's `_JitRawKernel` are plain Python classes, wrapped in place.

With the C hot path, the subclasses' `__call__` goes straight to CuPy's C slot (BaseCall), and
kname gives them a C `__call__` slot of their own: both are in _native_cupy.c, beside this file,
built into kname._native (LIBRARY.c_sources names it).

CuPy routines whose kernels are these classes made in Python modules imported after install()
are named too (the fill kernel of `cupy.ones`, say), after the user line that called them.
Not named: built-in ufuncs and routines that launch from Cython or C (`x + y`, `cupy.sin(x)`,
`x.sum()`, cuBLAS, cuFFT and friends): there is no Python call for kname to wrap. Kernel objects
created before install() keep CuPy's class and stay unnamed (`isinstance(k, cupy.RawKernel)`
still holds for them). The kernel's name is its `name` (the mangled name for a RawModule
template instance).

KNAME_MODE=rename (see kname.targets.cupy.rename): an ElementwiseKernel or ReductionKernel
launched from a new call site is rebuilt from its constructor's arguments with `name=` the
site's entry name, and the site launches that kernel, compiled under its own name, from then on.
In rename mode only, the subclasses' `__init__` keeps those arguments (kernels made before
install() are not renamed).
"""

from __future__ import annotations

import copyreg
import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname.launch import KernelArg, LaunchSpec
from kname.patching import WRAPPER_MARK, Change, Patch, Rebind, mark_wrapper
from kname.targets import Library, Options, Target, wraps
from kname.targets.cupy import graph, rename

LIB = "cupy"
# Modules that re-export the kernel classes under the same names (cupy/__init__ takes
# ReductionKernel straight from cupy._core._reduction, the others from cupy._core).
REEXPORTS = ("cupy._core", "cupy")
# The replaced classes, by defining module.
CLASSES = {
    "cupy._core.raw": ("RawKernel", "RawModule"),
    "cupy._core._kernel": ("ElementwiseKernel",),
    "cupy._core._reduction": ("ReductionKernel",),
}
# Classes whose kernels rename mode rebuilds under a call site's name: their subclasses have a
# slot for the constructor's arguments.
RENAMED = ("ElementwiseKernel", "ReductionKernel")

_first = KernelArg(0)  # a kernel's __call__ args -> the kernel itself
_subclasses: dict[type, type] = {}  # CuPy class -> its kname subclass, made once per process


def kernel_name(kernel: Any) -> str:
    return kernel.name


LAUNCH = LaunchSpec(LIB, kernel_name, _first)


class _SubclassMeta(type):
    """isinstance/issubclass against kname's subclass answer as against CuPy's class.

    Kernels CuPy makes in Cython, or made before install(), still pass
    `isinstance(k, cupy.RawKernel)`.
    """

    def __instancecheck__(cls, instance):
        return isinstance(instance, cls.__mro__[1])

    def __subclasscheck__(cls, subclass):
        return issubclass(subclass, cls.__mro__[1])


def subclass_of(base: type) -> type:
    """kname's subclass of `base`: the same name, module and behaviour; installs add methods."""
    cls = _subclasses.get(base)
    if cls is not None:
        return cls

    def __reduce_ex__(self, protocol):
        # Pickles name the class as CuPy's (same module and name). After uninstall() that name
        # is CuPy's own class again, and pickle wants the instance's class under it: rebuild
        # through CuPy's class instead, so the pickle still loads with or without kname.
        reduced = base.__reduce_ex__(self, protocol)
        if isinstance(reduced, tuple) and reduced[0] is copyreg.__newobj__:
            public = getattr(sys.modules.get(base.__module__), base.__name__, base)
            if public is not cls and reduced[1][:1] == (cls,):
                reduced = (public.__new__, (public, *reduced[1][1:]), *reduced[2:])
        return reduced

    namespace = {
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        # No __dict__: attribute errors stay as CuPy's. Not pickled (CuPy's own pickling state
        # leaves it out): an unpickled kernel is named by NVTX only in rename mode. Weakly
        # referable, so kname's call-site cache does not keep the kernel alive.
        "__slots__": ((rename.CUPY_ARGS,) if base.__name__ in RENAMED else ()) + ("__weakref__",),
        "__reduce_ex__": __reduce_ex__,
        WRAPPER_MARK: True,
    }
    cls = _SubclassMeta(base.__name__, (base,), namespace)
    _subclasses[base] = cls
    return cls


class CallPatch(Patch):
    """The subclass's `__call__`, set as any Patch; then its instances are called through the hot
    path's slot (`use_direct_call`: in C, kname's slot; CPython's own slot for a class-level
    `__call__` copies the arguments twice before CuPy's slot gets them). Restoring deletes
    `__call__`, which gives the class CPython's slot back by itself."""

    __slots__ = ("use_direct_call",)

    def __init__(self, owner: type, call: Any, use_direct_call: Callable[[type], None]) -> None:
        super().__init__(owner, "__call__", call)
        self.use_direct_call = use_direct_call

    def apply(self) -> None:
        super().apply()
        if vars(self.owner).get(self.attribute) is self.replacement:  # ours, not another's
            self.use_direct_call(self.owner)


def methods_for(base: type, options: Options) -> dict[str, Any]:
    """The methods kname's subclass of `base` gets for one install()."""
    if base.__name__ == "RawModule":
        return {"get_function": _named_get_function(base)}
    if base.__name__ in RENAMED and options.renaming:
        site_launch = functools.partial(rename.cupy_site_launch, base)
        spec = LaunchSpec(LIB, kernel_name, _first, rename=site_launch)
        return {
            "__call__": _named_call(base, spec, options),
            "__init__": rename.cupy_recording_init(base),
        }
    return {"__call__": _named_call(base, LAUNCH, options)}


def _named_call(base: type, spec: LaunchSpec, options: Options) -> Callable[..., Any]:
    """The subclass's `__call__`: CuPy's own, in kname's launch wrapper. With the C hot path the
    wrapper calls CuPy's C slot straight (BaseCall), not through the slot wrapper `base.__call__`
    (its Python twin), which copies the arguments into a second tuple."""
    original = options.hot_path.base_call(base)
    return mark_wrapper(options.wrapper(original, spec), base.__call__)


def _named_get_function(base: type) -> Callable[..., Any]:
    get_function = base.get_function

    def named_get_function(self, name):
        kernel = get_function(self, name)
        named = sys.modules[base.__module__].RawKernel
        if type(kernel) is named or named not in _subclasses.values():
            return kernel
        # Rebuild the kernel as the named subclass through CuPy's own pickling state; its
        # module is cached per device, so `.kernel` (as get_function does) loads no code.
        copy = named.__new__(named)
        copy.__setstate__(kernel.__getstate__())
        copy.kernel  # noqa: B018 - registers the function, as CuPy's get_function does
        return copy

    named_get_function.__name__ = "get_function"
    named_get_function.__qualname__ = f"{base.__qualname__}.get_function"
    named_get_function.__doc__ = get_function.__doc__
    return named_get_function


def replace_classes(module: ModuleType, options: Options) -> list[Change]:
    """The subclasses' methods, and the subclasses bound in place of CuPy's classes in `module`
    and its re-exports."""
    changes: list[Change] = []
    for name in CLASSES[module.__name__]:
        base = vars(module)[name]
        if base in _subclasses.values():
            continue  # the name holds kname's subclass already: the hook fired again
        cls = subclass_of(base)
        for attribute, method in methods_for(base, options).items():
            if attribute == "__call__":
                changes.append(CallPatch(cls, method, options.hot_path.use_direct_call))
            else:
                changes.append(Patch(cls, attribute, method))
        changes.append(Rebind((module.__name__, *REEXPORTS), name, base, cls))
    return changes


_ndarray: type | None = None


def fusion_kernel_of(args: tuple) -> Any:
    """The Fusion being called, or None when no argument is a cupy.ndarray (it runs on the CPU)."""
    global _ndarray
    if _ndarray is None:
        _ndarray = sys.modules["cupy._core.core"].ndarray
    for arg in args:
        if isinstance(arg, _ndarray):
            return args[0]
    return None


def jit_kernel_name(kernel: Any) -> str:
    return kernel._func.__name__


LIBRARY = Library(
    name="cupy",
    packages=("cupy", "cupyx", "cupy_backends"),
    distributions=("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
    renaming="ElementwiseKernel and ReductionKernel renamed per call site (CuPy >= 13)",
    c_sources=("_native_cupy.c",),
    targets=(
        *(
            Target("cupy", module, ", ".join(names), replace_classes)
            for module, names in CLASSES.items()
        ),
        Target(
            "cupy",
            "cupy._core.fusion",
            "Fusion.__call__",
            wraps("Fusion.__call__", LaunchSpec(LIB, kernel_name, fusion_kernel_of)),
        ),
        Target(
            "cupy",
            "cupyx.jit._interface",
            "_JitRawKernel.__call__",
            wraps("_JitRawKernel.__call__", LaunchSpec(LIB, jit_kernel_name, _first)),
        ),
        Target("cupy", "cupy.cuda.stream", "Stream.end_capture (Graph.launch)", graph.name_graphs),
    ),
)
