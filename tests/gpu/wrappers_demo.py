"""kname profile's names with kname's library launch wrappers in the call path and out of it
(kname.profiling.wrappers, issue 43), on a GPU: the mixed program's loop (benchmarks/
mixed_program.py: numba-cuda, CuPy, torch, Triton, each that starts here) profiled twice in one
process, first with ProfileSession(keep_wrappers=True), then as kname.profile() collects (the
wrappers out where nothing reads them). One line per run:

    RUN {"keep": true, "out": false, "sites": {name: launches, ...}}

tests/gpu/test_gpu_wrappers.py compares them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import kname  # noqa: E402

kname.install()  # before the libraries: their launches are wrapped as they are imported

import mixed_program  # noqa: E402

from kname.profiling.session import ProfileSession  # noqa: E402


def main() -> int:
    ns: dict = {"N": mixed_program.N, "BLOCK": mixed_program.BLOCK}
    lines, skipped = mixed_program.workloads(ns)
    print("LINES", json.dumps(lines), "SKIPPED", json.dumps(skipped))
    loop, _, _ = mixed_program.write_loop(Path(tempfile.mkdtemp()), lines, ns)
    loop(3)  # compiled, outside any profile
    mixed_program.synchronize(ns)
    for keep in (True, False):
        session = ProfileSession(keep_wrappers=True) if keep else kname.profile()
        if not session.start():
            print("NOT COLLECTED", session.not_collected)
            return 1
        out = session.wrappers_out
        loop(5)
        mixed_program.synchronize(ns)
        session.stop()
        sites = {site["name"]: site["launches"] for site in session.sites}
        print("RUN", json.dumps({"keep": keep, "out": out, "sites": sites}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
