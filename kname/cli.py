"""The `kname` command: `kname run | profile | attach | doctor | report` (or `python -m kname`)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from typing import NoReturn

from kname import doctor, importable
from kname._version import __version__
from kname.config import (
    KNAME_DEPTH,
    KNAME_DOMAIN,
    KNAME_FORMAT,
    KNAME_MODE,
    KNAME_PROFILE_BACKWARD,
    KNAME_PROFILE_DELAY,
    KNAME_PROFILE_DURATION,
    KNAME_PROFILE_FLUSH,
    KNAME_PROFILE_HTML,
    KNAME_PROFILE_MEMORY,
    KNAME_PROFILE_TOP,
    KNAME_PROFILE_TRACE,
    KNAME_PROFILE_VERDICT,
    KNAME_RANKS,
    KNAME_REPORT,
    KNAME_SKIP,
    KNAME_STRICT,
    KNAME_TARGETS,
)
from kname.documents import report as report_command
from kname.documents.text import stdout_to_devnull

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


COMMANDS = ("run", "profile", "attach", "doctor", "report")

# `kname run` option -> the environment variable it sets.
RUN_OPTIONS = {
    "targets": KNAME_TARGETS,
    "skip": KNAME_SKIP,
    "format": KNAME_FORMAT,
    "depth": KNAME_DEPTH,
    "mode": KNAME_MODE,
    "report": KNAME_REPORT,
    "domain": KNAME_DOMAIN,
}


# Every option of `kname run` (those above take a value).
RUN_FLAGS = (*(f"--{option}" for option in RUN_OPTIONS), "--show-ranges", "--strict")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    from kname.census import cancel_at_exit

    # With KNAME=1 and KNAME_REPORT set in the shell, this very process started kname too: it
    # must not overwrite the user's census (or, in profile mode, profile) with its own empty one.
    cancel_at_exit()
    profile_mode = sys.modules.get("kname.profiling.mode")  # imported only if it started here
    if profile_mode is not None:
        profile_mode.cancel()
    lifecycle = sys.modules.get("kname.lifecycle")  # nor its check of targets that never came
    if lifecycle is not None:
        lifecycle.cancel_exit_check()
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0].split("=", 1)[0] in RUN_FLAGS:
        return _usage_error(_run_option_first(args))
    if args and args[0] not in COMMANDS and not args[0].startswith("-"):
        meant = _command_meant(args[0])
        if meant:
            return _usage_error(
                f"kname: unknown command {args[0]!r}; did you mean {meant!r}? (commands: "
                f"{', '.join(COMMANDS)})"
            )
        # `python -m kname app.py ...`: run a script with the current interpreter.
        args = ["run", "--", sys.executable, *args]
    parser = _parser()
    options = parser.parse_args(args)
    if options.command is None:
        # A command is needed: the help, where a usage error goes, and argparse's code for one.
        parser.print_help(sys.stderr)
        return 2
    try:
        return options.handler(options, parser)
    except BrokenPipeError:
        # `kname doctor | head`: the reader left before the command ended; say nothing more,
        # and exit 1 as Python advises, never a success the command did not reach. (`kname
        # report` prints last and keeps its own exit code: documents/report.py.)
        stdout_to_devnull()
        return 1


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
        help="run a program with kname switched on (sets KNAME=1, and a KNAME_* variable per "
        "option: kname run --help)",
        description="Run a program with kname switched on; its exit code is passed through.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_options(run)
    run.add_argument("program", nargs=argparse.REMAINDER, help="the command, after --")
    run.set_defaults(handler=_run)
    _add_profile_command(commands)
    _add_attach_command(commands)
    doctor_command = commands.add_parser(
        "doctor",
        help="check this environment: start-up gate, switch, libraries, NVTX tool, settings",
        description="Check what kname needs for names to appear, and say what to do about it.",
        epilog=doctor.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor_command.add_argument(
        "--profile-check",
        action="store_true",
        help="also profile one tiny kernel on the GPU: do CUPTI's records arrive?",
    )
    doctor_command.set_defaults(
        handler=lambda options, parser: doctor.main(profile_check=options.profile_check)
    )
    _add_report_command(commands)
    return parser


def _run_option_first(args: list[str]) -> str:
    """What `kname --skip x app.py` (or `python -m kname ...`) meant: `kname run` with these
    options, then the program, run by Python as `python -m kname app.py` runs it."""
    options, rest = [], list(args)
    while rest and rest[0].split("=", 1)[0] in RUN_FLAGS:
        option = rest.pop(0)
        options.append(option)
        if option[2:] in RUN_OPTIONS and rest:  # --skip x (not --skip=x, nor a flag)
            options.append(rest.pop(0))
    program = rest[1:] if rest[:1] == ["--"] else rest
    command = shlex.join(["kname", "run", *options, "--", "python", *(program or ["app.py"])])
    option = args[0].split("=", 1)[0]
    return f"kname: {option} is an option of kname run, after the word run: {command}"


def _command_meant(word: str) -> str | None:
    """The command `word` is a typo of: not a file that exists, and much like a command."""
    import difflib

    if os.path.exists(word):
        return None
    return next(iter(difflib.get_close_matches(word, COMMANDS, 1, 0.6)), None)


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """`kname run`'s options, one per KNAME_* variable, each with its accepted values."""
    from kname.config import DEFAULT_DOMAIN, DEFAULT_FORMAT, FORMAT_FIELDS, MAX_DEPTH, MODES
    from kname.targets import BUILTIN

    fields = " ".join("{" + name + "}" for name in FORMAT_FIELDS)
    options = {
        "targets": ("LIST", f"a comma list of built-in targets ({', '.join(BUILTIN)}) and "
                    "module:qualname callables of your own; default: every built-in target"),
        "skip": ("MODULES", "a comma list of module prefixes whose frames are never a call "
                 "site (your launch helpers), e.g. mypkg.launchers"),
        "format": ("TEMPLATE", f"a name template of the fields {fields}; default "
                   f"{DEFAULT_FORMAT!r}"),
        "depth": ("N", f"user frames in a name, 1 to {MAX_DEPTH}; default 1"),
        "mode": ("MODE", f"{MODES[0]} (default), {', '.join(MODES[1:-1])} or {MODES[-1]}"),
        "report": ("FILE", "- (the census table on stderr at exit) or FILE.json (the census as "
                   "JSON; processes beneath write FILE.pidN.json beside it)"),
        "domain": ("NAME", f"the NVTX domain of kname's ranges; default {DEFAULT_DOMAIN}"),
    }  # fmt: skip
    for option, (metavar, accepted) in options.items():
        extra: dict = {}
        if option == "mode":
            extra = {"type": str.lower, "choices": MODES}
        elif option == "targets":
            extra = {"type": _targets}
        elif option == "depth":
            extra = {"type": _depth}
        help = f"sets {RUN_OPTIONS[option]}: {accepted}"
        run.add_argument(f"--{option}", metavar=metavar, help=help, **extra)
    run.add_argument(
        "--show-ranges",
        action="store_true",
        help="attach kname's own small NVTX tool and print, at the end, the NVTX ranges the "
        "program really emitted (domain, name, count): a check of the setup without Nsight. "
        "Built once with the C compiler; not under a profiler, which attaches its own tool",
    )
    run.add_argument(
        "--strict",
        action="store_true",
        help="sets KNAME_STRICT=1: a bad KNAME_* value, a KNAME_TARGETS entry that cannot be "
        "wrapped, or a census that cannot be written stops the program (exit status 2)",
    )


def _targets(text: str) -> str:
    """--targets: refused up front, as --mode is, where an entry is neither a built-in target
    nor module:qualname (whose module is only looked for when the program runs)."""
    from kname.config import read_config
    from kname.targets import BUILTIN

    for entry in (e.strip() for e in text.split(",")):
        if read_config({KNAME_TARGETS: entry}, builtin_targets=BUILTIN).problems:
            meant = importable.nearest_name(entry, lambda parent: () if parent else BUILTIN)
            hint = f"; did you mean {meant}?" if meant else ""
            raise argparse.ArgumentTypeError(
                f"{entry!r} is neither a built-in target ({', '.join(BUILTIN)}) nor "
                f"module:qualname{hint}"
            )
    return text


def _depth(text: str) -> str:
    from kname.config import MAX_DEPTH

    if text.isascii() and text.isdigit() and len(text) <= 9 and 1 <= int(text) <= MAX_DEPTH:
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {MAX_DEPTH}")


def _run(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        return _usage_error("kname run: needs a command, e.g. kname run -- python app.py")
    executable = shutil.which(program[0])
    if executable is None:
        return _usage_error(_not_found(options.command, program[0]))
    environ = dict(os.environ, KNAME="1")
    for option, variable in RUN_OPTIONS.items():
        value = getattr(options, option)
        if value is not None:
            environ[variable] = value
    # kname profile runs through here too, without --strict and --show-ranges.
    if getattr(options, "strict", False):
        environ[KNAME_STRICT] = "1"
    environ["PYTHONPATH"] = _with_bootstrap(environ.get("PYTHONPATH", ""))
    if getattr(options, "show_ranges", False):
        return _run_showing_ranges(executable, program, environ)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, program, environ)
    return 0  # not reached: execve replaces this process


def _run_showing_ranges(executable: str, program: list[str], environ: dict[str, str]) -> int:
    from kname import show_ranges

    if environ.get(show_ranges.INJECTION_VARIABLE):
        return _usage_error(
            f"kname run --show-ranges: {show_ranges.INJECTION_VARIABLE} is already set (a "
            "profiler's NVTX tool?); --show-ranges attaches its own: unset it, or leave "
            "--show-ranges out under a profiler"
        )
    try:
        return show_ranges.main(executable, program, environ)
    except show_ranges.ViewerUnavailable as exc:  # said before the program runs
        return _usage_error(f"kname run --show-ranges: {exc}")


def _not_found(command: str, word: str) -> str:
    """`kname run: command not found: WORD`, with what was likely meant: a Python script run
    without `python`, or a program in this folder without `./`."""
    quoted = shlex.quote(word)
    if word.endswith(".py") or (os.path.isfile(word) and not os.access(word, os.X_OK)):
        meant = f"kname {command} python {quoted}"
    elif os.path.isfile(word) and os.sep not in word:
        meant = f"kname {command} ./{quoted}"  # executable, but not on PATH
    else:
        return f"kname {command}: command not found: {word}"
    return f"kname {command}: command not found: {word}; did you mean `{meant}`?"


def _with_bootstrap(pythonpath: str) -> str:
    """PYTHONPATH with kname's start-up folder first: every Python the program starts imports
    its sitecustomize, which starts kname where no kname.pth is read (an editable install)."""
    bootstrap = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")
    entries = [bootstrap, *(p for p in pythonpath.split(os.pathsep) if p and p != bootstrap)]
    return os.pathsep.join(entries)


PROFILE_EXAMPLES = """\
examples:
  kname profile -- python app.py          GPU time per call site, a table at exit (on stderr)
  kname profile --json profile.json --html profile.html -- python app.py
                                          ... and the profile as JSON and as a web page
  kname profile --trace trace.json -- python app.py
                                          ... and a timeline for Perfetto or chrome://tracing
  kname report profile.json               the saved profile as a table
  kname report old.json --diff new.json --fail-on-slower 10%
                                          exit 1 if a call site got 10% slower (CI)

jobs of several processes (each rank writes its own file: profile.rank0.json, ...):
  kname profile --json profile.json -- torchrun --nproc-per-node 8 train.py
  kname profile --json profile.json -- mpirun -n 4 python app.py
  srun -n 16 kname profile --json profile.json -- python app.py
  kname profile --json 'out/{host}/p.{rank}.json' --ranks 0-3 -- torchrun ...
                                          placeholders {rank} {host} {pid}; only ranks 0 to 3
  kname report profile.rank*.json --straggler 20%
                                          every rank's GPU time per line, the slowest flagged
  kname profile --json p.json --flush-every 60 --delay 300 --duration 600 -- python train.py
                                          minutes 5 to 15 of a long run, saved every minute

It needs the CUPTI binding (pip install 'kname[profile]') and no profiler of its own: under
Nsight, which holds CUPTI, one line says so and launches are still named. The same without the
command: KNAME=1 KNAME_MODE=profile KNAME_REPORT=profile.json python app.py.
"""

# `kname profile` option -> the environment variable it sets (besides KNAME_MODE=profile).
PROFILE_OPTIONS = {
    "json": KNAME_REPORT,
    "trace": KNAME_PROFILE_TRACE,
    "html": KNAME_PROFILE_HTML,
    "top": KNAME_PROFILE_TOP,
    "flush_every": KNAME_PROFILE_FLUSH,
    "delay": KNAME_PROFILE_DELAY,
    "duration": KNAME_PROFILE_DURATION,
    "ranks": KNAME_RANKS,
    "memory": KNAME_PROFILE_MEMORY,
    "backward_lines": KNAME_PROFILE_BACKWARD,
    "verdict": KNAME_PROFILE_VERDICT,
}


def _add_profile_command(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser(
        "profile",
        help="run a program and show the GPU time of each call site (CUPTI, no Nsight needed)",
        description="Run a program with every GPU kernel, copy and memset attributed to the line "
        "that launched it; a table ranked by GPU time is printed at exit.",
        epilog=PROFILE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    each_rank = (
        "; in a job, each rank its own (PATH.rankN, or where {rank}, {host}, {pid} in PATH say)"
    )
    profile.add_argument(
        "--json", metavar="PATH", help=f"write the profile (schema 2) as JSON{each_rank}"
    )
    profile.add_argument(
        "--trace", metavar="PATH", help=f"write a Chrome trace-event timeline{each_rank}"
    )
    profile.add_argument(
        "--html", metavar="PATH", help=f"write a self-contained HTML page{each_rank}"
    )
    profile.add_argument(
        "--top", metavar="N", type=_call_sites, help="call sites in the table (default 20)"
    )
    profile.add_argument(
        "--ranks", metavar="LIST", type=_ranks,
        help="profile only these ranks of a job, e.g. 0,3 or 0-7 (the others only name)",
    )  # fmt: skip
    profile.add_argument(
        "--flush-every", metavar="SECONDS", type=_seconds,
        help="rewrite the JSON and the page every SECONDS while the program runs (a job "
        "killed at its time limit keeps its profile up to the last rewrite)",
    )  # fmt: skip
    profile.add_argument(
        "--delay", metavar="SECONDS", type=_seconds,
        help="start profiling SECONDS after the program starts",
    )  # fmt: skip
    profile.add_argument(
        "--duration", metavar="SECONDS", type=_seconds,
        help="stop profiling SECONDS after it started (the outputs are still written at exit)",
    )  # fmt: skip
    profile.add_argument(
        "--memory", action="store_const", const="1",
        help="also GPU memory per line: what each line allocated through the driver and the "
        "torch and CuPy pools, and what it held at the peak (docs/memory.md)",
    )  # fmt: skip
    profile.add_argument(
        "--backward-lines", action="store_const", const="1",
        help="also torch's backward time per forward line (each torch call of the run then costs "
        "tens of microseconds more: docs/backward_lines.md)",
    )  # fmt: skip
    profile.add_argument(
        "--verdict", action="store_const", const="1",
        help="time each launch call for the launch-bound verdict per line (about 0.1 us a "
        "launch; docs/verdict.md)",
    )  # fmt: skip
    for option in ("targets", "skip", "format", "depth", "domain"):
        profile.add_argument(
            f"--{option}", metavar="VALUE", help=f"sets {RUN_OPTIONS[option]}",
            **({"type": _targets} if option == "targets" else {}),
        )  # fmt: skip
    profile.add_argument("program", nargs=argparse.REMAINDER, help="the command, after --")
    profile.set_defaults(handler=_profile)


def _seconds(text: str) -> str:
    from kname.config import parse_seconds

    if parse_seconds(text.strip()) is None:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds above 0, such as 30 or 0.5, not {text!r}"
        )
    return text.strip()


def _ranks(text: str) -> str:
    from kname.config import read_config

    problems = read_config({KNAME_RANKS: text}).problems
    if problems or not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected ranks such as 0,3 or 0-7 (whole numbers), not {text!r}"
        )
    return text


def _call_sites(text: str) -> str:
    from kname.config import parse_count

    if parse_count(text) is None:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, not {text!r}")
    return text


def _profile(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`kname run` with KNAME_MODE=profile and the outputs' variables set."""
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        return _usage_error("kname profile: needs a command, e.g. kname profile -- python app.py")
    if shutil.which(program[0]) is None:
        return _usage_error(_not_found("profile", program[0]))
    for option, variable in PROFILE_OPTIONS.items():
        value = getattr(options, option)
        if value is not None:
            os.environ[variable] = value
    options.mode, options.report = "profile", options.json
    return _run(options, parser)


ATTACH_EXAMPLES = """\
examples:
  KNAME=1 python train.py &                 any process started with kname on (any mode)
  kname attach 4242                         profile it for 30 s, then print the table
  kname attach 4242 --duration 5 --json now.json --html now.html
                                            ... 5 s, and the profile saved (in the process)
  KNAME=1 KNAME_PROFILE_TRIGGER=/shared/kname.trigger torchrun ... train.py
  echo duration=60 > /shared/kname.trigger  every rank profiles the same 60 s and writes its
                                            file beside the trigger (kname-profile.rank3.json)

Only the process's owner can attach (the OS checks the signal); a trigger file must be the
user's own and writable by no one else. See docs/attach.md.
"""


def _add_attach_command(commands: argparse._SubParsersAction) -> None:
    attach = commands.add_parser(
        "attach",
        help="profile a running process started with KNAME=1 for a window, then print the table",
        description="Ask a running process started with KNAME=1 (any mode) to profile its GPU "
        "work for a window (CUPTI subscribed then, and unsubscribed after), write the files "
        "asked for, and print the table here.",
        epilog=ATTACH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    attach.add_argument("pid", metavar="PID", type=_process_id, help="the process's id")
    attach.add_argument(
        "--duration", metavar="SECONDS", type=_window_seconds, default="30",
        help="how long the window lasts (default 30, at most a day)",
    )  # fmt: skip
    each = "; written by the process ({rank}, {host}, {pid} placeholders as in kname profile)"
    attach.add_argument("--json", metavar="PATH", help=f"the profile (schema 2) as JSON{each}")
    attach.add_argument("--trace", metavar="PATH", help=f"a Chrome trace-event timeline{each}")
    attach.add_argument("--html", metavar="PATH", help=f"a self-contained HTML page{each}")
    attach.set_defaults(handler=_attach)


def _process_id(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a process id (a whole number), not {text!r}")
    return int(text)


def _window_seconds(text: str) -> str:
    from kname.profiling.requests import MAX_SECONDS

    text = _seconds(text)
    if float(text) > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_SECONDS:g} seconds, not {text!r}")
    return text


def _attach(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Build the request (paths made absolute here, where the user named them) and attach."""
    from kname.profiling.attach_client import attach
    from kname.profiling.requests import Request, RequestRefused, parse_request

    lines = [f"duration={options.duration}"]
    lines += [f"{kind}={getattr(options, kind)}" for kind in ("json", "trace", "html")
              if getattr(options, kind)]  # fmt: skip
    try:
        request: Request = parse_request("\n".join(lines), os.getcwd(), "kname attach")
    except RequestRefused as exc:
        return _usage_error(str(exc))
    return attach(options.pid, request)


REPORT_EXAMPLES = """\
examples:
  kname run --report census.json -- python app.py    save a census (or KNAME_REPORT=census.json)
  kname report census.json                           print it as a table
  kname report before.json --diff after.json         launches per call site: added, removed,
                                                     changed (with the difference)
  kname report before.json --diff after.json --fail-on-change
                                                     ... and exit 1 if anything changed (CI)
  kname report before.json --diff after.json --fail-on-change --ignore-lines
                                                     ... per function, file and kernel: code
                                                     that only moved is no change
  kname report census.json census.pid*.json          a program and its children, merged
  kname report tests.json                            pytest --kname-report's file: one census
                                                     of the whole suite (each test's summed)

GPU profiles (kname profile --json FILE.json, schema 2), and several files at once:
  kname report profile.json --top 10                 the ten call sites with most GPU time
  kname report rank0.json rank1.json                 one table: the files' sites summed (one
                                                     file per rank or process, of one kind)
  kname report before.json --diff after.json         GPU time and launches per call site
  kname report before.json --diff after.json --fail-on-slower 10%
                                                     ... and exit 1 if a call site's (or the
                                                     total) GPU time grew by more than 10% and
                                                     by at least --min-time (default 50us)

A job's ranks (kname profile --json profile.json -- torchrun ...: profile.rank0.json, ...):
  kname report profile.rank*.json                    one table: per site, its GPU time on the
                                                     least, median and most loaded rank, and
                                                     the slowest rank
  kname report profile.rank*.json --by-rank          each site's row on each rank
  kname report profile.rank*.json --straggler 20% --fail-on-straggler
                                                     mark (!) each site whose slowest rank
                                                     takes over 20% (and --min-time) more than
                                                     the median; exit 1 if there is one (CI)

Web pages (one self-contained file: the ranking, each file's source with every line's numbers
beside it, the call tree when names carry callers):
  kname report profile.json --html profile.html      a profile (or census) as a page
  kname report before.json --diff after.json --html diff.html
                                                     the diff: lines slower, faster, new, gone

Errors (a missing file, bad JSON, not a census of schema 1 or 2) are one line on stderr and exit 2.
"""


def _add_report_command(commands: argparse._SubParsersAction) -> None:
    """`kname report` and its options; documents/report.py does the work."""
    report = commands.add_parser(
        "report",
        help="print a saved launch census or GPU profile, merge several, or compare two",
        description="Print a launch census saved as JSON (KNAME_REPORT=FILE.json or "
        "kname run --report FILE.json) or a GPU profile (kname profile --json FILE.json), "
        "or compare it with another.",
        epilog=REPORT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "files", nargs="*", metavar="FILE.json",
        help="a saved census or profile; several files of one kind (one per rank or process) "
        "are summed",
    )  # fmt: skip
    report.add_argument(
        "--diff", metavar="OTHER.json", help="compare FILE.json (before) with OTHER.json (after)"
    )
    report.add_argument(
        "--fail-on-change", action="store_true",
        help="with --diff: exit 1 if any call site's launch count changed",
    )  # fmt: skip
    report.add_argument(
        "--ignore-lines", action="store_true",
        help="with --diff of launch censuses: compare per function, file and kernel, ignoring "
        "line numbers (the number after each ':' in a name), so code that only moved is no change",
    )  # fmt: skip
    report.add_argument(
        "--fail-on-slower", metavar="PCT",
        help="with --diff of profiles: exit 1 if a call site's GPU time (or the total) grew by "
        "more than PCT percent, e.g. 10%%, and by at least --min-time",
    )  # fmt: skip
    report.add_argument(
        "--fail-on-more-memory", metavar="PCT",
        help="with --diff of profiles made with --memory: exit 1 if a memory view's peak grew "
        "by more than PCT percent, e.g. 10%%, and by at least 1 MiB",
    )  # fmt: skip
    report.add_argument(
        "--min-time", metavar="TIME",
        help="with --diff of profiles: smaller growth is never slower (default 50us)",
    )  # fmt: skip
    report.add_argument("--top", metavar="N", type=int, help="call sites in a profile's table")
    report.add_argument(
        "--by-rank", action="store_true",
        help="files of several ranks: each call site's row on each rank",
    )  # fmt: skip
    report.add_argument(
        "--straggler", metavar="PCT",
        help="files of several ranks: mark (!) each call site whose slowest rank takes more "
        "than PCT percent over the median rank, e.g. 20%%, and (profiles) at least --min-time; "
        "a census compares launches",
    )  # fmt: skip
    report.add_argument(
        "--fail-on-straggler", action="store_true",
        help=f"with --straggler (default {report_command.DEFAULT_STRAGGLER}%): exit 1 if a "
        "call site has one",
    )  # fmt: skip
    report.add_argument(
        "--html", metavar="PATH",
        help="also write the document (or with --diff, the comparison) as a self-contained "
        "web page",
    )  # fmt: skip
    report.set_defaults(handler=lambda options, parser: report_command.run(options))


def _usage_error(message: str) -> int:
    """Say `message` (which starts with the command, e.g. `kname run: ...`) on one line; exit 2."""
    print(message, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
