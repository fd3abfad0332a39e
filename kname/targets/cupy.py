"""CuPy: RawKernel (also from RawModule.get_function), ElementwiseKernel, ReductionKernel,
cupyx.jit.rawkernel and cupy.fuse.

CuPy's kernel classes are Cython types that refuse attribute assignment, so their `__call__`
cannot be wrapped in place. When the module that defines one is imported, kname binds a Python
subclass whose `__call__` names the launch under the class's name in that module, and in the
modules that re-export it (`cupy._core`, `cupy`). A post-import hook fires when the defining
module has run, before `cupy._core/__init__` and `cupy/__init__` read the name with
`from ... import`, so `cupy.RawKernel(...)` builds a named kernel. RawModule gets a subclass
too, whose `get_function` returns a kernel of the named RawKernel subclass. `Fusion` (behind
`cupy.fuse`) and cupyx.jit's `_JitRawKernel` are plain Python classes, wrapped in place.

CuPy routines whose kernels are these classes made in Python modules imported after install()
are named too (the fill kernel of `cupy.ones`, say), after the user line that called them.
Not named: built-in ufuncs and routines that launch from Cython or C (`x + y`, `cupy.sin(x)`,
`x.sum()`, cuBLAS, cuFFT and friends): there is no Python call for kname to wrap. Kernel objects
created before install() keep CuPy's class and stay unnamed (`isinstance(k, cupy.RawKernel)`
still holds for them); kernels created meanwhile stay instances of the subclass after
uninstall(), which then launches exactly as CuPy's own. The kernel's name is its `name` (the
mangled name for a RawModule template instance).

KNAME_MODE=rename (see kname.rename): an ElementwiseKernel or ReductionKernel launched from a new
call site is rebuilt from its constructor's arguments with `name=` the site's entry name, and the
site launches that kernel, compiled under its own name, from then on. In rename mode only, the
subclasses' `__init__` keeps those arguments (kernels made before install() are not renamed).
RawKernel and RawModule are not renamed: their names are the user's own `__global__` symbols, in
the user's source, which kname leaves alone; they are named by NVTX ranges only.
"""

from __future__ import annotations

import copyreg
import functools
import operator
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname import launch, rename
from kname.launch import make_launch_wrapper
from kname.targets import Target

LIB = "cupy"
# Modules that re-export the kernel classes under the same names (cupy/__init__ takes
# ReductionKernel straight from cupy._core._reduction, the others from cupy._core).
REEXPORTS = ("cupy._core", "cupy")

_first = operator.itemgetter(0)  # a kernel's __call__ args -> the kernel itself
_subclasses: dict[type, type] = {}  # CuPy class -> its kname subclass, made once per process
# Classes whose kernels rename mode rebuilds under a call site's name: their subclasses have a
# slot for the constructor's arguments.
RENAMED = ("ElementwiseKernel", "ReductionKernel")


def kernel_name(kernel: Any) -> str:
    return kernel.name


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
        # leaves it out): an unpickled kernel is named by NVTX only in rename mode.
        "__slots__": (rename.CUPY_ARGS,) if base.__name__ in RENAMED else (),
        "__reduce_ex__": __reduce_ex__,
        "_kname_wrapper": True,
    }
    cls = _SubclassMeta(base.__name__, (base,), namespace)
    _subclasses[base] = cls
    return cls


def named_call(base: type) -> Callable[..., Any]:
    """A `__call__` for the subclass of `base`: CuPy's own, inside the launch's range."""
    return make_launch_wrapper(base.__call__, LIB, kernel_name, _first)


def replace_class(
    module: ModuleType, name: str, methods: Callable[[type], dict[str, Any]]
) -> list[Callable[[], None]]:
    """Bind kname's subclass of `module.<name>` in `module` and its re-exports; return the undo.

    `methods(base)` gives the methods the subclass adds; undo takes them away again, so kernels
    made meanwhile launch as CuPy's own afterwards.
    """
    base = vars(module)[name]
    if base in _subclasses.values():
        return []  # already ours: the hook fired again
    cls = subclass_of(base)
    added = methods(base)
    for attribute, value in added.items():
        setattr(cls, attribute, value)
    homes = (module.__name__, *REEXPORTS)
    for home in homes:  # re-exports already imported (install() after `import cupy`)
        bound = sys.modules.get(home)
        if bound is not None and vars(bound).get(name) is base:
            setattr(bound, name, cls)

    def undo() -> None:
        for home in homes:
            bound = sys.modules.get(home)
            if bound is not None and vars(bound).get(name) is cls:
                setattr(bound, name, base)
        for attribute in added:
            if attribute in vars(cls):
                delattr(cls, attribute)

    return [undo]


def _raw_module_methods(base: type) -> dict[str, Any]:
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
    return {"get_function": named_get_function}


def _call_methods(base: type) -> dict[str, Any]:
    return {"__call__": named_call(base)}


def _renamed_call_methods(base: type) -> dict[str, Any]:
    """ElementwiseKernel, ReductionKernel: as _call_methods, and in rename mode per-site kernels."""
    if not launch._renaming():
        return _call_methods(base)
    site_launch = functools.partial(rename.cupy_site_launch, base)
    named = make_launch_wrapper(base.__call__, LIB, kernel_name, _first, site_launch)
    return {"__call__": named, "__init__": rename.cupy_recording_init(base)}


def install_class(
    name: str, methods: Callable[[type], dict[str, Any]] = _call_methods
) -> Callable[[ModuleType], list[Callable[[], None]]]:
    """The install function that replaces the class `name` of the hooked module."""

    def install(module: ModuleType) -> list[Callable[[], None]]:
        return replace_class(module, name, methods)

    install.__qualname__ = f"install_class.<{name}>"
    return install


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


TARGETS = (
    Target(
        name="cupy",
        module="cupy._core.raw",
        qualname="RawKernel.__call__",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=_first,
        install=install_class("RawKernel"),
    ),
    Target(
        name="cupy",
        module="cupy._core.raw",
        qualname="RawModule.get_function",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=_first,
        install=install_class("RawModule", _raw_module_methods),
    ),
    Target(
        name="cupy",
        module="cupy._core._kernel",
        qualname="ElementwiseKernel.__call__",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=_first,
        install=install_class("ElementwiseKernel", _renamed_call_methods),
    ),
    Target(
        name="cupy",
        module="cupy._core._reduction",
        qualname="ReductionKernel.__call__",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=_first,
        install=install_class("ReductionKernel", _renamed_call_methods),
    ),
    Target(
        name="cupy",
        module="cupy._core.fusion",
        qualname="Fusion.__call__",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=fusion_kernel_of,
    ),
    Target(
        name="cupy",
        module="cupyx.jit._interface",
        qualname="_JitRawKernel.__call__",
        lib=LIB,
        kernel_name=jit_kernel_name,
        kernel_of=_first,
    ),
)
