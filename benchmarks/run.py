"""kname's overhead benchmarks: run everything this machine can, write results.json and results.md.

    python benchmarks/run.py [--quick] [--gpu] [--only SUITES] [--out DIR]

Suites: launch (no-op target: per-launch variants and the cache miss), sim (numba's CUDA
simulator), memory, startup, and gpu (only with --gpu, or when --only names it). Each launch
benchmark runs in its own interpreter per NVTX tool setting (none / the trivial null tool of
nvtx_null_tool.c), because NVTX picks its tool once per process. See benchmarks/README.md for
what each row means.
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
    TOOLS,
    build_null_tool,
    clean_env,
    machine,
    run_worker,
    tool_env,
    write_json,
)

SUITES = ("launch", "sim", "prototype", "memory", "startup", "gpu")

# (rounds, batch) per workload; (quick, full).
SETTINGS = {
    "noop": {"quick": (40, 500), "full": (200, 500)},
    "sim": {"quick": (15, 10), "full": (60, 20)},
    "gpu": {"quick": (40, 50), "full": (150, 100)},
    "miss_pairs": {"quick": 300, "full": 2000},
    "memory_sites": {"quick": 20_000, "full": 120_000},
}

VARIANT_TEXT = {
    "bare": "bare launch",
    "passthrough": "reference: plain pass-through closure",
    "kname": "kname on, cached call site",
    "kname_disabled": "kname installed, kname.disable()d",
    "annotate_per_call": "`with nvtx.annotate(name):` per launch",
    "annotate_prebuilt": "prebuilt `nvtx.annotate` object reused",
    "domain_push_pop": "`domain.push_range(attrs)`/`pop_range()`, prebuilt",
    "traceback_per_call": "`traceback.extract_stack()` name per launch",
    "step_layer": "step 1: pass-through layer `(*args, **kwargs)`",
    "step_flag": "step 2: + the switch check",
    "step_frame": "step 3: + `sys._getframe(1)`",
    "step_key": "step 4: + key `(id(f.f_code), f.f_lasti, kid)`, dict look-up",
    "step_count": "step 5: + `next(site.counter)`",
    "step_push": "step 6: + bound `domain.push_range(attrs)`/`pop_range()`",
    "lean": "prototype: lean Python closure (same work as kname)",
    "lean_args": "prototype: lean closure, `*args` only",
    "c_fastpath": "prototype: C fast path (same work as kname)",
    "c_fastpath_disabled": "prototype: C fast path, switched off",
    "triton_empty_hooks": "reference: do-nothing hooks in Triton's launch hook chains",
}
WORKLOAD_TEXT = {
    "noop": "no-op target (CPU)",
    "sim": "numba simulator `k[1, 1](a)`",
    "numba": "numba-cuda `k[1, 32](d)`",
    "cupy": "CuPy `RawKernel`",
    "triton": "Triton `k[(1,)](x, 32)`",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (under a minute)")
    parser.add_argument("--gpu", action="store_true", help="also run the GPU suite")
    parser.add_argument("--only", default="", help=f"comma list of suites among {SUITES}")
    parser.add_argument("--out", default=str(BENCH_DIR / "results"), help="output directory")
    args = parser.parse_args()
    suites = [s for s in SUITES if s != "gpu" or args.gpu]
    if args.only:
        wanted = {s.strip() for s in args.only.split(",") if s.strip()}
        unknown = wanted - set(SUITES)
        if unknown:
            parser.error(f"unknown suites {sorted(unknown)}; choose among {SUITES}")
        suites = [s for s in suites if s in wanted] + (["gpu"] if "gpu" in wanted else [])
        suites = list(dict.fromkeys(suites))
    mode = "quick" if args.quick else "full"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    results: dict = {
        "machine": machine(),
        "mode": mode,
        "suites": suites,
        "load_average_before": _load(),
        "notes": [],
    }
    try:
        tool_lib = build_null_tool(out / "build")
        results["tool"] = {"null": str(tool_lib)}
    except RuntimeError as exc:
        tool_lib = None
        results["notes"].append(f"NVTX null tool unavailable ({exc}); tool rows skipped")
    tools = [t for t in TOOLS if t == "none" or tool_lib is not None]

    workloads = [w for w, suite in (("noop", "launch"), ("sim", "sim")) if suite in suites]
    if workloads:
        results["launch"], results["miss"] = _launch_suite(workloads, mode, tools, tool_lib)
    if "prototype" in suites:
        results["prototype"] = []
        rounds, batch = SETTINGS["noop"][mode]
        for tool in tools:
            _say(f"prototype: hot-path variants, tool {tool!r}")
            argv = ["--rounds", str(min(rounds, 100)), "--batch", str(batch)]
            result = run_worker("prototype_hot_path.py", argv, clean_env(tool_env(tool, tool_lib)),
                                timeout=600)  # fmt: skip
            result.update(workload="noop", tool=tool)
            results["prototype"].append(result)
    if "memory" in suites:
        _say("memory: 'null' tool" if tool_lib else "memory: no tool")
        results["memory"] = run_worker(
            "memory.py",
            ["--sites", str(SETTINGS["memory_sites"][mode])],
            clean_env(tool_env("null" if tool_lib else "none", tool_lib)),
            timeout=600,
        )
    if "startup" in suites:
        _say("startup: building the wheel and two venvs")
        import startup

        try:
            results["startup"] = startup.run(mode == "quick", log=_say)
        except Exception as exc:  # one suite failing must not lose the others
            results["startup"] = {"error": f"{type(exc).__name__}: {exc}"}
    if "gpu" in suites:
        results["gpu"] = _gpu_suite(mode, tools, tool_lib)

    results["notes"] += sanity_notes(results)
    results["load_average_after"] = _load()
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["targets"] = targets(results)
    markdown = render(results)
    write_json(out / "results.json", results)
    (out / "results.md").write_text(markdown)
    print(markdown)
    _say(f"wrote {out / 'results.json'} and {out / 'results.md'} ({results['seconds']} s)")


def _launch_suite(workloads, mode: str, tools: list[str], tool_lib) -> tuple[list, list]:
    launches, misses = [], []
    for workload in workloads:
        rounds, batch = SETTINGS[workload][mode]
        for tool in tools:
            _say(f"launch: {workload}, tool {tool!r}")
            env = tool_env(tool, tool_lib)
            if workload == "sim":
                env["NUMBA_ENABLE_CUDASIM"] = "1"
            argv = ["--workload", workload, "--rounds", str(rounds), "--batch", str(batch)]
            if workload == "noop":
                argv += ["--miss-sites", str(SETTINGS["miss_pairs"][mode])]
            result = run_worker("launch_cpu.py", argv, clean_env(env), timeout=600)
            result.update(workload=workload, tool=tool)
            miss = result.pop("miss", None)
            launches.append(result)
            if miss is not None:
                misses.append({"tool": tool, **miss})
    return launches, misses


def _gpu_suite(mode: str, tools: list[str], tool_lib) -> list:
    rounds, batch = SETTINGS["gpu"][mode]
    runs = []
    for lib in ("numba", "cupy", "triton"):
        for tool in tools:
            _say(f"gpu: {lib}, tool {tool!r}")
            argv = ["--lib", lib, "--rounds", str(rounds), "--batch", str(batch)]
            env = clean_env({**tool_env(tool, tool_lib), "NUMBA_ENABLE_CUDASIM": None})
            result = run_worker("launch_gpu.py", argv, env, timeout=240)
            result.update(workload=lib, tool=tool)
            runs.append(result)
    return runs


# ---------------------------------------------------------------- targets


def _kname_named(run: dict) -> bool:
    """Whether the kname variant of a run named its launches (else it measured a broken path)."""
    return bool(run.get("site_names"))


def sanity_notes(results: dict) -> list[str]:
    """What a reader must know before trusting a row: worker errors and warnings, and kname
    variants that named nothing (a kname fault makes each launch run unnamed, and cheap or dear
    for the wrong reason)."""
    notes = []
    runs = [*results.get("launch", []), *results.get("gpu", []), *results.get("prototype", [])]
    for run in runs:
        where = f"{run.get('workload')}, tool {run.get('tool')}"
        if "error" in run:
            notes.append(f"{where}: {_one_line(run['error'])}")
            continue
        if "kname" in run.get("variants", {}) and not _kname_named(run):
            notes.append(f"{where}: the kname variant named no launch; its rows are not kname's")
        for proto, count in (run.get("prototype_sites") or {}).items():
            if not count:
                notes.append(f"{where}: prototype {proto} named no launch; its row is not valid")
        if run.get("stderr"):
            notes.append(f"{where}: worker said: {_one_line(run['stderr'])}")
    memory = results.get("memory", {})
    if memory.get("stderr"):
        notes.append(f"memory: worker said: {_one_line(memory['stderr'])}")
    if "sites_cached" in memory and memory["sites_cached"] == 0:
        notes.append("memory: kname cached no call site; the memory rows are not kname's")
    return notes


def targets(results: dict) -> list[dict]:
    """DESIGN.md's performance budget, each checked against what was measured here."""
    rows = []

    def add(target, setting, measured, budget, unit, ok, note=""):
        rows.append(
            {
                "target": target,
                "setting": setting,
                "measured": measured,
                "budget": budget,
                "unit": unit,
                "ok": ok,
                "note": note,
            }
        )

    for run in results.get("launch", []):
        if run.get("workload") != "noop" or "variants" not in run:
            continue
        v = run["variants"]
        tool = f"tool: {run['tool']}"
        named = _kname_named(run)
        note = "" if named else "kname named no launch: not measured"
        added = v["kname"]["added_ns"]
        add(
            "cached call site, no-op launch: added < 500 ns",
            tool,
            added,
            500,
            "ns",
            added < 500 if named else None,
            note,
        )
        added = v["kname_disabled"]["added_ns"]
        add(
            "kname.disable()d: added < 100 ns",
            tool,
            added,
            100,
            "ns",
            added < 100 if named else None,
            note,
        )
    for run in results.get("prototype", []):
        if "variants" not in run:
            continue
        v, tool = run["variants"], f"tool: {run['tool']}"
        for name, label, budget in (
            ("lean", "prototype lean closure: cached, added < 500 ns", 500),
            ("c_fastpath", "prototype C fast path: cached, added < 500 ns", 500),
            ("c_fastpath_disabled", "prototype C fast path: switched off, added < 100 ns", 100),
        ):
            if name in v:
                added = v[name]["added_ns"]
                add(label, tool, added, budget, "ns", added < budget)
    for miss in results.get("miss", []):
        if "added_ns" in miss:
            added, built = miss["added_ns"], miss["new_sites"] >= miss["pairs"]
            add(
                "first launch from a new call site: added < 50 µs",
                f"tool: {miss['tool']}",
                added / 1000,
                50,
                "µs",
                added < 50_000 if built else None,
                "" if built else f"only {miss['new_sites']} of {miss['pairs']} sites were built",
            )
    gate = results.get("startup", {}).get("gate", {}).get("variants", {})
    if gate:
        added = gate["site.addpackage(kname.pth)"]["added_ns"]
        add(
            ".pth gate, switched off: < 0.1 ms",
            "site.addpackage, in-process",
            added / 1e6,
            0.1,
            "ms",
            added < 100_000,
        )
    memory = results.get("memory", {})
    if "sites_cached" in memory and memory["call_sites_generated"] > memory["max_sites"]:
        add(
            "site cache stays bounded",
            f"{memory['call_sites_generated']} sites",
            memory["sites_cached"],
            memory["max_sites"],
            "sites",
            memory["within_bound"],
        )
    for run in results.get("gpu", []):
        share = {"numba": 3.0, "cupy": 10.0}.get(run.get("workload"))
        if share is None or "variants" not in run:
            continue
        name = f"{run['workload']} launch: added < {share:g}% of the launch"
        if "kname" not in run["variants"]:
            add(
                name,
                f"tool: {run['tool']}",
                None,
                share,
                "%",
                None,
                f"no '{run['workload']}' target in kname.targets.BUILTIN",
            )
            continue
        bare = run["variants"]["bare"]["median_ns"]
        for proto in ("lean", "c_fastpath"):
            if proto in run["variants"]:
                percent = 100 * run["variants"][proto]["added_ns"] / bare
                add(f"{name} (prototype {proto})", f"tool: {run['tool']}", percent, share, "%",
                    percent < share)  # fmt: skip
        percent = 100 * run["variants"]["kname"]["added_ns"] / bare
        named = _kname_named(run)
        add(
            name,
            f"tool: {run['tool']}",
            percent,
            share,
            "%",
            percent < share if named else None,
            "" if named else "kname named no launch: not measured",
        )
    return rows


# ---------------------------------------------------------------- Markdown


def render(results: dict) -> str:
    m = results["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    lines = [
        "# kname overhead benchmarks",
        "",
        f"- date: {m['date']}; mode: {results['mode']}; suites: {', '.join(results['suites'])};"
        f" total {results.get('seconds', '?')} s",
        f"- python {m['python']} ({m['implementation']}), {m['platform']}",
        f"- cpu: {m['cpu']}, {m['cpus']} logical cpus; load average before "
        f"{_fmt_load(results.get('load_average_before'))}, after "
        f"{_fmt_load(results.get('load_average_after'))}",
        f"- packages: {packages}",
        f"- git: {m['git']}",
    ]
    lines += [f"- note: {n}" for n in results.get("notes", [])]
    lines += [
        "",
        "## Targets (DESIGN.md, Performance budget)",
        "",
        "| target | setting | measured | budget | met |",
        "|---|---|---:|---:|:-:|",
    ]
    for t in results.get("targets", []):
        measured = "n/a" if t["measured"] is None else f"{_num(t['measured'])} {t['unit']}"
        mark = {True: "✓", False: "✗", None: "–"}[t["ok"]]
        note = f" ({t['note']})" if t["note"] else ""
        lines.append(
            f"| {t['target']} | {t['setting']}{note} | {measured} | "
            f"{_num(t['budget'])} {t['unit']} | {mark} |"
        )

    sections = (
        ("Per launch (CPU)", "launch"),
        ("Per launch (GPU)", "gpu"),
        ("Hot-path prototypes (benchmarks/prototype_hot_path.py, not kname; no-op target)",
         "prototype"),
    )  # fmt: skip
    for title, key in sections:
        runs = results.get(key)
        if not runs:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "ns per launch: median over interleaved rounds; added: median of per-round "
            "differences to the bare launch [p25, p75]; ratio: median / bare median.",
            "",
            "| workload | NVTX tool | variant | ns/launch | added ns [p25, p75] | ratio |",
            "|---|---|---|---:|---:|---:|",
        ]
        for run in runs:
            label = WORKLOAD_TEXT.get(run.get("workload"), run.get("workload"))
            if "error" in run:
                lines.append(
                    f"| {label} | {run['tool']} | error: {_one_line(run['error'])} | | | |"
                )
                continue
            for name, v in run["variants"].items():
                added = "—" if name == "bare" else _added(v, _num)
                lines.append(
                    f"| {label} | {run['tool']} | {VARIANT_TEXT.get(name, name)} | "
                    f"{_num(v['median_ns'])} | {added} | {v['ratio']:.3f} |"
                )
            settings = (
                f"{run['rounds']} rounds × {run['batch']} launches, stack depth "
                f"{run['stack_depth']}, tool attached: {run['tool_attached']}"
            )
            if key == "gpu" and not run.get("kname_measured"):
                settings += "; kname rows absent: no built-in target for this library"
            lines.append(f"| {label} | {run['tool']} | *({settings})* | | | |")

    misses = results.get("miss")
    if misses:
        lines += [
            "",
            "## First launch from a new call site (cache miss)",
            "",
            "Each of N freshly compiled functions launches once (bare and kname "
            "alternating); both pay a new function's first-call costs.",
            "",
            "| NVTX tool | sites | bare first call | kname first call | added (median) "
            "| added (p90) | kname second call |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for miss in misses:
            if "added_ns" not in miss:
                continue
            bare, first = miss["bare_first_call"], miss["kname_first_call"]
            lines.append(
                f"| {miss['tool']} | {miss['pairs']} | {_us(bare['median_ns'])} | "
                f"{_us(first['median_ns'])} | {_us(miss['added_ns'])} | "
                f"{_us(miss['added_p90_ns'])} | {_us(miss['kname_second_call']['median_ns'])} |"
            )

    startup = results.get("startup")
    if startup:
        lines += ["", "## Start-up", ""]
        if "error" in startup:
            lines.append(f"error: {_one_line(startup['error'])}")
        else:
            lines += _render_startup(startup)

    memory = results.get("memory")
    if memory:
        lines += ["", "## Memory (many distinct call sites, NVTX tool attached)", ""]
        if "error" in memory:
            lines.append(f"error: {_one_line(memory['error'])}")
        else:
            lines += [
                "| call sites generated | len(callsite.sites) | MAX_SITES | NVTX names "
                "registered | tracemalloc current / peak | per cached site | max RSS growth |",
                "|---:|---:|---:|---:|---:|---:|---:|",
                f"| {memory['call_sites_generated']} | {memory['sites_cached']} | "
                f"{memory['max_sites']} | {memory['nvtx_registered_names']} | "
                f"{memory['tracemalloc_current_bytes'] / 2**20:.1f} / "
                f"{memory['tracemalloc_peak_bytes'] / 2**20:.1f} MiB | "
                f"{memory['bytes_per_site']:.0f} B | "
                f"{memory['max_rss_growth_kib'] / 1024:.1f} MiB |",
                "",
                "Largest allocating lines (tracemalloc): "
                + "; ".join(
                    f"{a['where']} {a['bytes'] / 2**20:.1f} MiB"
                    for a in memory.get("top_allocations", [])[:6]
                ),
            ]
    return "\n".join(lines) + "\n"


def _render_startup(s: dict) -> list[str]:
    off = s["imports_when_off"]["off"]
    lines = [
        f"Wheel {s['wheel']} in a fresh venv vs. the same venv without it. Switched off, start-up "
        f"imported kname: {off['kname']}, wrapt: {off['wrapt']}.",
        "",
        "| what | median | added vs. not installed [p25, p75] | runs |",
        "|---|---:|---:|---:|",
    ]
    pc = s["python_c_pass"]
    for name, v in pc["variants"].items():
        added = "—" if name == "not installed" else _added(v, _ms)
        lines.append(
            f"| `python -c pass`, {name} | {_ms(v['median_ns'])} | {added} | {pc['runs']} |"
        )
    for name, v in s["gate"]["variants"].items():
        if name == "loop only":
            continue
        lines.append(
            f"| .pth gate, switched off, in-process: {name} | {_us(v['added_ns'])} | "
            f"— | {v['rounds']}×100 |"
        )
    f = s["finder"]
    for name, v in f["variants"].items():
        added = "—" if name == "not installed" else _added(v, _us)
        lines.append(
            f"| 1 of {f['modules']} unrelated imports, {name} | {_us(v['median_ns'])} | "
            f"{added} | {f['runs']} |"
        )
    if "find_spec_ns" in f:
        lines.append(
            f"| kname on: its finder (`{f['finder']}`, sys.meta_path[{f['finder_position']}]) "
            f"declining one unrelated import, in-process | {_us(f['find_spec_ns'])} | — | "
            "100 000 calls |"
        )
    return lines


def _added(v: dict, fmt) -> str:
    return f"{fmt(v['added_ns'])} [{fmt(v['added_p25_ns'])}, {fmt(v['added_p75_ns'])}]"


def _num(x) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _us(ns) -> str:
    return f"{ns / 1000:.2f} µs" if abs(ns) < 10_000 else f"{ns / 1000:.1f} µs"


def _ms(ns) -> str:
    return f"{ns / 1e6:.2f} ms"


def _one_line(text: str) -> str:
    return " / ".join(text.strip().splitlines()[-3:]).replace("|", "\\|")


def _load():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _fmt_load(load) -> str:
    return "?" if not load else "/".join(f"{x:.2f}" for x in load)


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
