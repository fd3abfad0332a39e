"""What setting a class attribute costs the calls after it, as kname.enable()/disable() do.

    python benchmarks/specialisation_toggle.py [--blocks 1000]

CPython specialises the instructions that read an object's attributes for the object's class;
setting an attribute of the class (kname's patch, or its restoring) undoes that, and each such
instruction misses until it has run some 60 times. profile_inprocess.py's blocks start right
after such a change (`--settle`). Here a class with seven attribute reads in its `__call__` is
called in blocks of 20 timed calls after `warm` untimed ones, with and without its `__call__`
set (to another function and back) before each block: ns a call, median over the blocks.
"""

from __future__ import annotations

import argparse
import statistics
import time


class Launcher:
    def __init__(self) -> None:
        self.a, self.b, self.c, self.d, self.e = 1, 2, 3, 4, 5

    def __call__(self, x: int) -> int:
        return self.helper(x + self.a + self.b + self.c + self.d + self.e)

    def helper(self, y: int) -> int:
        return y + self.a + self.b


ORIGINAL = Launcher.__dict__["__call__"]
LAUNCHER = Launcher()


def calls(n: int) -> None:
    for _ in range(n):
        LAUNCHER(1)


def block(toggled: bool, warm: int, timed: int = 20) -> float:
    if toggled:
        Launcher.__call__ = lambda self, x: 0  # kname's patch, then its restoring
        Launcher.__call__ = ORIGINAL
    calls(warm)
    start = time.perf_counter_ns()
    calls(timed)
    return (time.perf_counter_ns() - start) / timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=1000)
    args = parser.parse_args()
    print("| untimed calls first | ns a call | after the class changed | added |")
    print("| ---: | ---: | ---: | ---: |")
    for warm in (3, 30, 60, 80, 100, 300):
        steady = statistics.median(block(False, warm) for _ in range(args.blocks))
        changed = statistics.median(block(True, warm) for _ in range(args.blocks))
        print(f"| {warm} | {steady:.0f} | {changed:.0f} | {changed - steady:+.0f} |")


if __name__ == "__main__":
    main()
