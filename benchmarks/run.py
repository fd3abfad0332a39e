"""kname's overhead benchmarks: run the suites, print their tables, write results.json/.md.

    python benchmarks/run.py [--quick] [--gpu] [--only SUITES] [--out DIR] [--clock wall|thread]

Suites: launch (kname's own cost per launch on the CPU, and the cache miss), memory, startup,
ranks (`kname report` merging one profile per rank), gpu (numba-cuda, CuPy, Triton on a real
GPU), program (kname profile on a whole program, benchmarks/profile_program.py, beside
CUPTI's floor and Proton; --breakdown adds its per-line breakdown) and inprocess (the same
program's cost measured inside one process, profiling toggled in interleaved blocks,
benchmarks/profile_inprocess.py); the last three with --gpu, or when --only names them. Each
launch suite runs one interpreter per NVTX tool setting (none, or the tests' injection library
in null mode), because NVTX picks its tool once per process.
benchmarks/README.md says what each row means.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BENCH_DIR,
    CLOCK_VARIABLE,
    CLOCKS,
    TOOLS,
    VARIANTS,
    build_checkout_extensions,
    build_null_tool,
    clean_env,
    load_average,
    machine,
    no_gpu,
    run_worker,
    tool_env,
    write_json,
)

SUITES = ("launch", "memory", "startup", "ranks", "gpu", "program", "inprocess")
GPU_SUITES = ("gpu", "program", "inprocess")
CLOCK_LABELS = {
    "wall": "the wall clock (perf_counter_ns)",
    "thread": "the launching thread's CPU time (thread_time_ns)",
}
GPU_LIBRARIES = ("numba", "cupy", "triton")

# (rounds, launches per batch), quick and full.
SETTINGS = {
    "launch": {"quick": (30, 500), "full": (200, 500)},
    "gpu": {"quick": (40, 50), "full": (400, 100)},
    "miss_pairs": {"quick": 300, "full": 1000},
    "memory_sites": {"quick": 20_000, "full": 120_000},
    "ranks": {"quick": (64, 1000), "full": (1024, 5000)},  # (rank files, sites in each)
    "program": {"quick": (3, 500), "full": (5, 1500)},  # rounds, iterations
    "inprocess_seconds": {"quick": 40, "full": 150},
}

VARIANT_TEXT = {
    "bare": "bare launch (kname uninstalled)",
    "kname": "kname on, cached call site",
    "kname_python": "the same, pure-Python wrapper (KNAME_NATIVE=0)",
    "kname_disabled": "kname installed, kname.disable()d",
    "push_pop": "static NVTX range, prebuilt push_range/pop_range",
    "bare_again": "bare launch again (A/A control: the method's noise)",
    "uninstalled_kname_object": "kname uninstalled, the kernel object made under kname",
}
WORKLOAD_TEXT = {
    "noop": "no-op target (CPU)",
    "noop_step": "no-op target, from a function called per launch (CPU)",
    "numba": "numba-cuda `k[1, 32](d)`",
    "cupy": "CuPy `RawKernel`",
    "triton": "Triton `k[(1,)](x, 32)`",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (under a minute)")
    parser.add_argument("--gpu", action="store_true", help="also run the gpu suite")
    parser.add_argument("--only", default="", help=f"comma list of suites among {SUITES}")
    parser.add_argument("--out", default=str(BENCH_DIR / "results"), help="output directory")
    parser.add_argument(
        "--libraries",
        default=",".join(GPU_LIBRARIES),
        help=f"gpu suite: comma list among {', '.join(GPU_LIBRARIES)}",
    )
    parser.add_argument(
        "--gpu-rounds", type=int, help="gpu suite: rounds (more read finer; default 400)"
    )
    parser.add_argument(
        "--startup-rounds",
        type=int,
        help="startup suite: rounds of `python -c pass` (more read finer; default 60)",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="program suite: the per-line breakdown too"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="time batches by the wall clock (default) or by the launching thread's CPU time",
    )
    args = parser.parse_args()
    os.environ[CLOCK_VARIABLE] = args.clock  # the workers time their batches with it
    suites = [s for s in SUITES if s not in GPU_SUITES or args.gpu]
    if args.only:
        wanted = {s.strip() for s in args.only.split(",") if s.strip()}
        unknown = wanted - set(SUITES)
        if unknown:
            parser.error(f"unknown suites {sorted(unknown)}; choose among {', '.join(SUITES)}")
        suites = [s for s in SUITES if s in wanted]
    libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    if not libraries or set(libraries) - set(GPU_LIBRARIES):
        parser.error(f"--libraries: choose among {', '.join(GPU_LIBRARIES)}")
    mode = "quick" if args.quick else "full"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    results: dict = {
        "machine": machine(),
        "mode": mode,
        "clock": args.clock,
        "suites": suites,
        "load_average_before": load_average(),
        "notes": [],
    }
    try:
        tool_lib = build_null_tool(out / "build")
    except RuntimeError as exc:
        tool_lib = None
        results["notes"].append(f"NVTX null tool unavailable ({exc}); null-tool rows skipped")
    tools = [t for t in TOOLS if t == "none" or tool_lib is not None]
    if set(suites) - {"startup"}:  # the suites that import kname from this checkout
        note = build_checkout_extensions()
        if note:
            results["notes"].append(note)
            say(note)

    if "launch" in suites:
        results["launch"], results["miss"] = launch_suite(mode, tools, tool_lib)
    if "memory" in suites:
        tool = "null" if tool_lib else "none"
        say(f"memory: tool {tool!r}")
        argv = ["--sites", str(SETTINGS["memory_sites"][mode])]
        results["memory"] = run_worker("memory.py", argv, worker_env(tool, tool_lib), 600)
    if "ranks" in suites:
        files, sites = SETTINGS["ranks"][mode]
        say(f"ranks: merging {files} rank files of {sites} call sites")
        argv = ["--ranks", str(files), "--sites", str(sites)]
        results["ranks"] = run_worker("merge_ranks.py", argv, clean_env(), 3600)
    if "startup" in suites:
        import startup

        missing = startup.missing_for_the_wheel()
        if missing:
            results["startup"] = {"skipped": missing}
            say(f"startup: skipped, {missing}")
        else:
            say("startup: building the wheel and two venvs")
            try:
                results["startup"] = startup.run(mode == "quick", say, args.startup_rounds)
            except Exception as exc:  # one suite failing must not lose the others
                results["startup"] = {"error": f"{type(exc).__name__}: {exc}"}
    if "gpu" in suites:
        missing = no_gpu()
        if missing:
            results["gpu_skipped"] = missing
            say(f"gpu: skipped, {missing}")
        else:
            results["gpu"] = gpu_suite(mode, tools, tool_lib, libraries, args.gpu_rounds)

    if "program" in suites:
        results["program"] = program_suite(mode, args.breakdown)
    if "inprocess" in suites:
        results["inprocess"] = inprocess_suite(mode)

    results["notes"] += sanity_notes(results)
    results["load_average_after"] = load_average()
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["budget"] = budget(results)
    markdown = render(results)
    write_json(out / "results.json", results)
    (out / "results.md").write_text(markdown)
    print(markdown)
    say(f"wrote {out / 'results.json'} and {out / 'results.md'} ({results['seconds']} s)")


def worker_env(tool: str, tool_lib: Path | None, extra: dict | None = None) -> dict[str, str]:
    return clean_env({**tool_env(tool, tool_lib), "NUMBA_ENABLE_CUDASIM": None, **(extra or {})})


def launch_suite(mode: str, tools: list[str], tool_lib) -> tuple[list, list]:
    rounds, batch = SETTINGS["launch"][mode]
    launches, misses = [], []
    for tool in tools:
        say(f"launch: no-op target, tool {tool!r}")
        argv = ["--rounds", str(rounds), "--batch", str(batch)]
        argv += ["--miss-sites", str(SETTINGS["miss_pairs"][mode])]
        result = run_worker("launch_cpu.py", argv, worker_env(tool, tool_lib), 600)
        result.update(workload="noop", tool=tool)
        miss = result.pop("miss", None)
        step = result.pop("step", None)
        launches.append(result)
        if step is not None:
            launches.append({**step, "workload": "noop_step", "tool": tool})
        if miss is not None:
            misses.append({"tool": tool, **miss})
    return launches, misses


def gpu_suite(
    mode: str, tools: list[str], tool_lib, libraries: list[str], rounds: int | None = None
) -> list:
    default_rounds, batch = SETTINGS["gpu"][mode]
    rounds = rounds or default_rounds
    runs = []
    for lib in libraries:
        for tool in tools:
            say(f"gpu: {lib}, tool {tool!r}")
            argv = ["--lib", lib, "--rounds", str(rounds), "--batch", str(batch)]
            result = run_worker("launch_gpu.py", argv, worker_env(tool, tool_lib), 300)
            result.update(workload=lib, tool=tool)
            runs.append(result)
            if "skipped" in result:
                say(f"gpu: {lib} skipped, {result['skipped']}")
                break
    return runs


def program_suite(mode: str, breakdown: bool) -> dict:
    """benchmarks/profile_program.py in a worker: its rows and its Markdown (or why not)."""
    missing = no_gpu()
    if missing:
        say(f"program: skipped, {missing}")
        return {"skipped": missing}
    rounds, iterations = SETTINGS["program"][mode]
    say(f"program: {rounds} rounds of whole processes, {iterations} iterations each")
    argv = ["--rounds", str(rounds), "--iterations", str(iterations)]
    argv += ["--breakdown"] if breakdown else []
    return run_worker("profile_program.py", argv, clean_env({"NUMBA_ENABLE_CUDASIM": None}), 900)


def inprocess_suite(mode: str) -> dict:
    """benchmarks/profile_inprocess.py in a worker: its rows (or why not)."""
    missing = no_gpu()
    if missing:
        say(f"inprocess: skipped, {missing}")
        return {"skipped": missing}
    seconds = SETTINGS["inprocess_seconds"][mode]
    say(f"inprocess: profiling toggled in interleaved blocks, {seconds} s")
    argv = ["--max-seconds", str(seconds)]
    env = clean_env({"NUMBA_ENABLE_CUDASIM": None})
    return run_worker("profile_inprocess.py", argv, env, seconds + 120)


# ---------------------------------------------------------------- checks


def sanity_notes(results: dict) -> list[str]:
    """What a reader must know before trusting a row: worker errors and warnings, and kname
    variants that named nothing (a kname fault lets launches run unnamed, cheap for the wrong
    reason)."""
    notes = []
    for run in [*results.get("launch", []), *results.get("gpu", [])]:
        where = f"{run.get('workload')}, tool {run.get('tool')}"
        if "error" in run:
            notes.append(f"{where}: {one_line(run['error'])}")
        elif "variants" in run and not run.get("site_names"):
            notes.append(f"{where}: kname named no launch; its rows are not kname's")
        if run.get("stderr"):
            notes.append(f"{where}: worker said: {one_line(run['stderr'])}")
    program = results.get("program", {})
    if program.get("stderr"):
        notes.append(f"program: worker said: {one_line(program['stderr'])}")
    memory = results.get("memory", {})
    if memory.get("stderr"):
        notes.append(f"memory: worker said: {one_line(memory['stderr'])}")
    return notes


# (label, unit, budget) of kname's performance budget (the native hot path's, issue #13);
# measured values are filled in below. A budget that depends on the NVTX tool setting is a
# {tool: limit} dict.
BUDGET = {
    "cached": ("no-op launch, cached call site: added", "ns", 250),
    "disabled": ("no-op launch, kname.disable()d: added", "ns", 20),
    "miss_seen": ("first launch from a new line in a file seen before: added", "µs", 10),
    "miss_new": ("first launch from a line of a new file: added", "µs", 25),
    "gate": (".pth gate switched off, per start-up", "ms", 0.1),
    "startup_on": ("`python -c pass` switched on, C hot path: added over bare python", "ms", 15),
    "startup_on_cpu": ("the same, by the child's CPU time (user + system)", "ms", 15),
    "numba": ("numba-cuda launch: added share", "%", {"none": 2, "null": 3}),
    "cupy": ("CuPy RawKernel launch: added share", "%", 3),
    "triton": ("Triton `k[grid]` launch: added share", "%", 5),
    "inprocess": ("kname profile above CUPTI's floor, whole program in one process", "µs", 0.5),
    "merge_s": ("merging 1,024 rank files of 5,000 call sites: wall clock", "s", 10),
    "merge_mb": ("merging 1,024 rank files of 5,000 call sites: peak memory", "MB", 1024),
}


def budget(results: dict) -> list[dict]:
    """Each measured budget item: {item, setting, measured, unit, budget, ok}."""
    rows = []

    def add(
        key: str, tool: str | None, measured: float, named: bool = True, setting: str = ""
    ) -> None:
        label, unit, limit = BUDGET[key]
        if isinstance(limit, dict):
            limit = limit[tool]
        ok = measured < limit if named else None  # None: kname named nothing, not measured
        setting = setting or (f"tool {tool}" if tool else "site.addpackage, in-process")
        row = {"item": label, "setting": setting, "measured": measured, "unit": unit}
        rows.append({**row, "budget": limit, "ok": ok})

    for run in results.get("launch", []):
        if "variants" in run and run["workload"] == "noop":  # the budget's no-op launch
            named, v = bool(run.get("site_names")), run["variants"]
            add("cached", run["tool"], v["kname"]["added_ns"], named)
            add("disabled", run["tool"], v["kname_disabled"]["added_ns"], named)
    for miss in results.get("miss", []):
        for case, key in (("seen_file", "miss_seen"), ("new_file", "miss_new")):
            if case in miss:
                add(key, miss["tool"], miss[case]["added_ns"] / 1000, miss["new_sites"] > 0)
    phase = results.get("inprocess", {}).get("phase_kname", {})
    if "kname" in phase and "floor" in phase:
        above = phase["kname"]["cpu"]["added_us"] - phase["floor"]["cpu"]["added_us"]
        spread = phase.get("off-again", {}).get("cpu", {})
        aa = f"A/A {spread.get('added_us', float('nan')):+.2f} µs" if spread else "no A/A"
        add("inprocess", None, above, setting=f"launching thread's CPU time, per launch ({aa})")
    gate = results.get("startup", {}).get("gate", {}).get("variants", {})
    if gate:
        added = gate["site.addpackage(kname.pth)"]["added_ns"]
        add("gate", None, added / 1e6)
    startup = results.get("startup", {})
    if "on_over_bare_ns" in startup.get("python_c_pass", {}):
        # Measured only where the C hot path was in effect (the wheel built its extension).
        c_path = startup["imports_when_off"]["on"]["c_hot_path"]
        pc = startup["python_c_pass"]
        setting = (
            f"wheel in a fresh venv, median per round (A/A {ms(pc['a_a_ns'])}, "
            f"{ms(pc['cpu_a_a_ns'])} of CPU)"
        )
        add("startup_on", None, pc["on_over_bare_ns"] / 1e6, c_path, setting)
        add("startup_on_cpu", None, pc["cpu_on_over_bare_ns"] / 1e6, c_path, setting)
    ranks = results.get("ranks", {})
    if ranks.get("ranks") == 1024 and ranks.get("sites") == 5000:  # the budget's size only
        add("merge_s", None, ranks["merge_seconds"])
        add("merge_mb", None, ranks["peak_megabytes"])  # the merging process and its workers
    for run in results.get("gpu", []):
        if run.get("workload") in BUDGET and "variants" in run:
            v = run["variants"]
            share = 100 * v["kname"]["added_ns"] / v["bare"]["median_ns"]
            add(run["workload"], run["tool"], share, bool(run.get("site_names")))
    return rows


# ---------------------------------------------------------------- Markdown


def render(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# kname overhead benchmarks",
        "",
        f"- {m['date']}; mode {results['mode']}; suites {', '.join(results['suites'])}; "
        f"{results.get('seconds', '?')} s; batches timed by {CLOCK_LABELS[results['clock']]}",
        f"- Python {m['python']}, {m['platform']}; {m['cpu']}, {m['cpus']} logical CPUs; load "
        f"average {fmt_load(results['load_average_before'])} before, "
        f"{fmt_load(results['load_average_after'])} after",
        f"- {', '.join(f'{k} {v}' for k, v in m['packages'].items())}; git {m['git']}",
    ]
    lines += [f"- note: {n}" for n in results["notes"]]
    if results.get("gpu_skipped"):
        lines.append(f"- gpu suite skipped: {results['gpu_skipped']}")
    for title, key in (("Per launch (CPU)", "launch"), ("Per launch (GPU)", "gpu")):
        if results.get(key):
            lines += render_launches(title, results[key])
    if results.get("miss"):
        lines += render_misses(results["miss"])
    if results.get("startup"):
        lines += ["", "## Start-up", ""]
        startup = results["startup"]
        if "skipped" in startup:
            lines.append(f"skipped: {startup['skipped']}")
        elif "error" in startup:
            lines.append(f"error: {one_line(startup['error'])}")
        else:
            lines += render_startup(startup)
    if results.get("memory"):
        lines += render_memory(results["memory"])
    if results.get("ranks"):
        lines += render_ranks(results["ranks"])
    program = results.get("program")
    if program:
        lines.append("")
        if "markdown" in program:
            lines.append(program["markdown"].rstrip("\n"))
        else:
            why = program.get("skipped") or f"error: {one_line(program.get('error', '?'))}"
            lines += ["## kname profile on a whole program", "", f"skipped: {why}"]
    inprocess = results.get("inprocess")
    if inprocess:
        lines += ["", "## kname profile on a whole program, in one process", ""]
        if "phase_kname" in inprocess:
            import profile_inprocess

            lines.append(profile_inprocess.render(inprocess))
        else:
            why = inprocess.get("skipped") or f"error: {one_line(inprocess.get('error', '?'))}"
            lines.append(f"skipped: {why}")
    if results["budget"]:
        lines += ["", "## Budget", ""]
        lines += ["| item | setting | measured | budget | met |", "|---|---|---:|---:|:-:|"]
        for row in results["budget"]:
            mark = {True: "yes", False: "no", None: "not measured"}[row["ok"]]
            lines.append(
                f"| {row['item']} | {row['setting']} | {num(row['measured'])} {row['unit']} "
                f"| {num(row['budget'])} {row['unit']} | {mark} |"
            )
    return "\n".join(lines) + "\n"


def render_launches(title: str, runs: list[dict]) -> list[str]:
    lines = [
        "",
        f"## {title}",
        "",
        "Medians over interleaved rounds; added: median of the per-round differences to the "
        "bare launch [p25, p75]; ratio: median / bare median.",
        "",
        "| workload | NVTX tool | variant | ns/launch | added ns [p25, p75] | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for run in runs:
        label, tool = WORKLOAD_TEXT.get(run["workload"], run["workload"]), run["tool"]
        if "skipped" in run or "error" in run:
            why = run.get("skipped") or f"error: {one_line(run['error'])}"
            lines.append(f"| {label} | {tool} | {why} | | | |")
            continue
        for name in [n for n in VARIANTS if n in run["variants"]]:
            v = run["variants"][name]
            added = "—" if name == "bare" else added_range(v, num)
            lines.append(
                f"| {label} | {tool} | {VARIANT_TEXT[name]} | {num(v['median_ns'])} | {added} "
                f"| {v['ratio']:.2f} |"
            )
        where = f", {run['device']}" if run.get("device") else ""
        lines.append(
            f"| {label} | {tool} | *{run['rounds']} rounds × {run['batch']} launches{where}; "
            f"tool attached: {run['tool_attached']}; kname's hot path: "
            f"{run.get('hot_path', '?')}* | | | |"
        )
    return lines


def render_misses(misses: list[dict]) -> list[str]:
    lines = [
        "",
        "## First launch from a new line (cache miss)",
        "",
        "Freshly compiled functions, each launching once, alternately with kname.disable()d "
        "and through kname; both pay a new function's first-call costs. A new line in a file "
        "seen before, and a line of a new file (a module of its own each); miss_path.py.",
        "",
        "| NVTX tool | case | pairs | bare first call | kname first call | added "
        "| kname second call |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for miss in misses:
        for case in ("seen_file", "new_file"):
            row = miss.get(case)
            if row is None:
                continue
            lines.append(
                f"| {miss['tool']} | {case.replace('_', ' ')} | {row['pairs']} | "
                f"{us(row['bare_first_call_ns'])} | {us(row['kname_first_call_ns'])} | "
                f"{us(row['added_ns'])} | {us(row['kname_second_call_ns'])} |"
            )
    return lines


def render_startup(s: dict) -> list[str]:
    imports = s["imports_when_off"]
    pc = s["python_c_pass"]

    def imported(seen: dict) -> str:
        names = [name for name, yes in seen.items() if yes and name != "c_hot_path"]
        return ", ".join(names) or "none of them"

    on = imports["on"]
    lines = [
        f"Wheel {s['wheel']} in a fresh venv vs. the same venv without it. Of "
        f"{', '.join(k for k in on if k != 'c_hot_path')}, a start-up imported: switched off, "
        f"{imported(imports['off'])}; with KNAME=1 "
        f"({'C' if on['c_hot_path'] else 'pure-Python'} hot path), {imported(on)}; with "
        f"KNAME=1 KNAME_NATIVE=0, {imported(imports['on_python_path'])}. Switched on, added over "
        f"bare python (median per round): {ms(pc['on_over_bare_ns'])} by the wall clock, "
        f"{ms(pc['cpu_on_over_bare_ns'])} of CPU time (C hot path); "
        f"{ms(pc['python_path_over_bare_ns'])}, {ms(pc['cpu_python_path_over_bare_ns'])} of CPU "
        "time (pure-Python). Bare python against itself (A/A, the method's noise): "
        f"{ms(pc['a_a_ns'])}, {ms(pc['cpu_a_a_ns'])} of CPU time.",
        "",
        "| what | median | lower quartile | added vs. not installed [p25, p75] | runs |",
        "|---|---:|---:|---:|---:|",
    ]
    for clock, key in (("", "variants"), (": CPU time", "cpu_variants")):
        for name, v in pc[key].items():
            added = "—" if name == "not installed" else added_range(v, ms)
            what = f"`python -c pass`, {name}{clock}"
            lines.append(
                f"| {what} | {ms(v['median_ns'])} | {ms(v['p25_ns'])} | {added} | {pc['runs']} |"
            )
    for name, v in s["gate"]["variants"].items():
        if name != "loop only":
            runs = f"{v['rounds']}×100"
            lines.append(
                f"| .pth gate, off, in-process: {name} | {us(v['added_ns'])} | — | — | {runs} |"
            )
    f = s["finder"]
    for name, v in f["variants"].items():
        added = "—" if name == "not installed" else added_range(v, us)
        what = f"1 of {f['modules']} unrelated imports, {name}"
        lines.append(f"| {what} | {us(v['median_ns'])} | — | {added} | {f['runs']} |")
    lines.append(
        f"| kname on: its finder ({f['finder']}, sys.meta_path[{f['finder_position']}]) "
        f"declining one unrelated import | {us(f['find_spec_ns'])} | — | — | 100 000 calls |"
    )
    return lines


def render_memory(memory: dict) -> list[str]:
    lines = ["", "## Memory (many distinct call sites)", ""]
    if "error" in memory:
        return [*lines, f"error: {one_line(memory['error'])}"]
    return [
        *lines,
        "| call sites | cached (MAX_SITES) | NVTX names | tracemalloc current / peak "
        "| per cached site | max RSS growth |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {memory['call_sites_generated']} | {memory['sites_cached']} "
        f"({memory['max_sites']}) | {memory['nvtx_registered_names']} | "
        f"{memory['tracemalloc_current_bytes'] / 2**20:.1f} / "
        f"{memory['tracemalloc_peak_bytes'] / 2**20:.1f} MiB | "
        f"{memory['bytes_per_site']:.0f} B | {memory['max_rss_growth_kib'] / 1024:.1f} MiB |",
        "",
        "Largest allocating lines: "
        + "; ".join(f"{a['where']} {a['bytes'] / 2**20:.1f} MiB" for a in memory["top"][:6]),
    ]


def render_ranks(ranks: dict) -> list[str]:
    lines = ["", "## kname report across ranks (merging one profile per rank)", ""]
    if "error" in ranks:
        return [*lines, f"error: {one_line(ranks['error'])}"]
    return [
        *lines,
        "| rank files × call sites | JSON read | merge, wall | merge, CPU (all processes) "
        "| workers | peak memory, all processes (the merging one alone) | table |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| {ranks['ranks']} × {ranks['sites']} | {ranks['files_megabytes']:,.0f} MB "
        f"| {ranks['merge_seconds']:.1f} s | {ranks['merge_cpu_seconds']:.1f} s "
        f"| {ranks['workers']} | {ranks['peak_megabytes']} MB "
        f"({ranks['merging_process_peak_megabytes']} MB) | {ranks['table_seconds']:.2f} s |",
        "",
        "Wall clock on a shared host: the CPU time is the steadier figure "
        "(kname.documents.merge.merge_files, each file validated; then the table with the spread).",
    ]


def added_range(v: dict, fmt) -> str:
    return f"{fmt(v['added_ns'])} [{fmt(v['added_p25_ns'])}, {fmt(v['added_p75_ns'])}]"


def num(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def us(ns: float) -> str:
    return f"{ns / 1000:.2f} µs" if abs(ns) < 10_000 else f"{ns / 1000:.1f} µs"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def one_line(text: str) -> str:
    return " / ".join(text.strip().splitlines()[-3:]).replace("|", "\\|")


def fmt_load(load) -> str:
    return "?" if not load else "/".join(f"{x:.2f}" for x in load)


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
