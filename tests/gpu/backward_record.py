"""backward_demo.py under `kname profile --trace`, its streams saved for tests/data (replayed in
CI by tests/profiling/test_profiling_backward_lines.py).

Run on a GPU, from the repository root:

    kname profile --json OUT/profile.json --trace OUT/trace.json -- \
        python tests/gpu/backward_record.py OUT/backward_h100.json

It runs the demo's steps, stops the profile, saves the recorded streams (with the demo's source
lines per marker in meta), and prints per site its launches, GPU time and backward fields.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import backward_demo as demo


def timing(model, opt, tokens) -> None:
    """With BACKWARD_RECORD_TIMING=1: CPU time per step under kname profile, backward per forward
    line on, its forward recording off, its backward naming off, both off; interleaved blocks."""
    import torch

    from kname.profiling import backward, torch_forward

    reader = backward._forward_line

    def configure(forward: bool, names: bool) -> None:
        torch_forward._mode.active = forward
        backward._forward_line = reader if names else None
        backward._tell_forward_listener()

    configs = {"on": (True, True), "forward-off": (False, True), "names-off": (True, False),
               "off": (False, False)}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(7):
        for name, config in configs.items():
            configure(*config)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(2):
                demo.step(model, opt, tokens)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / 2)
    configure(True, True)
    for name, values in times.items():
        print(f"COST {name}: {sorted(values)[len(values) // 2] * 1e3:.3f} ms/step (median of 7)")


def main() -> None:
    import os

    from kname.profiling import mode

    start = time.perf_counter()
    model, opt, tokens = demo.make()
    for _ in range(demo.STEPS):
        demo.step(model, opt, tokens)
    import torch

    torch.cuda.synchronize()
    print(f"STEPS {demo.STEPS} in {time.perf_counter() - start:.3f} s")
    if os.environ.get("BACKWARD_RECORD_TIMING") == "1":
        timing(model, opt, tokens)
        return
    session = mode._session
    if session is None:
        print("NO SESSION (not under kname profile)")
        return
    session.stop()
    lines = {
        number: text.split("# site:")[1].strip()
        for number, text in enumerate(Path(demo.__file__).read_text().splitlines(), 1)
        if "# site:" in text
    }
    session.save_streams(sys.argv[1], demo="backward_demo.py", markers=lines, steps=demo.STEPS)
    document = session.document()
    for site in document["sites"]:
        extra = {k: v for k, v in site.items() if k.startswith("backward")}
        print(f"SITE {site['name']!r} launches={site['launches']} gpu_ns={site['gpu_ns']} {extra}")
    print("RECORD DONE")


if __name__ == "__main__":
    main()
