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


def main() -> None:
    from kname.profiling import mode

    start = time.perf_counter()
    model, opt, tokens = demo.make()
    for _ in range(demo.STEPS):
        demo.step(model, opt, tokens)
    import torch

    torch.cuda.synchronize()
    print(f"STEPS {demo.STEPS} in {time.perf_counter() - start:.3f} s")
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
