"""Worker: merging one profile file per rank, as `kname report profile.rank*.json` does.

Writes `--ranks` rank files of `--sites` call sites each, with kname's own writer (the sites a
training step has on every rank, one to three kernels each, GPU times that differ by rank; a
process per CPU writes a run of ranks), then,
in a fresh interpreter, reads and merges them (kname.documents.merge.merge_files, each file
validated) and renders the table with the spread across ranks. Reports the wall time and the
CPU time of the merge (with its worker processes), of the table, and the peak resident memory
of the merging process and its workers together, against the budget: 1,024 files of 5,000
sites in at most 10 s and 1 GB; and the host: the CPUs it may use, the machine's memory.

On a shared machine, compare a change in one time window: `--keep DIR` once, then
`--files DIR --baseline OLD_CHECKOUT --rounds 3` merges DIR's files with this checkout's kname
and OLD_CHECKOUT's in turn (old, new, old, new, ...), each run with the load average before it.
`--floor` also times parsing alone (`json.loads` of each file, in as many worker processes,
nothing validated or merged): what no merge in Python can beat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import use_checkout, write_json

# Kernel names as CUPTI gives them: short library kernels and longer mangled templates.
KERNELS = (
    "ampere_sgemm_128x64_nn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEEEEviT0_",
    "_ZN2at6native13reduce_kernelILi512ELi1EEEvT1_",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "[memcpy DtoD]",
    "[memset]",
    "triton_poi_fused_add_mul_0",
)
FUNCTIONS = ("forward", "backward_hook", "step", "attention", "mlp", "norm", "loss", "<module>")
BUDGET = {"seconds": 10.0, "megabytes": 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--sites", type=int, default=5000)
    parser.add_argument("--json", required=True)
    parser.add_argument("--keep", help="write the rank files here and keep them")
    parser.add_argument("--workers", type=int, help="merging processes (default: one per CPU)")
    parser.add_argument("--files", metavar="DIR", help="merge the rank files --keep left in DIR")
    parser.add_argument(
        "--baseline", metavar="CHECKOUT", help="also merge with CHECKOUT's kname, in turn"
    )
    parser.add_argument("--rounds", type=int, default=1, help="merges of each kname (default 1)")
    parser.add_argument("--floor", action="store_true", help="also time json.loads alone")
    args = parser.parse_args()
    use_checkout()
    from _common import REPO

    directory = Path(args.files or args.keep or tempfile.mkdtemp(prefix="kname-bench-ranks-"))
    directory.mkdir(parents=True, exist_ok=True)
    checkouts = {"baseline": args.baseline} if args.baseline else {}
    checkouts["this"] = str(REPO)
    try:
        started = time.perf_counter()
        if args.files:
            paths = sorted(map(str, directory.glob("profile.rank*.json")))
            args.ranks = len(paths)
        else:
            paths = write_rank_files(directory, args.ranks, args.sites)
        written_s = time.perf_counter() - started
        size = sum(os.path.getsize(path) for path in paths)
        runs = [
            {"kname": name, "load_average": round(os.getloadavg()[0], 2)}
            | merge_in_a_fresh_process(paths, args.workers, checkout)
            for _ in range(args.rounds)
            for name, checkout in checkouts.items()
        ]
        if args.floor:
            floor = {"load_average": round(os.getloadavg()[0], 2)}
            floor |= in_a_fresh_process(FLOOR, paths, args.workers, str(REPO))
    finally:
        if not (args.keep or args.files):
            shutil.rmtree(directory, ignore_errors=True)
    result = {
        "ranks": args.ranks,
        "sites": runs[0]["merged_sites"] if args.files else args.sites,
        "files_megabytes": round(size / 2**20, 1),
        "write_seconds": round(written_s, 2),
        **host_facts(),
        **next(run for run in runs if run["kname"] == "this"),
        "budget": BUDGET,
    }
    if len(runs) > 1:
        result["runs"] = runs
    if args.floor:
        result["parse_floor"] = floor
    write_json(args.json, result)


def host_facts() -> dict:
    """The CPUs this process may run on, and the machine's memory (/proc/meminfo's MemTotal)."""
    facts = {"cpus": len(os.sched_getaffinity(0)), "memory_gigabytes": None}
    try:
        with open("/proc/meminfo") as meminfo:
            line = next(line for line in meminfo if line.startswith("MemTotal:"))
        facts["memory_gigabytes"] = round(int(line.split()[1]) / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return facts


def write_rank_files(directory: Path, ranks: int, sites: int) -> list[str]:
    """One profile per rank, as `kname profile --json profile.json` writes them under torchrun,
    written by as many processes as there are CPUs (each a run of ranks)."""
    workers = min(len(os.sched_getaffinity(0)), max(ranks // 16, 1))
    size = -(-ranks // workers)
    runs = [range(start, min(start + size, ranks)) for start in range(0, ranks, size)]
    if len(runs) == 1:
        return write_ranks(directory, runs[0], ranks, sites)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(len(runs), mp_context=context) as pool:
        written = pool.map(write_ranks, [directory] * len(runs), runs, [ranks] * len(runs),
                           [sites] * len(runs))  # fmt: skip
        return [path for paths in written for path in paths]


def write_ranks(directory: Path, run: range, ranks: int, sites: int) -> list[str]:
    """The profiles of the ranks in `run`, of a job of `ranks`."""
    from kname.documents.build import profile_of_sites
    from kname.documents.schema import RANKS, render_json
    from kname.ranks import Rank, meta

    chooser = random.Random(0)  # the same sites on every rank, whichever process writes it
    shapes = []
    for index in range(sites):
        name = f"{chooser.choice(FUNCTIONS)} model/layer_{index % 97}.py:{10 + index}"
        kernels = chooser.sample(KERNELS, chooser.randint(1, 3))
        shapes.append((name, kernels, chooser.randint(1, 200), chooser.randint(2_000, 900_000)))
    paths = []
    for rank in run:
        slower = 1.0 + (0.3 if rank == ranks // 3 else 0.0)  # one straggler
        site_list = []
        for order, (name, kernels, launches, gpu_ns) in enumerate(shapes, 1):
            per_kernel = {
                kernel: {"launches": launches, "gpu_ns": int(gpu_ns * slower) + rank + i}
                for i, kernel in enumerate(kernels)
            }
            site = {
                "name": name,
                "kernel": kernels[0],
                "lib": "",
                "launches": launches * len(kernels),
                "gpu_ns": sum(k["gpu_ns"] for k in per_kernel.values()),
                "share": 0.0,
                "order": order,
                "kernels": per_kernel,
            }
            site_list.append(site)
        document = profile_of_sites(site_list, {}, 1)
        record = meta(Rank(rank, rank % 8, ranks, "torchrun"), host=f"node{rank // 8}", pid=rank)
        document[RANKS] = [record | {"device": str(rank % 8)}]
        path = directory / f"profile.rank{rank}.json"
        path.write_text(render_json(document))
        paths.append(str(path))
    return paths


MERGE = """
import json, os, resource, sys, threading, time
sys.path.insert(0, sys.argv[1])  # the checkout's kname
from kname.documents.files import load
from kname.documents.merge import merge_files, workers_for
from kname.documents.tables import render_table

out, listing, workers = sys.argv[2:]
paths = open(listing).read().splitlines()
workers = int(workers) if workers else workers_for(len(paths))


def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def resident(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        return 0


def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found += open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            pass
    return found


peak = {"total": 0}
done = threading.Event()


def sample():
    # The merging process and its workers together, every 20 ms: the memory the merge takes
    # (pages a fork shares are counted in each process, so this is an upper bound).
    while not done.wait(0.02):
        total = resident(os.getpid()) + sum(resident(c) for c in children(os.getpid()))
        peak["total"] = max(peak["total"], total)


threading.Thread(target=sample, daemon=True).start()
started, cpu_started = time.perf_counter(), cpu()
merged = merge_files(paths, load, workers)
merge_s, merge_cpu_s = time.perf_counter() - started, cpu() - cpu_started
started = time.perf_counter()
table = render_table(merged, source="profile.rank*.json", top=20)
table_s = time.perf_counter() - started
done.set()
own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result = {"merge_seconds": round(merge_s, 2), "merge_cpu_seconds": round(merge_cpu_s, 2),
          "workers": workers, "table_seconds": round(table_s, 2),
          "peak_megabytes": round(max(peak["total"] / 2**20, own_peak)),
          "merging_process_peak_megabytes": round(own_peak),
          "merged_sites": len(merged["sites"]), "merged_ranks": len(merged["ranks"]),
          "table_head": table.splitlines()[:4]}
open(out, "w").write(json.dumps(result))
"""


# Parsing alone, as the merge's workers parse (the collector paused, a run of files each).
FLOOR = """
import gc, json, multiprocessing, os, resource, sys, time
from concurrent.futures import ProcessPoolExecutor

out, listing, workers = sys.argv[2:]
paths = open(listing).read().splitlines()
workers = int(workers) if workers else len(os.sched_getaffinity(0))
gc.disable()


def parse(share):
    for path in share:
        with open(path, "rb") as file:
            json.loads(file.read().decode())


def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


started, cpu_started = time.perf_counter(), cpu()
size = -(-len(paths) // workers)
shares = [paths[start : start + size] for start in range(0, len(paths), size)]
with ProcessPoolExecutor(len(shares), mp_context=multiprocessing.get_context("fork")) as pool:
    list(pool.map(parse, shares))
result = {"seconds": round(time.perf_counter() - started, 2),
          "cpu_seconds": round(cpu() - cpu_started, 2), "workers": len(shares)}
open(out, "w").write(json.dumps(result))
"""


def merge_in_a_fresh_process(paths: list[str], workers: int | None, checkout: str) -> dict:
    """Merge and tabulate in a new interpreter (with `checkout`'s kname), so that its peak
    memory is the merge's alone."""
    return in_a_fresh_process(MERGE, paths, workers, checkout)


def in_a_fresh_process(code: str, paths: list[str], workers: int | None, checkout: str) -> dict:
    """What `code` (MERGE or FLOOR) writes, run on `paths` in a new interpreter."""
    with tempfile.TemporaryDirectory() as scratch:
        listing, out = Path(scratch, "files.txt"), Path(scratch, "result.json")
        listing.write_text("\n".join(paths))
        argv = [checkout, str(out), str(listing), str(workers or "")]
        subprocess.run([sys.executable, "-c", code, *argv], check=True, timeout=1800)
        return json.loads(out.read_text())


if __name__ == "__main__":
    main()
