"""Prototype: where kname's per-launch time goes, and a leaner wrapper that does the same work.

Not part of kname. Run it directly (`python benchmarks/prototype_hot_path.py [--tool]`) or through
`run.py --only prototype`. Every wrapper below is put in place of the no-op target's launch
function in turn, interleaved with the bare launch and with kname's own wrapper (from the
checkout), exactly as in the no-op launch benchmark:

  steps      the wrapper built up one operation at a time (layer, flag, frame, key, count, push)
  lean       everything kname's cached path does (flag, kernel, frame, key look-up, count, NVTX
             push/pop, the miss path, fault handling), written for speed: see make_lean()
  lean_args  lean with `*args` only (no **kwargs), for launch callables that take no keywords
             (numba's _LaunchConfiguration.__call__(self, *args))

With --tool the worker must be started with NVTX_INJECTION64_PATH set (run.py does that).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BENCH_DIR,
    Variant,
    interleave,
    make_loops,
    summarize,
    use_checkout,
    write_json,
)

_enabled = True  # the prototypes' own switch (kname's is kname.launch._enabled)


def make_steps(original, site, domain, attributes):
    """Wrappers that each add one operation of the cached path to the one before."""
    getframe = sys._getframe
    original_id = id(original)
    sites = {}
    push_range, pop_range = domain.push_range, domain.pop_range

    def layer(*args, **kwargs):
        return original(*args, **kwargs)

    def flag(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        return original(*args, **kwargs)

    def frame(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        f = getframe(1)  # noqa: F841
        return original(*args, **kwargs)

    def key(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        f = getframe(1)
        s = sites.get((id(f.f_code), f.f_lasti, original_id))
        if s is None:
            sites[(id(f.f_code), f.f_lasti, original_id)] = site
        return original(*args, **kwargs)

    def count(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        f = getframe(1)
        s = sites.get((id(f.f_code), f.f_lasti, original_id))
        if s is None:
            s = sites[(id(f.f_code), f.f_lasti, original_id)] = site
        next(s.counter)
        return original(*args, **kwargs)

    def push(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        f = getframe(1)
        s = sites.get((id(f.f_code), f.f_lasti, original_id))
        if s is None:
            s = sites[(id(f.f_code), f.f_lasti, original_id)] = site
        next(s.counter)
        a = s.attributes
        if a is None:
            return original(*args, **kwargs)
        push_range(a)
        try:
            return original(*args, **kwargs)
        finally:
            pop_range()

    return {"step_layer": layer, "step_flag": flag, "step_frame": frame, "step_key": key,
            "step_count": count, "step_push": push}  # fmt: skip


class LeanSite:
    """What the lean wrapper needs per site (kname's Site carries the same, and more)."""

    __slots__ = ("attributes", "code", "counter", "name")

    def __init__(self, name, attributes, code, counter=None):
        self.name, self.attributes, self.code = name, attributes, code
        self.counter = itertools.count() if counter is None else counter  # kname's, if given


LEAN_TEMPLATE = """
def factory(original, kernel_of, getframe, sites, miss, push_range, pop_range, handle):
    original_id = id(original)

    def lean(*args{signature}):
        if _enabled:
            try:
                {kernel}f = getframe(1)
                site = sites.get((id(f.f_code), f.f_lasti, {kernel_id}))
                if site is None:
                    site = miss(f, {kernel_var}, {kernel_id})
                next(site.counter)
                attributes = site.attributes
            except Exception:  # kname reports its faults once; the launch runs unnamed
                attributes = None
            if attributes is not None:
                push_range(attributes, handle)
                try:
                    return original(*args{call})
                finally:
                    pop_range(handle)
        return original(*args{call})

    return lean
"""


def _nvtx_calls():
    """The Cython module-level push/pop (what nvtx.annotate uses) and kname's domain handle."""
    import kname.nvtx
    from nvtx._lib import lib as nvtx_lib

    return nvtx_lib.push_range, nvtx_lib.pop_range, getattr(kname.nvtx.domain(), "handle", None)


def make_lean(original, kernel_of, kernel_name, lib="bench", with_kwargs=True):
    """Everything kname's cached path does, in fewer operations:

    - the kernel key is computed once when the kernel is `original` (kernel_of is None);
    - the attributes are read from the site and pushed with the Cython module-level
      `nvtx._lib.lib.push_range(attributes, handle)` (what nvtx.annotate uses), not through a
      functools.partial of the bound `Domain.push_range` (a Python-level method with keyword
      parsing); the domain handle is bound once per wrapper;
    - no per-launch bookkeeping locals (`push = None`, `run = original`);
    - `*args` only where the launch callable takes no keywords (with_kwargs=False).
    The miss goes to kname's own resolve(); faults leave the launch unnamed, as in kname.
    """
    from kname import callsite

    push_range, pop_range, handle = _nvtx_calls()
    sites: dict[tuple, LeanSite] = {}

    def miss(frame, kernel, kernel_id):
        site = callsite.resolve(frame, kernel, kernel_id, kernel_name(kernel), lib)
        lean_site = LeanSite(site.name, site.attributes if handle is not None else None,
                             site.code, site.counter)  # fmt: skip
        sites[(id(frame.f_code), frame.f_lasti, kernel_id)] = lean_site
        return lean_site

    source = LEAN_TEMPLATE.format(
        signature=", **kwargs" if with_kwargs else "",
        call=", **kwargs" if with_kwargs else "",
        kernel="" if kernel_of is None else "kernel = kernel_of(args)\n                ",
        kernel_var="original" if kernel_of is None else "kernel",
        kernel_id="original_id" if kernel_of is None else "id(kernel)",
    )
    namespace: dict = {}
    exec(compile(source, f"<lean wrapper {lib}>", "exec"), globals(), namespace)
    lean = namespace["factory"](original, kernel_of, sys._getframe, sites, miss, push_range,
                                pop_range, handle)  # fmt: skip
    lean.sites = sites  # for the record: how many sites it cached
    return lean


def load_fastpath(build_dir: Path):
    """The C prototype (fastpath_proto.c) built for this interpreter, or (None, why not)."""
    import importlib.util
    import shlex
    import shutil
    import subprocess
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    name = "_kname_fastpath_proto"
    include = sysconfig.get_paths()["include"]
    target = build_dir / f"{name}{suffix}"
    prebuilt = BENCH_DIR / "wheels" / f"{name}{suffix}"  # carried where Python.h is missing
    compiler = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc")]
    why = None
    if sys.version_info < (3, 11):
        return None, "needs CPython 3.11+"
    if compiler[0] and Path(include, "Python.h").is_file():
        build_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*compiler, "-shared", "-fPIC", "-O2", f"-I{include}",
               str(BENCH_DIR / "fastpath_proto.c"), "-o", str(target)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            why = f"build failed: {done.stderr.strip()[-300:]}"
    else:
        why = f"no C compiler or no {include}/Python.h"
    path = target if why is None else prebuilt if prebuilt.is_file() else None
    if path is None:
        return None, why
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, None if path == target else f"{why}; used the prebuilt {path.name}"


def make_c(fastpath, original, kernel_name, lib="bench", mode=0, attr=None):
    """The C prototype around `original`; mode 0: the kernel is `original`, 1: the first
    argument, 2: attribute `attr` of the first argument. Misses go to kname's resolve()."""
    from kname import callsite

    push_range, pop_range, handle = _nvtx_calls()
    holder = {}

    def miss(frame, kernel, key):
        site = callsite.resolve(frame, kernel, id(kernel), kernel_name(kernel), lib)
        if site is None:
            return None
        attributes = site.attributes if handle is not None else None
        entry = (kernel, site.counter, attributes, handle, frame.f_code)
        holder["wrapper"].sites[key] = entry
        return entry

    wrapper = fastpath.Wrapper(original, miss, push_range, pop_range, mode, attr)
    holder["wrapper"] = wrapper
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    use_checkout()

    import bench_noop_target as target
    import kname.nvtx
    import nvtx

    import kname

    original = target.launch
    kname.install(targets=["bench_noop_target:launch"])
    kname_wrapper = target.launch
    target.launch = original

    domain = nvtx.get_domain("bench-prototype")
    attributes = domain.get_event_attributes(message="bench launch")
    site = LeanSite("bench launch", attributes, None)
    wrappers = {"bare": original, **make_steps(original, site, domain, attributes)}
    wrappers["kname"] = kname_wrapper
    wrappers["lean"] = make_lean(original, None, lambda k: "launch")
    wrappers["lean_args"] = make_lean(original, None, lambda k: "launch", with_kwargs=False)
    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-proto-"))
    fastpath, why = load_fastpath(workdir / "build")
    if fastpath is not None:
        wrappers["c_fastpath"] = make_c(fastpath, original, lambda k: "launch")
    loops = make_loops(workdir, "bench_loops_proto", "target.launch(arg)",
                       {"target": target, "arg": 1})  # fmt: skip

    def use(wrapper):
        return functools.partial(setattr, target, "launch", wrapper)

    variants = [
        Variant(name, loops.launch_loop, use(wrapper), use(original))
        for name, wrapper in wrappers.items()
    ]
    if fastpath is not None:

        def c_disabled():
            fastpath.set_enabled(False)
            target.launch = wrappers["c_fastpath"]

        def c_enabled():
            fastpath.set_enabled(True)
            target.launch = original

        variants.append(Variant("c_fastpath_disabled", loops.launch_loop, c_disabled, c_enabled))
    started = time.perf_counter()
    samples = interleave(variants, args.rounds, args.batch)
    result = {
        "workload": "noop",
        "python": sys.version.split()[0],
        "tool_attached": kname.nvtx.tool_attached(),
        "rounds": args.rounds,
        "batch": args.batch,
        "stack_depth": len(traceback.extract_stack()) + 3,  # main > interleave > batch > loop
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - started, 2),
        "variants": summarize(samples),
        "site_names": {name: n for name, n in kname.names().items() if n},
        "c_fastpath": "built" if fastpath is not None and why is None else why,
        "c_fastpath_entries": len(wrappers["c_fastpath"].sites) if fastpath else 0,
    }
    if args.json:
        write_json(args.json, result)
    else:
        for name, v in result["variants"].items():
            print(f"{name:10s} {v['median_ns']:8.1f} ns  added {v['added_ns']:8.1f} ns")


if __name__ == "__main__":
    main()
