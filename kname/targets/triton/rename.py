"""KNAME_MODE=rename for Triton: a per-site clone of the JITFunction, compiled under its name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kname._warnings import warn_once
from kname.rename import entry_name
from kname.targets import installed_version, release

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
    version = installed_version("triton", ("triton",))
    if version is None:
        return None, "renaming needs the triton package"
    if release(version) < MIN_TRITON:
        minimum = ".".join(map(str, MIN_TRITON))
        return None, f"renaming needs Triton >= {minimum} (this is {version})"
    try:
        return _triton_classes(), None
    except Exception as exc:
        return None, f"Triton {version} is not built as kname expects ({exc})"


def _triton_classes() -> tuple[type, type]:
    import inspect  # deferred: 3 ms of every KNAME=1 start-up (with ast, dis, tokenize)

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
            import hashlib  # deferred: rename mode only, not every KNAME=1 start-up

            key = f"{super().cache_key}\0kname_entry_name={self.kname_entry_name}"
            return hashlib.sha256(key.encode("utf-8")).hexdigest()

        def __repr__(self) -> str:
            return f"SiteJITFunction({self.kname_entry_name}, {self.kname_original!r})"

    return SiteJITFunction, plain


def _check_triton_internals(triton_jit: Any) -> None:
    """Raise unless Triton's JITFunction is what SiteJITFunction is written against."""
    import inspect

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
