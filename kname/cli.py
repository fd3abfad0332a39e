"""The `kname` command: `kname run -- python app.py` and friends."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from kname._version import __version__

EXAMPLES = """\
examples:
  kname run -- python app.py              run app.py with every launch named
  kname run --skip mypkg.launch -- python -m mypkg.train
  python -m kname app.py                  the same as: kname run -- python app.py
  KNAME=1 python app.py                   what `kname run` does, by hand
"""

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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] not in ("run", "-h", "--help", "--version") and not args[0].startswith("-"):
        # `python -m kname app.py ...`: run a script with the current interpreter.
        args = ["run", "--", sys.executable, *args]
    parser = _parser()
    options = parser.parse_args(args)
    if options.command is None:
        parser.print_help()
        return 0
    return options.handler(options, parser)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


def _run(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        return _usage_error(parser, "kname run needs a command, e.g. kname run -- python app.py")
    executable = shutil.which(program[0])
    if executable is None:
        return _usage_error(parser, f"kname run: command not found: {program[0]}")
    environ = dict(os.environ, KNAME="1")
    for option, variable in RUN_OPTIONS.items():
        value = getattr(options, option)
        if value is not None:
            environ[variable] = value
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, program, environ)
    return 0  # not reached: execve replaces this process


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    print(f"{parser.prog}: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
