"""The `kname` command: `kname run`, `kname doctor`, `kname report` (also `python -m kname`)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import TYPE_CHECKING, NoReturn

from kname._version import __version__

if TYPE_CHECKING:
    from kname.config import Config

EXAMPLES = """\
examples:
  kname run -- python app.py              run app.py with every launch named
  kname run --report census.json -- python app.py
                                          ... and save the launch census as JSON
  kname run --skip mypkg.launch -- python -m mypkg.train
  python -m kname app.py                  the same as: kname run -- python app.py
  KNAME=1 python app.py                   what `kname run` does, by hand
  kname doctor                            why do names not appear?
  kname report census.json                the saved census as a table
  kname report old.json --diff new.json   launches per call site that changed
"""

DOCTOR_EXAMPLES = """\
examples:
  kname doctor                            check this environment
  KNAME=1 kname doctor                    ... with the switch on, as your program would run
  nsys profile kname doctor               ... under a profiler, with its NVTX tool attached

Each line starts with ✓ (fine), ✗ (a reason names will not appear, and what to do) or
– (for your information). The exit status is 1 if any line is ✗, else 0.
"""

REPORT_EXAMPLES = """\
examples:
  kname run --report census.json -- python app.py    save a census (or KNAME_REPORT=census.json)
  kname report census.json                           print it as a table
  kname report before.json --diff after.json         launches per call site: added, removed,
                                                     changed (with the difference)
  kname report before.json --diff after.json --fail-on-change
                                                     ... and exit 1 if anything changed (CI)

Errors (a missing file, bad JSON, not a census of schema 1) are one line on stderr and exit 2.
"""

COMMANDS = ("run", "doctor", "report")

# `kname run` option -> the environment variable it sets.
RUN_OPTIONS = {
    "targets": "KNAME_TARGETS",
    "skip": "KNAME_SKIP",
    "format": "KNAME_FORMAT",
    "depth": "KNAME_DEPTH",
    "mode": "KNAME_MODE",
    "report": "KNAME_REPORT",
    "domain": "KNAME_DOMAIN",
}

OK, PROBLEM, NOTE = "✓", "✗", "–"
NVTX_INJECTION_VARIABLES = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")
DEPENDENCIES = (("wrapt", "wrapt"), ("nvtx", "nvtx"))  # (import name, distribution)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    from kname.report import cancel_at_exit

    # With KNAME=1 and KNAME_REPORT set in the shell, this very process started kname too: it
    # must not overwrite the user's census with its own empty one at exit.
    cancel_at_exit()
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] not in COMMANDS and not args[0].startswith("-"):
        # `python -m kname app.py ...`: run a script with the current interpreter.
        args = ["run", "--", sys.executable, *args]
    parser = _parser()
    options = parser.parse_args(args)
    if options.command is None:
        parser.print_help()
        return 0
    try:
        return options.handler(options, parser)
    except BrokenPipeError:
        # `kname report big.json | head`: the reader left; say nothing more, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kname",
        description="Name every GPU kernel launch after the line of Python that caused it.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kname {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a program with kname switched on (sets KNAME=1 and the options below)",
        description="Run a program with kname switched on; its exit code is passed through.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option, variable in RUN_OPTIONS.items():
        run.add_argument(f"--{option}", metavar="VALUE", help=f"sets {variable}")
    run.add_argument("program", nargs=argparse.REMAINDER, help="the command, after --")
    run.set_defaults(handler=_run)
    doctor = commands.add_parser(
        "doctor",
        help="check this environment: start-up gate, switch, libraries, NVTX tool, settings",
        description="Check what kname needs for names to appear, and say what to do about it.",
        epilog=DOCTOR_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.set_defaults(handler=_doctor)
    report = commands.add_parser(
        "report",
        help="print a saved launch census, or compare two",
        description="Print a launch census saved as JSON (KNAME_REPORT=FILE.json or "
        "kname run --report FILE.json), or compare it with another.",
        epilog=REPORT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("file", metavar="FILE.json", help="a saved census")
    report.add_argument(
        "--diff", metavar="OTHER.json", help="compare FILE.json (before) with OTHER.json (after)"
    )
    report.add_argument(
        "--fail-on-change",
        action="store_true",
        help="with --diff: exit 1 if any call site's launch count changed",
    )
    report.set_defaults(handler=_report)
    return parser


def _run(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        return _usage_error("kname run: needs a command, e.g. kname run -- python app.py")
    executable = shutil.which(program[0])
    if executable is None:
        return _usage_error(f"kname run: command not found: {program[0]}")
    environ = dict(os.environ, KNAME="1")
    for option, variable in RUN_OPTIONS.items():
        value = getattr(options, option)
        if value is not None:
            environ[variable] = value
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, program, environ)
    return 0  # not reached: execve replaces this process


def _report(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from kname.report import CensusError, compare, load, render_diff, render_table

    if options.fail_on_change and options.diff is None:
        return _usage_error("kname report: --fail-on-change needs --diff OTHER.json")
    try:
        before = load(options.file)
        after = None if options.diff is None else load(options.diff)
    except CensusError as exc:
        return _usage_error(f"kname report: {exc}")
    if after is None:
        sys.stdout.write(render_table(before, source=options.file))
        return 0
    sys.stdout.write(render_diff(before, after, (options.file, options.diff)))
    return 1 if options.fail_on_change and compare(before, after) else 0


def _usage_error(message: str) -> int:
    """Say `message` (which starts with the command, e.g. `kname run: ...`) on one line; exit 2."""
    print(message, file=sys.stderr)
    return 2


# --- kname doctor ---------------------------------------------------------------------------
# Every check returns (mark, text) lines. None imports a GPU library: find_spec locates a
# top-level package without running it, and versions come from installed metadata.


def _doctor(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config, config_lines = _check_configuration()
    lines = [
        *_check_kname(),
        *_check_gate(),
        *_check_switch(),
        *_check_dependencies(),
        *_check_targets(config),
        *_check_nvtx_tool(config),
        *config_lines,
    ]
    print(f"kname doctor: kname {__version__}, Python {sys.version.split()[0]} ({sys.executable})")
    for mark, text in lines:
        print(f"{mark} {text}" if mark else text)
    return 1 if any(mark == PROBLEM for mark, _ in lines) else 0


def _check_kname() -> list[tuple[str, str]]:
    import kname

    return [(OK, f"kname {__version__} is imported from {os.path.dirname(kname.__file__)}")]


def _site_directories() -> list[tuple[str, bool]]:
    """(directory, whether Python reads .pth files there) for each site directory."""
    import site

    directories = [(d, True) for d in site.getsitepackages()]
    directories.append((site.getusersitepackages(), bool(site.ENABLE_USER_SITE)))
    return directories


def _check_gate() -> list[tuple[str, str]]:
    lines = []
    for directory, read in _site_directories():
        path = os.path.join(directory, "kname.pth")
        if not os.path.isfile(path):
            continue
        if not _mentions(path, "kname._startup"):
            problem = f"{path} is not kname's start-up gate (edited?): reinstall kname"
            lines.append((PROBLEM, problem + " (pip install --force-reinstall kname)"))
        elif not read:
            problem = (
                f"start-up gate {path} is in the user site directory, which this Python does "
                "not read (a venv, or python -s): install kname into this environment"
            )
            lines.append((PROBLEM, problem))
        else:
            lines.append((OK, f"start-up gate: {path}"))
    sitecustomize = _find_origin("sitecustomize")
    if sitecustomize and _mentions(sitecustomize, "kname"):
        lines.append((OK, f"start-up gate: {sitecustomize} (a sitecustomize that starts kname)"))
    if not any(mark == OK for mark, _ in lines):
        searched = ", ".join(directory for directory, _ in _site_directories())
        problem = (
            f"no start-up gate: kname.pth is in none of {searched}, so KNAME=1 and -X kname do "
            "nothing here. Install kname's wheel (pip install kname; an editable install has no "
            "kname.pth), or use a sitecustomize.py (see sitecustomize_example/)"
        )
        lines.append((PROBLEM, problem))
    return lines


def _check_switch() -> list[tuple[str, str]]:
    from kname.config import parse_switch, switch_problem

    xoption = sys._xoptions.get("kname")
    if xoption is not None:
        source, value = "-X kname", "1" if xoption is True else str(xoption)
    else:
        source, value = "KNAME", os.environ.get("KNAME")
    state = parse_switch(value)
    if state is None:
        return [(PROBLEM, f"switch: {switch_problem(source, str(value))}")]
    if not state:
        shown = "KNAME is not set" if value is None else f"KNAME={value!r}"
        advice = "set KNAME=1, or run python -X kname app.py, or kname run -- python app.py"
        return [(PROBLEM, f"switch: off ({shown}): {advice}")]
    setting = f"{source}={value!r}" if source == "KNAME" else source
    if getattr(sys, "_kname_started", False):
        return [(OK, f"switch: on ({setting}); kname started in this process")]
    problem = (
        f"switch: on ({setting}), but kname did not start in this process: the start-up gate "
        "above is missing or was not read"
    )
    return [(PROBLEM, problem)]


def _check_dependencies() -> list[tuple[str, str]]:
    found, lines = [], []
    for module, distribution in DEPENDENCIES:
        if _find_origin(module) is None:
            lines.append((PROBLEM, f"{module} is not importable: pip install {distribution}"))
        else:
            found.append(f"{distribution} {_version(distribution)}")
    if found:
        lines.insert(0, (OK, "dependencies: " + ", ".join(found)))
    return lines


def _check_targets(config: Config) -> list[tuple[str, str]]:
    from kname.targets import BUILTIN, builtin_targets

    distributions = _distributions_by_package()
    chosen = BUILTIN if config.targets is None else config.targets
    lines, importable = [], 0
    for name in chosen:
        try:
            modules = (
                [t.module for t in builtin_targets(name)]
                if name in BUILTIN
                else [name.split(":", 1)[0]]
            )
        except Exception as exc:
            lines.append((PROBLEM, f"target {name}: its definition failed to load ({exc})"))
            continue
        packages = list(dict.fromkeys(module.split(".", 1)[0] for module in modules))
        missing = [p for p in packages if _find_origin(p) is None]
        if missing:
            if name in BUILTIN:
                note = f"target {name}: {', '.join(missing)} not installed (nothing to name)"
                lines.append((NOTE, note))
            else:
                problem = f"target {name} (KNAME_TARGETS): {missing[0]!r} is not importable here"
                lines.append((PROBLEM, problem))
            continue
        importable += 1
        related = [d for p in packages for d in _related_distributions(p, distributions)]
        versions = [f"{d} {_version(d)}" for d in dict.fromkeys(related)]
        lines.append((OK, f"target {name}: {', '.join(versions) or ', '.join(packages)}"))
    if not importable:
        problem = (
            "no target's library is importable, so there is nothing to name: install one "
            '(pip install "kname[auto]" brings numba-cuda) or set KNAME_TARGETS=module:function '
            "for your own launcher"
        )
        lines.append((PROBLEM, problem))
    return lines


def _check_nvtx_tool(config: Config) -> list[tuple[str, str]]:
    attached = [(v, os.environ[v]) for v in NVTX_INJECTION_VARIABLES if os.environ.get(v)]
    if config.mode == "census":
        return [(NOTE, "NVTX tool: not needed (KNAME_MODE=census counts launches, no ranges)")]
    if not attached:
        note = (
            "NVTX tool: none attached (NVTX_INJECTION64_PATH is not set), as is normal outside a "
            "profiler: nsys profile and ncu --nvtx attach theirs, and only then do ranges appear"
        )
        return [(NOTE, note)]
    lines = []
    for variable, path in attached:
        if os.path.isfile(path):
            lines.append((OK, f"NVTX tool attached: {variable}={path}"))
        else:
            problem = f"{variable}={path} names no file: NVTX ignores it; unset it or fix it"
            lines.append((PROBLEM, problem))
    return lines


def _check_configuration() -> tuple[Config, list[tuple[str, str]]]:
    """The effective Config and its lines: each bad value, then the settings in effect."""
    from kname.config import ConfigError, read_config
    from kname.targets import BUILTIN

    try:
        config = read_config(builtin_targets=tuple(BUILTIN))
        strict = ""
    except ConfigError:
        # KNAME_STRICT=1 stops at the first problem; list them all.
        config = read_config({**os.environ, "KNAME_STRICT": "0"}, builtin_targets=tuple(BUILTIN))
        strict = " (KNAME_STRICT is on: the program would stop here)"
    lines = [(PROBLEM, problem + strict) for problem in config.problems]
    lines.extend(_check_report_destination(config.report))
    clean = not any(mark == PROBLEM for mark, _ in lines)
    lines.append((OK if clean else NOTE, "configuration in effect:"))
    every_target = f"{', '.join(BUILTIN)} (every built-in target)"
    settings = {
        "KNAME_TARGETS": every_target if config.targets is None else ",".join(config.targets),
        "KNAME_SKIP": ",".join(config.skip) or "(none)",
        "KNAME_FORMAT": repr(config.format),
        "KNAME_DEPTH": str(config.depth),
        "KNAME_MODE": config.mode,
        "KNAME_REPORT": {None: "(none)", "-": "- (stderr)"}.get(config.report, config.report),
        "KNAME_DOMAIN": config.domain,
        "KNAME_STRICT": "on" if config.strict or strict else "off",
    }
    lines.extend(("", f"    {variable:<14} {value}") for variable, value in settings.items())
    return config, lines


def _check_report_destination(destination: str | None) -> list[tuple[str, str]]:
    if destination in (None, "-"):
        return []
    directory = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(directory):
        problem = f"its directory {directory} does not exist"
    elif not os.access(directory, os.W_OK):
        problem = f"its directory {directory} is not writable"
    elif os.path.isdir(destination):
        problem = "it is a directory"
    else:
        return []
    problem = f"KNAME_REPORT={destination!r}: {problem}, so the census cannot be written at exit"
    return [(PROBLEM, problem + "; choose another path")]


def _find_origin(module: str) -> str | None:
    """Where top-level `module` would be imported from (without importing it), or None."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or next(iter(spec.submodule_search_locations or []), None) or module


def _distributions_by_package() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    try:
        return packages_distributions()
    except Exception:  # broken metadata of some unrelated package: versions are a nicety
        return {}


def _related_distributions(package: str, distributions: dict[str, list[str]]) -> list[str]:
    """Distributions providing `package` or a sibling named like it (numba -> numba_cuda)."""
    names = [
        d
        for top, provided in sorted(distributions.items())
        if top == package or top.startswith(package + "_")
        for d in provided
    ]
    return list(dict.fromkeys(names))


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "(version unknown)"


def _mentions(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return text in file.read()
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
