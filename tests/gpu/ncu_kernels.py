"""The kernels Nsight Compute printed (`ncu --print-nvtx-rename kernel`), one per launch, as their
shown names: a launch under an NVTX range is shown under the range's name."""

from __future__ import annotations

import re
import sys

LAUNCH = re.compile(
    r"^  (?P<name>\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+"
)


def shown_names(text: str) -> list[str]:
    """The name of each profiled launch, in order."""
    return [m["name"] for line in text.splitlines() if (m := LAUNCH.match(line))]


if __name__ == "__main__":  # ncu_kernels.py LOG PROGRAM: the share of launches named after PROGRAM
    with open(sys.argv[1], errors="replace") as log:
        names = shown_names(log.read())
    mine = [n for n in names if sys.argv[2] in n]
    print(f"{sys.argv[1]}: {len(mine)} of {len(names)} launches named after {sys.argv[2]}")
    for name in sorted(set(names)):
        print(f"  {names.count(name):4d}  {name[:150]}")
