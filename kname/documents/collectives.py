"""A collective's GPU time on each rank told apart: its own cost, and the waiting for slower ranks.

A collective (NCCL's all_reduce, all_gather, send and receive, ...) is one kernel on each rank,
launched when that rank reaches the call; the transfer can start only once every rank's kernel
runs, so the kernel of a rank that arrives first spins until the last arrives. At a line whose
kernels are collectives, the rank that ran them for the least time over the run paid the
collective's own cost (and no more); each other rank's excess over it is time it spent waiting
for slower ranks, not work of its own. A fast rank's all_reduce line then carries most of its
job's waiting, and a straggler rule that read its GPU time as work would name the fast rank.

The rule reads what each rank's profile holds: per line, per kernel, GPU time and launches. A
merge keeps, per line with collective kernels, each rank's collective time (schema.py:
`by_rank`'s `collective_ns`); the spread and the straggler judge each rank's own work (its GPU
time less its waiting: spread.own_work), and the tables show the waiting apart. Ranks where the
line never ran (collective time 0: a collective of a subgroup) wait nothing and set no own cost.
This module is the rule alone (no document), so that schema.py's validate can use it.

What it cannot tell: a rank slow in the collective itself (a slower link) reads as the others'
own cost plus its own waiting. Each launch's start and end on each rank would tell it, but kname
keeps sums per line (CUPTI's records are folded as they come), and ranks on several hosts do
not share a clock to align launches by.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence
from itertools import repeat

# NCCL's kernels: `ncclKernel_*` (older releases) and `ncclDevKernel_*` (newer ones), as CUPTI
# names them: the C++ symbol (`_Z39ncclKernel_AllReduce_...`) or the name itself.
_COLLECTIVE_KERNEL = re.compile(r"(?:_Z[0-9]+)?(?:ncclKernel|ncclDevKernel)_")


def is_collective(kernel: str) -> bool:
    """Whether a kernel's name (as CUPTI gives it, mangled or not) says it is NCCL's."""
    return _COLLECTIVE_KERNEL.match(kernel) is not None


def collective_names(kernels: Iterable[str]) -> tuple[str, ...]:
    """The names among `kernels` that are collectives', in their order."""
    return tuple(name for name in kernels if is_collective(name))


def split_waiting(collective: Sequence[int]) -> tuple[int, list[int]]:
    """(the collective's own cost, each rank's waiting) from each rank's collective GPU time at
    one line: the own cost is the least time of a rank that ran it, and each rank's waiting is
    its excess over that (0 where it never ran)."""
    ran = list(filter(None, collective))  # at C's speed: 1,024 ranks at each such line
    own = min(ran) if ran else 0
    if len(ran) == len(collective):  # every rank ran it: the common case
        return own, list(map(operator.sub, collective, repeat(own)))
    return own, [time - own if time > 0 else 0 for time in collective]
