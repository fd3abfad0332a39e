"""GPU program: what kname's cuda.core wrapper costs a numba-cuda launch, which it must not name.

numba-cuda's dispatcher calls cuda.core's `launch`. With numba's target installed, kname leaves
the dispatcher cuda.core's own `launch` (mode "default"); were it kname's wrapper (mode
"nested"), the wrapper would walk up to numba's kname wrapper and name nothing, at some cost.
This times `k[1, 32](x)` in one process, interleaved rounds: "nested", "default", and "off"
(`kname.disable()`). It then times the pieces of the nested path: the kernel-name look-up and
the frame walk. Prints medians in microseconds. Run from the repository root:
`python tests/gpu/nested_overhead.py [rounds] [batch]`.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 with numpy 2.5
    np.row_stack = np.vstack

import kname

kname.install()

from numba import cuda  # noqa: E402


@cuda.jit
def noop(x):
    x[0] = 1


def main(rounds: int = 40, batch: int = 500) -> None:
    import numba.cuda.dispatcher as dispatcher

    from kname import callsite
    from kname.targets import cuda_core

    original = dispatcher.launch
    wrapper = sys.modules["cuda.core._launcher"].launch
    assert getattr(wrapper, "_kname_wrapper", False), "cuda.core's launch is not wrapped"
    assert original is wrapper.__wrapped__, (
        "numba's dispatcher does not call cuda.core's own launch"
    )
    x = cuda.device_array(32, dtype=np.float32)
    captured = []

    def capture(*args):
        captured.append(args[2])
        return original(*args)

    dispatcher.launch = capture
    noop[1, 32](x)
    cuda.synchronize()
    kernel = captured[0]

    def nested():
        dispatcher.launch = wrapper
        kname.enable()

    def default():
        dispatcher.launch = original
        kname.enable()

    def off():
        dispatcher.launch = original
        kname.disable()

    samples: dict[str, list[float]] = {"nested": [], "default": [], "off": []}
    for _ in range(rounds):
        for name, setup in (("nested", nested), ("default", default), ("off", off)):
            setup()
            start = time.perf_counter()
            for _ in range(batch):
                noop[1, 32](x)
            samples[name].append((time.perf_counter() - start) / batch * 1e6)
            cuda.synchronize()
    default()
    for name, values in samples.items():
        print(f"{name:8s} median {statistics.median(values):7.2f} us/launch")
    nested_cost = statistics.median(samples["nested"]) - statistics.median(samples["default"])
    print(f"kname's cuda.core wrapper under numba would add {nested_cost:+.2f} us/launch")
    print(f"kernel_name(kernel)  {_time(lambda: cuda_core.kernel_name(kernel)):.3f} us")
    print(f"hash(kernel)         {_time(lambda: hash(kernel)):.3f} us")
    frame = sys._getframe()
    print(f"resolve (user frame) {_time(lambda: callsite.resolve(frame, 1, 1, 'k', 'x')):.3f} us")
    print("names:", kname.names())


def _time(call, n: int = 100_000) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
