"""Two lines at the two ends of the launch-bound verdict, for `kname profile` (issue 40).

tests/gpu/test_gpu_verdict.py runs it as `kname profile --json profile.json -- python
verdict_demo.py` on a GPU: the line marked `tiny` launches a one-element in-place add 200 times
(each kernel a microsecond or two of GPU time, less than its launch call's CPU time: launch-bound),
the line marked `matmul` multiplies two 4096x4096 matrices (milliseconds of GPU time for one launch
call: not launch-bound). With VERDICT_DEMO_STREAMS=<path>, under `kname profile --trace ...` (which
keeps the streams, launch calls timed), it writes the recorded streams there at its end (the replay
fixture tests/data/verdict_h100.json).
"""

from __future__ import annotations

import os

import torch

TINY_LAUNCHES = 200
MATMULS = 4


def main() -> None:
    x = torch.zeros(1, device="cuda")  # site: x
    a = torch.randn(4096, 4096, device="cuda")  # site: a
    b = torch.randn(4096, 4096, device="cuda")  # site: b
    c = a @ b  # site: warm
    torch.cuda.synchronize()
    for _ in range(TINY_LAUNCHES):
        x.add_(1.0)  # site: tiny
    for _ in range(MATMULS):
        c = a @ b  # site: matmul
    torch.cuda.synchronize()
    print("VERDICT DEMO DONE", float(x.item()), float(c[0, 0].item()) != 0.0)


def record_streams(path: str) -> None:
    """The profile's streams to `path` (after stopping it)."""
    from kname.profiling import mode

    session = mode._session
    session.stop()  # what the GPU finished so far is flushed into the streams
    session.save_streams(path, demo="verdict_demo.py", device=torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
    if os.environ.get("VERDICT_DEMO_STREAMS"):
        record_streams(os.environ["VERDICT_DEMO_STREAMS"])
