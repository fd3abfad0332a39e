"""KNAME_MODE=rename for numba-cuda: a per-site dispatcher compiling under the site's entry name.

Every numba-cuda internal this relies on is checked once, before first use.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kname._warnings import warn_once
from kname.rename import entry_name
from kname.targets import installed_version, release

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
    version = installed_version("numba_cuda", ("numba-cuda",))
    if version is None:
        return None, "renaming needs the numba-cuda package (numba's own numba.cuda cannot)"
    if release(version) < MIN_NUMBA_CUDA:
        minimum = ".".join(map(str, MIN_NUMBA_CUDA))
        return None, f"renaming needs numba-cuda >= {minimum} (this is {version})"
    try:
        return _numba_classes(), None
    except Exception as exc:
        return None, f"numba-cuda {version} is not built as kname expects ({exc})"


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
    import inspect  # deferred: 3 ms of every KNAME=1 start-up (with ast, dis, tokenize)

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
