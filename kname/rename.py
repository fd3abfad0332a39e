"""KNAME_MODE=rename: each call site launches its own compile of the kernel, whose entry symbol is
the site's identifier (`axpy__mymodel_solver_py_L42`), so every profiler and tool shows it.

The cost is one compile per call site and argument types, paid at the site's first launch.
Renamed: numba-cuda (>= 0.30) kernels, Triton (>= 3.4) `@triton.jit` kernels, and CuPy (>= 13)
ElementwiseKernel and ReductionKernel. Every library internal kname relies on for it is in this
module, one section per library, checked once before first use; where a check fails, kname says
so once and names that library's kernels by NVTX ranges only. Not renamed: CuPy's RawKernel and
RawModule, whose names are the user's own `__global__` symbols (kname leaves the user's source
alone), and everything kname names only by NVTX (pycuda, cuda.core, fused and cupyx.jit kernels).
Nothing here imports a GPU library until a site is renamed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import itertools
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kname._warnings import warn_once
from kname.naming import MAX_IDENTIFIER

# --------------------------------------------------------------------------
# Entry names: one per call site, never shared by two
# --------------------------------------------------------------------------

_lock = threading.Lock()
# entry name -> the (kernel, call-site name) holding it. Never shrinks: a name stays its
# site's for the whole process, and each entry stands for a compile, far costlier than its bytes.
_holders: dict[str, tuple[str, str]] = {}


def entry_name(identifier: str, holder: tuple[str, str], taken: dict | None = None) -> str:
    """`identifier` for `holder` (kernel, call-site name), or a variant no other holder has.

    Two sites can share an identifier: `a/b.py` and `a_b.py` both give `a_b_py`. The first keeps
    it; the next gets a suffix from a digest of its own name, so it is the same in every run.
    """
    taken = _holders if taken is None else taken
    digest = hashlib.sha1("\0".join(holder).encode("utf-8", "backslashreplace")).hexdigest()[:8]
    with _lock:
        for candidate in _candidates(identifier, digest):
            if taken.setdefault(candidate, holder) == holder:
                return candidate
    raise AssertionError("unreachable: the candidates never run out")


def _candidates(identifier: str, digest: str) -> Iterator[str]:
    yield identifier
    for n in itertools.count():
        suffix = f"_{digest}" if n == 0 else f"_{digest}_{n}"
        yield identifier[: MAX_IDENTIFIER - len(suffix)] + suffix


# --------------------------------------------------------------------------
# numba-cuda: a per-site dispatcher that compiles under the site's entry name
# --------------------------------------------------------------------------

MIN_NUMBA_CUDA = (0, 30, 0)  # CUDADispatcher.call(args, launch_config); abi_info since 0.28


def numba_site_launch(dispatcher: Any, site: Any) -> Callable[..., Any] | None:
    """`launch(config, *args)`: `site`'s own renamed copy of `dispatcher`, or None (NVTX only).

    Stands in for `_LaunchConfiguration.__call__(config, *args)`. The copy compiles lazily,
    once per argument types, at the site's first launch with them.
    """
    classes, problem = _numba_support()
    if problem is not None:
        warn_once(
            "rename:numba",
            f"KNAME_MODE=rename: {problem}; numba kernels are named by NVTX ranges only",
        )
        return None
    site_dispatcher, plain_dispatcher = classes
    if type(dispatcher) is not plain_dispatcher:
        warn_once(
            f"rename:numba:{type(dispatcher).__qualname__}",
            f"KNAME_MODE=rename: kernels of type {type(dispatcher).__qualname__} (not numba-cuda's "
            f"CUDADispatcher) are not renamed; they are named by NVTX ranges only",
        )
        return None
    copy = site_dispatcher(dispatcher, entry_name(site.identifier, (site.kernel, site.name)))
    call = copy.call

    def launch_renamed(config, *args):
        return call(args, config)

    launch_renamed.dispatcher = copy  # for inspection: its overloads, stats, entry name
    return launch_renamed


@functools.cache
def _numba_support() -> tuple[tuple[type, type] | None, str | None]:
    """(SiteDispatcher, CUDADispatcher), or why this numba-cuda cannot be renamed."""
    try:
        version = importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        return None, "renaming needs the numba-cuda package (numba's own numba.cuda cannot)"
    if _release(version) < MIN_NUMBA_CUDA:
        minimum = ".".join(map(str, MIN_NUMBA_CUDA))
        return None, f"renaming needs numba-cuda >= {minimum} (this is {version})"
    try:
        return _numba_classes(), None
    except Exception as exc:
        return None, f"numba-cuda {version} is not built as kname expects ({exc})"


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else (0,)


def _numba_classes() -> tuple[type, type]:
    from numba.cuda import dispatcher as numba_dispatcher

    _check_numba_internals(numba_dispatcher)
    plain = numba_dispatcher.CUDADispatcher
    lock = numba_dispatcher.global_compiler_lock

    class SiteCache(numba_dispatcher.CUDACache):
        """numba-cuda's disk cache with the entry name in each entry's key.

        The renamed and the plain kernel share the cache's index file, never an entry.
        """

        def __init__(self, py_func: Any, entry_name: str) -> None:
            super().__init__(py_func)
            self.kname_entry_name = entry_name

        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), ("kname_entry_name", self.kname_entry_name))

    class SiteDispatcher(plain):
        """A call site's copy of a kernel: its function, options and caching, its entry name."""

        def __init__(self, original: Any, entry_name: str) -> None:
            pipeline = original._compiler.pipeline_class
            super().__init__(original.py_func, original.targetoptions, pipeline)
            self.kname_original = original
            self.kname_entry_name = entry_name
            if isinstance(original._cache, numba_dispatcher.CUDACache):
                self.enable_caching()

        def enable_caching(self) -> None:
            self._cache = SiteCache(self.py_func, self.kname_entry_name)

        def compile(self, sig):
            with lock:
                try:
                    with _kernel_entry_name(numba_dispatcher, self.py_func, self.kname_entry_name):
                        kernel = super().compile(sig)
                except Exception as exc:
                    return self._compile_unrenamed(sig, exc)
            if kernel.entry_name != self.kname_entry_name:
                warn_once(
                    "rename:numba:entry",
                    f"KNAME_MODE=rename: numba-cuda compiled {kernel.entry_name!r}, not "
                    f"{self.kname_entry_name!r}; kernels may keep their own names",
                )
            return kernel

        def _compile_unrenamed(self, sig, exc: Exception):
            # The user's own error (a typing error, say) fails the original too, and is raised
            # from there, as without kname. If the original compiles, renaming failed: use it.
            kernel = self.kname_original.compile(sig)
            warn_once(
                "rename:numba:compile",
                f"KNAME_MODE=rename: {self.py_func.__qualname__} could not be compiled as "
                f"{self.kname_entry_name} ({type(exc).__name__}: {exc}); launched under its own "
                f"name",
            )
            argtypes, _ = numba_dispatcher.sigutils.normalize_signature(sig)
            self.add_overload(kernel, argtypes)
            return kernel

        def _get_launch_config_specialization(self, key):
            # numba-cuda makes a plain CUDADispatcher here (for kernels whose code depends on the
            # launch configuration); make it a renamed one, set up as numba-cuda sets up its own.
            variant = self._launch_config_specializations.get(key)
            if variant is None:
                variant = SiteDispatcher(self.kname_original, self.kname_entry_name)
                variant._launch_config_sensitive = True
                variant._launch_config_is_specialized = True
                variant._launch_config_specialization_key = key
                variant._launch_config_default_key = key
                if isinstance(self._cache, numba_dispatcher.CUDACache):
                    variant.enable_caching()
                    variant._configure_cache_for_launch_config(None)
                else:
                    variant._cache = numba_dispatcher.NullCache()
                self._launch_config_specializations[key] = variant
            return variant

        def __reduce__(self):
            # Pickled (numba-cuda pickles dispatchers by function and options) as the original.
            return self.kname_original.__reduce__()

    return SiteDispatcher, plain


def _check_numba_internals(numba_dispatcher: Any) -> None:
    """Raise unless numba-cuda's dispatcher is what SiteDispatcher is written against."""
    if "numba_cuda" not in (numba_dispatcher.__file__ or ""):
        raise RuntimeError("numba.cuda is not numba-cuda's")
    if "abi_info" not in inspect.signature(numba_dispatcher.compile_cuda).parameters:
        raise RuntimeError("compile_cuda() takes no abi_info")
    kernel_init = inspect.unwrap(numba_dispatcher._Kernel.__init__)
    if "compile_cuda" not in kernel_init.__code__.co_names:
        raise RuntimeError("kernels are not compiled through dispatcher.compile_cuda")
    plain = numba_dispatcher.CUDADispatcher
    if list(inspect.signature(plain.call).parameters) != ["self", "args", "launch_config"]:
        raise RuntimeError("CUDADispatcher.call() is not call(args, launch_config)")
    for owner, attribute in [
        (plain, "_get_launch_config_specialization"),
        (plain, "_configure_cache_for_launch_config"),
        (numba_dispatcher.CUDACache, "_index_key"),
        (numba_dispatcher, "global_compiler_lock"),
        (numba_dispatcher, "NullCache"),
    ]:
        if not hasattr(owner, attribute):
            raise RuntimeError(f"{getattr(owner, '__name__', owner)} has no {attribute}")


class _NamedKernelCompile:
    """compile_cuda, except that this thread's next compile of `py_func` gets `entry_name`."""

    def __init__(self, compile_cuda: Callable[..., Any], py_func: Any, entry_name: str) -> None:
        self.compile_cuda = compile_cuda
        self.py_func = py_func
        self.entry_name: str | None = entry_name
        self.thread = threading.get_ident()

    def __call__(self, pyfunc, *args, **kwargs):
        if (
            self.entry_name is not None
            and pyfunc is self.py_func
            and threading.get_ident() == self.thread
            and kwargs.get("abi_info") is None
        ):
            # Once only: device functions the kernel calls come through here too, unrenamed.
            kwargs["abi_info"] = {"abi_name": self.entry_name}
            self.entry_name = None
        return self.compile_cuda(pyfunc, *args, **kwargs)


@contextlib.contextmanager
def _kernel_entry_name(numba_dispatcher: Any, py_func: Any, entry_name: str) -> Iterator[None]:
    """While inside, the kernel this thread compiles for `py_func` has the entry `entry_name`.

    numba-cuda's kernel compile (`_Kernel.__init__`) calls the dispatcher module's compile_cuda
    without abi_info, and `abi_info={"abi_name": ...}` is what makes the entry symbol plain.
    """
    # Under numba-cuda's compiler lock, which every kernel compile takes: no other thread
    # compiles a kernel while the module attribute is swapped. A thread that picks the shim up
    # meanwhile (a device function's compile) is not this thread, and passes straight through.
    with numba_dispatcher.global_compiler_lock:
        original = numba_dispatcher.compile_cuda
        numba_dispatcher.compile_cuda = _NamedKernelCompile(original, py_func, entry_name)
        try:
            yield
        finally:
            numba_dispatcher.compile_cuda = original


# --------------------------------------------------------------------------
# CuPy: ElementwiseKernel and ReductionKernel rebuilt under the site's name
# --------------------------------------------------------------------------

MIN_CUPY = (13, 0, 0)
# Where `name` sits among the constructor's positional parameters (CuPy 13 and 14):
# ElementwiseKernel(in_params, out_params, operation, name, ...),
# ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name, ...)
CUPY_NAME_POSITION = {"ElementwiseKernel": 3, "ReductionKernel": 6}
CUPY_ARGS = "_kname_args"  # the slot of kname's subclass holding the constructor's arguments


def cupy_recording_init(base: type) -> Callable[..., Any]:
    """An `__init__` for kname's subclass of `base` that keeps the constructor's arguments.

    Installed in rename mode only. CuPy's kernel objects parse their parameters on construction
    and keep no way back to the arguments; a site's kernel is rebuilt from these.
    """
    init = base.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        setattr(self, CUPY_ARGS, (args, kwargs))

    __init__.__qualname__ = f"{base.__qualname__}.__init__"
    __init__.__doc__ = init.__doc__
    return __init__


def cupy_site_launch(base: type, kernel: Any, site: Any) -> Callable[..., Any] | None:
    """`launch(kernel, *args, **kwargs)`: CuPy's `base.__call__` on `site`'s own kernel, or None.

    The site's kernel is a `base` (CuPy's own class) built from the same arguments as `kernel`,
    with `name=` the site's entry name. CuPy generates the kernel's source with that name in it
    (`extern "C" __global__ void <name>(...)`) and caches compiles by source, so the site's kernel
    compiles once, on its own, at its first launch with each argument types.
    """
    problem = _cupy_support()
    if problem is not None:
        warn_once(
            "rename:cupy",
            f"KNAME_MODE=rename: {problem}; CuPy kernels are named by NVTX ranges only",
        )
        return None
    recorded = getattr(kernel, CUPY_ARGS, None)
    if recorded is None:
        warn_once(
            f"rename:cupy:unrecorded:{base.__name__}",
            f"KNAME_MODE=rename: a CuPy {base.__name__} made outside rename mode (before "
            f"install(), or unpickled) is not renamed; it is named by NVTX ranges only",
        )
        return None
    name = entry_name(site.identifier, (site.kernel, site.name))
    args, kwargs = recorded
    position = CUPY_NAME_POSITION[base.__name__]
    if len(args) > position:
        args = (*args[:position], name, *args[position + 1 :])
    else:
        kwargs = {**kwargs, "name": name}
    variant = base(*args, **kwargs)
    if variant.name != name:
        raise RuntimeError(f"CuPy's {base.__name__} took the name {variant.name!r}")
    call = base.__call__

    def launch_renamed(_kernel, *args, **kwargs):
        return call(variant, *args, **kwargs)

    launch_renamed.kernel = variant  # for inspection: its name, parameters, compiled code
    return launch_renamed


@functools.cache
def _cupy_support() -> str | None:
    """None, or why this CuPy's kernels cannot be renamed."""
    version = _installed_version("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"))
    if version is not None and _release(version) < MIN_CUPY:
        minimum = ".".join(map(str, MIN_CUPY))
        return f"renaming needs CuPy >= {minimum} (this is {version})"
    return None


def _installed_version(module: str, distributions: tuple[str, ...]) -> str | None:
    """The imported `module`'s __version__, else the first of `distributions` installed."""
    version = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(version, str):
        return version
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


# --------------------------------------------------------------------------
# Triton: a per-site clone of the JITFunction, compiled under the site's name
# --------------------------------------------------------------------------

MIN_TRITON = (3, 4, 0)
# The JITFunction constructor's options, each kept by the constructor under the same name.
TRITON_OPTIONS = (
    "version", "do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline",
    "launch_metadata",
)  # fmt: skip


def triton_site_launch(jit_function: Any, site: Any) -> Callable[..., Any] | None:
    """`launch(jit_function, *args, grid=, warmup=, **kwargs)`: `site`'s clone's run, or None.

    Stands in for `JITFunction.run`. The clone compiles lazily, once per specialisation, at the
    site's first launch with it.
    """
    classes, problem = _triton_support()
    if problem is not None:
        warn_once(
            "rename:triton",
            f"KNAME_MODE=rename: {problem}; Triton kernels are named by NVTX ranges only",
        )
        return None
    site_function, plain_function = classes
    if type(jit_function) is not plain_function:
        kind = type(jit_function).__qualname__
        warn_once(
            f"rename:triton:{kind}",
            f"KNAME_MODE=rename: kernels of type {kind} (not Triton's JITFunction) are not "
            f"renamed; they are named by NVTX ranges only",
        )
        return None
    clone = site_function(jit_function, entry_name(site.identifier, (site.kernel, site.name)))
    run = clone.run

    def launch_renamed(_jit_function, *args, **kwargs):
        return run(*args, **kwargs)

    launch_renamed.jit_function = clone  # for inspection: its caches, entry name
    return launch_renamed


@functools.cache
def _triton_support() -> tuple[tuple[type, type] | None, str | None]:
    """(SiteJITFunction, JITFunction), or why this Triton cannot be renamed."""
    version = _installed_version("triton", ("triton",))
    if version is None:
        return None, "renaming needs the triton package"
    if _release(version) < MIN_TRITON:
        minimum = ".".join(map(str, MIN_TRITON))
        return None, f"renaming needs Triton >= {minimum} (this is {version})"
    try:
        return _triton_classes(), None
    except Exception as exc:
        return None, f"Triton {version} is not built as kname expects ({exc})"


def _triton_classes() -> tuple[type, type]:
    from triton.runtime import jit as triton_jit

    plain = triton_jit.JITFunction
    _check_triton_internals(triton_jit)
    plain_run = inspect.unwrap(vars(plain)["run"])  # Triton's own, never kname's wrapper

    class SiteJITFunction(plain):
        """A call site's clone of a kernel: its function and options, its own entry name.

        Triton names the compiled kernel `repr(...)` (the function's name unless `repr=` was
        given), and keys its compile caches, in memory and on disk, by `cache_key`, which ignores
        the name: the clone mixes its entry name into its key, so it never gets the plain
        kernel's binary, nor the plain kernel its own; every other kernel's key is untouched.
        """

        def __init__(self, original: Any, entry_name: str) -> None:
            options = {option: getattr(original, option) for option in TRITON_OPTIONS}
            super().__init__(original.fn, repr=lambda _specialization: entry_name, **options)
            self._src = original._src  # as the original has it (tools may patch it in)
            self.pre_run_hooks = original.pre_run_hooks  # the same list: hooks added later run
            self.kname_original = original
            self.kname_entry_name = entry_name

        # The site's launches come through kname's wrapper of JITFunction.run already.
        run = plain_run

        @property
        def cache_key(self) -> str:
            key = f"{super().cache_key}\0kname_entry_name={self.kname_entry_name}"
            return hashlib.sha256(key.encode("utf-8")).hexdigest()

        def __repr__(self) -> str:
            return f"SiteJITFunction({self.kname_entry_name}, {self.kname_original!r})"

    return SiteJITFunction, plain


def _check_triton_internals(triton_jit: Any) -> None:
    """Raise unless Triton's JITFunction is what SiteJITFunction is written against."""
    plain = triton_jit.JITFunction
    parameters = inspect.signature(plain.__init__).parameters
    for option in (*TRITON_OPTIONS, "repr"):
        if option not in parameters:
            raise RuntimeError(f"JITFunction() takes no {option}")
    if not isinstance(inspect.getattr_static(plain, "cache_key", None), property):
        raise RuntimeError("JITFunction.cache_key is not a property")
    if "grid" not in inspect.signature(plain.run).parameters:
        raise RuntimeError("JITFunction.run() takes no grid")
    if not callable(getattr(plain, "repr", None)):
        raise RuntimeError("JITFunction has no repr()")
