"""The driver hook's cost per launch, against the stand-in driver (no GPU needed).

A launch is the stand-in runtime's runtime_launch (tests/support/fake_cudart.c: the pointer the
runtime got from cuGetProcAddress, called), made from Python through ctypes with the GIL held,
in a loop, under the null NVTX tool (the tests' injection library). Three settings, each in its
own process, best of 7 rounds of 100,000 launches, three processes each, interleaved:

- hook off (KNAME=1, KNAME_DRIVER_HOOK=0): the launch alone;
- static range: the launch inside a prebuilt NVTX range pushed and popped in C (the floor a
  range costs);
- hook on (KNAME=1): the launch named by the hook (its call site remembered);
- and hook off and on again with the GIL let go around the call (ctypes.CDLL), as torch's ops
  let it go: the hook then reads the thread's frames without it.

`python benchmarks/driver_hook_cost.py` prints ns per launch for each, and the hook's cost over
the static range. No NVTX tool attached, the hook is not installed: its cost is then zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support"
ROUNDS, LAUNCHES = 7, 100_000

WORKER = f"""
import ctypes, sys, time
import kname
kname.install()
runtime = (ctypes.CDLL if sys.argv[2] == "released" else ctypes.PyDLL)(sys.argv[1])
launch = runtime.static_range_launch if sys.argv[2] == "static" else runtime.runtime_launch
best = float("inf")
for _ in range({ROUNDS}):
    start = time.perf_counter()
    for _ in range({LAUNCHES}):
        launch(0)
    best = min(best, time.perf_counter() - start)
print(best / {LAUNCHES} * 1e9)
"""


def build(folder: Path) -> tuple[Path, Path]:
    """The stand-in driver and runtime, and the null tool, built in `folder`."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.nvtx_capture import build_injection_library, compile_c

    compile_c(SUPPORT / "fake_cuda.c", folder / "libcuda.so.1", "-shared", "-fPIC",
              "-Wl,-soname,libcuda.so.1")  # fmt: skip
    runtime = compile_c(
        SUPPORT / "fake_cudart.c", folder / "libfakecudart.so", "-shared", "-fPIC",
        "-DFAKE_CUDART_NVTX", f"-L{folder}", "-l:libcuda.so.1", f"-Wl,-rpath,{folder}", "-ldl",
        "-lpthread",
    )  # fmt: skip
    return runtime, build_injection_library(folder)


def per_launch_ns(runtime: Path, tool: Path, setting: str, hook: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NVTX_INJECTION64_PATH": str(tool)}
    env["KNAME_DRIVER_HOOK"] = hook
    env.pop("KNAME_NVTX_LOG", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(runtime), setting], env=env, capture_output=True,
        text=True, check=True, timeout=600,
    )  # fmt: skip
    return float(done.stdout.split()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        runtime, tool = build(Path(folder))
        off = static = on = off_released = on_released = float("inf")
        for _ in range(3):  # interleaved, each the best of its runs
            off = min(off, per_launch_ns(runtime, tool, "plain", "0"))
            static = min(static, per_launch_ns(runtime, tool, "static", "0"))
            on = min(on, per_launch_ns(runtime, tool, "plain", "1"))
            off_released = min(off_released, per_launch_ns(runtime, tool, "released", "0"))
            on_released = min(on_released, per_launch_ns(runtime, tool, "released", "1"))
    print(f"hook off:     {off:7.1f} ns per launch")
    print(f"static range: {static:7.1f} ns per launch ({static - off:+.1f})")
    print(f"hook on:      {on:7.1f} ns per launch ({on - off:+.1f}; {on - static:+.1f} over the "
          "static range)")  # fmt: skip
    print(f"GIL let go:   {off_released:7.1f} ns hook off, {on_released:7.1f} ns hook on "
          f"({on_released - off_released:+.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
