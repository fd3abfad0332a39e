"""GPU program for KNAME_MODE=rename: Triton and CuPy kernels compiled under their sites' names.

Run on a machine with a CUDA GPU, CuPy, Triton and torch (Triton's arrays), from the repository
root:

    KNAME=1 KNAME_MODE=rename ncu --print-summary per-kernel \
        python tests/gpu/rename_libraries_demo.py
    KNAME=1 KNAME_MODE=rename python tests/gpu/rename_libraries_demo.py  # without the profiler

(without the kname wheel installed, `PYTHONPATH=.` instead of `KNAME=1`: the program then
installs kname itself, in rename mode). Under ncu, the kernel names column should show each
`SITE` line's entry name (such as `axpy_tt__tests_gpu_rename_libraries_demo_py_L88`), and the
reference launches, made with kname paused, the kernels' own names (`axpy_tt`, `axpy_ew`,
`l2norm`). Printed: one `SITE <marker> <line> <entry name> <launches>` per marked line,
`CHECK <what>: OK|FAIL ...` lines, the names kname counted, and exit status 1 if any check failed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import kname

if not kname.is_installed():
    os.environ.setdefault("KNAME_MODE", "rename")
    kname.install()

import cupy
import numpy as np

from kname import callsite
from kname.lifecycle import current_config

N = 1 << 20
SOURCE = Path(__file__).read_text()
failures: list[str] = []


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"CHECK {what}: {'OK' if ok else 'FAIL'} {detail}".rstrip(), flush=True)
    if not ok:
        failures.append(what)


# ---- CuPy -----------------------------------------------------------------

axpy_ew = cupy.ElementwiseKernel(
    "float32 a, T x, T y", "T out", "out = a * x + y", "axpy_ew", options=("-DKNAME_DEMO=1",)
)
l2norm = cupy.ReductionKernel(
    "T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm", reduce_type="float"
)


def cupy_launches(x, y) -> dict[str, np.ndarray]:
    """One launch from each marked CuPy line; the results, by marker."""
    results = {
        "ew-a": axpy_ew(np.float32(2.0), x, y),  # site: ew-a
        "ew-b": axpy_ew(np.float32(2.0), x, y),  # site: ew-b
        "red": l2norm(x.reshape(256, -1), axis=1),  # site: red
    }
    cupy.cuda.Device().synchronize()
    return {name: cupy.asnumpy(array) for name, array in results.items()}


CUPY_MARKERS = ("ew-a", "ew-b", "red")


def cupy_entry(marker: str) -> tuple[str | None, str]:
    """(the site's kernel's name, how its compiled source names the entry)."""
    site = site_at(marker)
    if site is None or site.launch is None:
        return None, "no site, or a site without its renamed kernel"
    variant = site.launch.kernel
    try:
        codes = list(variant.cached_codes.values())
    except Exception as exc:  # CuPy's cache introspection is not API
        codes = [f"<cached_codes: {exc}>"]
    if not codes:
        # CuPy keeps no source for reductions (compiled on first call, or through CUB): the
        # kernel name in ncu's summary is the check for those.
        return variant.name, "no cached source"
    has_entry = any(f"void {variant.name}(" in code for code in codes)
    return variant.name, f"source {'has' if has_entry else 'lacks'} void {variant.name}("


# ---- Triton ---------------------------------------------------------------

try:
    import torch
    import triton
    import triton.language as tl
except ImportError as exc:  # reported as a failed check
    triton = None
    TRITON_MISSING = str(exc)
else:

    @triton.jit
    def axpy_tt(out, x, y, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < n
        tl.store(out + i, 2.0 * tl.load(x + i, mask=mask) + tl.load(y + i, mask=mask), mask=mask)


def triton_launches(x, y) -> dict[str, np.ndarray]:
    """One launch from each marked Triton line; the results, by marker."""
    results = {name: torch.empty_like(x) for name in TRITON_MARKERS}
    grid = (N // 1024,)
    axpy_tt[grid](results["tt-a"], x, y, N, BLOCK=1024)  # site: tt-a
    axpy_tt[grid](results["tt-b"], x, y, N, BLOCK=1024)  # site: tt-b
    axpy_tt[(N // 256,)](results["tt-c"], x, y, N, BLOCK=256)  # site: tt-c
    torch.cuda.synchronize()
    return {name: array.cpu().numpy() for name, array in results.items()}


TRITON_MARKERS = ("tt-a", "tt-b", "tt-c")


def triton_entry(marker: str) -> tuple[str | None, str]:
    """(the entry names of the site's compiled kernels, how it was found)."""
    site = site_at(marker)
    if site is None or site.launch is None:
        return None, "no site, or a site without its renamed kernel"
    clone = site.launch.jit_function
    names = sorted(
        {kernel.name for caches in clone.device_caches.values() for kernel in caches[0].values()}
    )
    return " ".join(names), f"compiled {names}"


# ---- Checks ---------------------------------------------------------------


def line(marker: str) -> int:
    found = [n for n, text in enumerate(SOURCE.splitlines(), 1) if f"# site: {marker}" in text]
    return found[-1]


def site_at(marker: str):
    sites = [s for s in list(callsite.sites.values()) if s.name.endswith(f":{line(marker)}")]
    return sites[0] if len(sites) == 1 else None


def compare(lib: str, run, markers, *inputs) -> None:
    start = time.perf_counter()
    renamed = run(*inputs)
    first = time.perf_counter() - start
    run(*inputs)  # again: each site's kernel is compiled, launched directly
    with kname.paused():  # the kernels' own compiles, under their own names
        plain = run(*inputs)
    print(f"COST {lib}: first launches from {len(markers)} new sites {first * 1e3:.0f} ms")
    for marker in markers:
        same = renamed[marker].tobytes() == plain[marker].tobytes()
        check(f"{marker} bit-identical to the plain kernel", same)


def check_sites(markers, entry_of) -> None:
    names = []
    for marker in markers:
        site = site_at(marker)
        entry, detail = entry_of(marker)
        if entry is None:
            check(f"{marker} renamed", False, detail)
            continue
        print(f"SITE {marker} {line(marker)} {entry} {site.launches()}", flush=True)
        check(f"{marker} entry name", entry == site.identifier, detail)
        check(f"{marker} entry ends with its line", entry.endswith(f"_L{line(marker)}"), entry)
        names.append(entry)
    check(f"{'/'.join(markers)} names differ", len(set(names)) == len(names), str(names))


def main() -> int:
    config = current_config()
    if config is None or config.mode != "rename":
        print("FAIL: run with KNAME_MODE=rename (or without the wheel, PYTHONPATH=.)")
        return 1
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"kname rename demo (CuPy {cupy.__version__}, Triton) on {name}, N={N}", flush=True)
    rng = np.random.default_rng(7)
    host_x = rng.standard_normal(N).astype(np.float32) + 3.0
    host_y = rng.standard_normal(N).astype(np.float32)

    compare("cupy", cupy_launches, CUPY_MARKERS, cupy.asarray(host_x), cupy.asarray(host_y))
    check_sites(CUPY_MARKERS, cupy_entry)
    for marker in CUPY_MARKERS:
        if site_at(marker) is not None and site_at(marker).launch is not None:
            _, detail = cupy_entry(marker)
            if detail == "no cached source":
                print(f"SKIP {marker} compiled source: {detail} (see ncu's kernel names)")
            else:
                check(f"{marker} compiled source", detail.startswith("source has"), detail)

    if triton is None:
        check("triton and torch import", False, TRITON_MISSING)
    else:
        print(f"Triton {triton.__version__}, torch {torch.__version__}", flush=True)
        x, y = torch.from_numpy(host_x).cuda(), torch.from_numpy(host_y).cuda()
        compare("triton", triton_launches, TRITON_MARKERS, x, y)
        check_sites(TRITON_MARKERS, triton_entry)

    for name, launches_seen in sorted(kname.names().items()):
        print(f"NAME {launches_seen:3d}  {name}")
    verdict = "FAILED " + ", ".join(failures) if failures else "all checks passed"
    print("rename libraries demo:", verdict)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
