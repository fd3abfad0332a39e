"""Every KNAME_* environment variable, parsed in one place into an immutable Config.

A bad value never stops the program: it is reported once, on one line that names the variable
and the accepted values, and the default is used instead (unless KNAME_STRICT=1).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

from kname.rank_paths import template_problem
from kname.ranks import RankSpans, problems_not_compared

# Every variable kname reads, by name: spelled here alone, and imported where another module
# names one (the start-up gates, kname.pth and _bootstrap/sitecustomize.py, import nothing of
# kname: a test keeps their cheap test of KNAME in step with this module).
KNAME = "KNAME"
KNAME_TARGETS = "KNAME_TARGETS"
KNAME_SKIP = "KNAME_SKIP"
KNAME_USER = "KNAME_USER"
KNAME_FORMAT = "KNAME_FORMAT"
KNAME_DEPTH = "KNAME_DEPTH"
KNAME_MODE = "KNAME_MODE"
KNAME_REPORT = "KNAME_REPORT"
KNAME_DOMAIN = "KNAME_DOMAIN"
KNAME_STRICT = "KNAME_STRICT"
KNAME_NATIVE = "KNAME_NATIVE"
KNAME_RANKS = "KNAME_RANKS"
KNAME_SOURCES = "KNAME_SOURCES"
KNAME_DRIVER_HOOK = "KNAME_DRIVER_HOOK"
KNAME_PROFILE_TRACE = "KNAME_PROFILE_TRACE"
KNAME_PROFILE_HTML = "KNAME_PROFILE_HTML"
KNAME_PROFILE_TOP = "KNAME_PROFILE_TOP"
KNAME_PROFILE_FLUSH = "KNAME_PROFILE_FLUSH"
KNAME_PROFILE_DELAY = "KNAME_PROFILE_DELAY"
KNAME_PROFILE_DURATION = "KNAME_PROFILE_DURATION"
KNAME_PROFILE_TRACE_MAX = "KNAME_PROFILE_TRACE_MAX"
KNAME_PROFILE_TRIGGER = "KNAME_PROFILE_TRIGGER"
KNAME_PROFILE_MEMORY = "KNAME_PROFILE_MEMORY"
KNAME_PROFILE_BACKWARD = "KNAME_PROFILE_BACKWARD"
KNAME_PROFILE_TORCH_TRACKER = "KNAME_PROFILE_TORCH_TRACKER"
KNAME_PROFILE_VERDICT = "KNAME_PROFILE_VERDICT"

SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("", "0", "false", "no", "off")
MODES = ("nvtx", "rename", "census", "profile")
FORMAT_FIELDS = ("kernel", "function", "path", "module", "file", "line", "lib")
DEFAULT_FORMAT = "{function} {path}:{line}"
DEFAULT_DOMAIN = "kname"
MAX_DEPTH = 16
DEFAULT_TOP = 20  # call sites in the table `kname profile` prints at exit
# Records `kname profile --trace` keeps at most: launch calls, GPU records, graph node events.
DEFAULT_TRACE_MAX = 2_000_000
# KNAME_MODE=profile's outputs besides KNAME_REPORT (its JSON) -> the Config field each sets.
PROFILE_OUTPUTS = {KNAME_PROFILE_TRACE: "trace", KNAME_PROFILE_HTML: "html"}
# KNAME_MODE=profile's other settings, read only in that mode; those in seconds -> their field.
PROFILE_SECONDS = {
    KNAME_PROFILE_FLUSH: "flush",
    KNAME_PROFILE_DELAY: "delay",
    KNAME_PROFILE_DURATION: "duration",
}
PROFILE_SETTINGS = (
    KNAME_PROFILE_TOP, KNAME_PROFILE_TRACE_MAX, *PROFILE_SECONDS, KNAME_PROFILE_MEMORY,
    KNAME_PROFILE_BACKWARD, KNAME_PROFILE_VERDICT, KNAME_PROFILE_TORCH_TRACKER,
)  # fmt: skip
# What a bad value of each setting in seconds is replaced by.
_SECONDS_DEFAULTS = {
    KNAME_PROFILE_FLUSH: "none: the profile is written at exit only",
    KNAME_PROFILE_DELAY: "none: profiling starts at once",
    KNAME_PROFILE_DURATION: "none: profiling goes on to the end",
}
# KNAME_RANKS: ranks are whole numbers of at most 9 digits (int() refuses over 4300 digits).
MAX_RANK = 999_999_999
# Longer call-site names are cut to this many characters, ending in a digest of the whole name.
MAX_NAME_LENGTH = 1024
KNOWN_VARIABLES = (
    KNAME, KNAME_TARGETS, KNAME_SKIP, KNAME_USER, KNAME_FORMAT, KNAME_DEPTH,
    KNAME_MODE, KNAME_REPORT, KNAME_DOMAIN, KNAME_STRICT, *PROFILE_OUTPUTS,
    *PROFILE_SETTINGS, KNAME_NATIVE, KNAME_RANKS, KNAME_SOURCES,
    KNAME_DRIVER_HOOK, KNAME_PROFILE_TRIGGER,
)  # fmt: skip
# How alike (difflib's ratio) a name must be to a known one to be taken for a misspelling of it:
# at start-up, a near miss (KNAME_MDOE) is a problem; `kname doctor` shows any likeness.
MISSPELLING = 0.85
LIKENESS = 0.6

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_USER_TARGET = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
_MODULE_PREFIX = re.compile(rf"^{_DOTTED}$")


class ConfigError(ValueError):
    """A KNAME_* variable has a value kname does not accept (raised only with KNAME_STRICT=1)."""


@problems_not_compared
class Config(NamedTuple):
    """The effective configuration; `problems` lists what was wrong and was replaced (not
    compared: a configuration equals the one it stands for). A NamedTuple, not a dataclass:
    making a dataclass cost 0.6 ms of every KNAME=1 start-up, and importing dataclasses 4 ms."""

    targets: tuple[str, ...] | None = None  # None: every built-in target
    skip: tuple[str, ...] = ()
    user: tuple[str, ...] = ()  # KNAME_USER: library modules whose frames are user code after all
    format: str = DEFAULT_FORMAT
    depth: int = 1
    mode: str = "nvtx"
    report: str | None = None
    domain: str = DEFAULT_DOMAIN
    trace: str | None = None  # KNAME_MODE=profile: Chrome trace-event file written at exit
    html: str | None = None  # KNAME_MODE=profile: HTML page written at exit
    top: int = DEFAULT_TOP  # KNAME_MODE=profile: call sites in the table printed at exit
    flush: float | None = None  # KNAME_MODE=profile: seconds between rewrites (None: at exit)
    delay: float | None = None  # KNAME_MODE=profile: seconds before profiling starts
    duration: float | None = None  # KNAME_MODE=profile: seconds profiling lasts (None: to exit)
    trace_max: int = DEFAULT_TRACE_MAX  # KNAME_MODE=profile: records the trace keeps at most
    memory: bool = False  # KNAME_PROFILE_MEMORY: memory per line too (kname profile --memory)
    # KNAME_PROFILE_BACKWARD: torch's backward time per forward line too (--backward-lines)
    backward_lines: bool = False
    # KNAME_PROFILE_TORCH_TRACKER: --memory follows torch through its allocator's tracker (else
    # its GPU trace)
    torch_tracker: bool = True
    verdict: bool = False  # KNAME_MODE=profile: launch calls timed for the launch-bound verdict
    ranks: RankSpans | None = None  # KNAME_RANKS: the ranks that profile (None: every rank)
    strict: bool = False
    native: bool = True  # KNAME_NATIVE: the C hot path where built (False: the pure-Python one)
    sources: bool = True  # KNAME_SOURCES: saved documents keep the source of their lines
    driver_hook: bool = True  # KNAME_DRIVER_HOOK: under an NVTX tool, launches named at the driver
    trigger: str | None = None  # KNAME_PROFILE_TRIGGER: a file whose change opens a profile window
    problems: tuple[str, ...] = ()  # last: left out of == and hash


def parse_switch(value: str | None) -> bool | None:
    """True/False for an accepted switch value, None for anything else."""
    text = (value or "").strip().lower()
    if text in SWITCH_ON:
        return True
    if text in SWITCH_OFF:
        return False
    return None


def switch_state(
    environ: Mapping[str, str] | None = None, xoptions: Mapping[str, object] | None = None
) -> tuple[str, str, bool | None]:
    """(where the switch is set, its value, on/off/None for a bad value): `-X kname` wins.

    The one parser of the switch; kname.pth and sitecustomize_example only test cheaply whether
    it may be on (a test keeps their off-values equal to SWITCH_OFF).
    """
    xoptions = sys._xoptions if xoptions is None else xoptions
    xoption = xoptions.get("kname")
    if xoption is not None:
        value = "1" if xoption is True else str(xoption)
        return "-X kname", value, parse_switch(value)
    value = (os.environ if environ is None else environ).get(KNAME, "")
    return KNAME, value, parse_switch(value)


def switch_problem(name: str, value: str) -> str:
    return (
        f"{name}={value!r} is not a switch value; accepted: "
        f"{'/'.join(SWITCH_ON)} (on) or {'/'.join(v for v in SWITCH_OFF if v)}/empty (off)"
    )


def format_problem(template: str) -> str | None:
    """Why `template` is not a usable KNAME_FORMAT, or None if it is."""
    import string  # only where KNAME_FORMAT is set: no default start-up pays for it

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"KNAME_FORMAT={template!r} is not a valid template ({_printable(exc)})"
    unknown = [name for _, name, _, _ in parsed if name is not None and name not in FORMAT_FIELDS]
    if unknown:
        return f"KNAME_FORMAT={template!r} uses unknown field {_printable('{' + unknown[0] + '}')}"
    if any(spec and "{" in spec for _, _, spec, _ in parsed):
        # A nested field ({line:{kernel}}) renders the sample but can fail on real values.
        return f"KNAME_FORMAT={template!r} nests a field inside a format spec"
    if any(spec and re.search(r"[0-9]{4}", spec) for _, _, spec, _ in parsed):
        # Rendering {kernel:999999999} would build a 1 GB name (or raise MemoryError).
        return f"KNAME_FORMAT={template!r} has a width or precision over 999 in a format spec"
    sample = dict.fromkeys(FORMAT_FIELDS, "x") | {"line": 1}
    try:
        rendered = template.format(**sample)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return f"KNAME_FORMAT={template!r} cannot be rendered ({_printable(exc)})"
    if not rendered.strip():
        return f"KNAME_FORMAT={template!r} renders an empty name"
    if len(rendered) > MAX_NAME_LENGTH:
        shown = f"{template[:60]!r}{'...' if len(template) > 60 else ''}"  # one short line
        return f"KNAME_FORMAT={shown} renders names of over {MAX_NAME_LENGTH} characters"
    return None


def read_config(
    environ: Mapping[str, str] | None = None, builtin_targets: tuple[str, ...] = ()
) -> Config:
    """Parse the KNAME_* variables of `environ` (default: os.environ).

    Raises ConfigError for the first problem only when KNAME_STRICT is on.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []
    strict = _read_strict(env, problems)
    mode = _read_mode(env.get(KNAME_MODE), problems)
    config = Config(
        targets=_read_targets(env.get(KNAME_TARGETS), builtin_targets, problems),
        skip=_read_modules(KNAME_SKIP, env.get(KNAME_SKIP), problems),
        user=_read_modules(KNAME_USER, env.get(KNAME_USER), problems),
        format=_read_format(env.get(KNAME_FORMAT), problems),
        depth=_read_depth(env.get(KNAME_DEPTH), problems),
        mode=mode,
        report=_read_output(KNAME_REPORT, env.get(KNAME_REPORT), problems),
        domain=_read_domain(env.get(KNAME_DOMAIN), problems),
        **_read_profile_settings(env, mode, problems),
        ranks=_read_ranks(env.get(KNAME_RANKS), problems),
        strict=strict,
        native=_read_native(env.get(KNAME_NATIVE), problems),
        sources=_read_sources(env.get(KNAME_SOURCES), problems),
        driver_hook=_read_driver_hook(env.get(KNAME_DRIVER_HOOK), problems),
        trigger=_read_trigger(env.get(KNAME_PROFILE_TRIGGER), problems),
        problems=tuple(problems + _misspellings(env)),
    )
    if strict and config.problems:
        raise ConfigError(config.problems[0])
    return config


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """Each KNAME_* variable set that kname does not read, by name, with the known one it is most
    like (None if none is much like it)."""
    env = os.environ if environ is None else environ
    unknown = sorted(n for n in env if n.startswith("KNAME_") and n not in KNOWN_VARIABLES)
    return [(name, _nearest(name, LIKENESS)) for name in unknown]


def _misspellings(env: Mapping[str, str]) -> list[str]:
    """A problem for each unknown KNAME_* variable that is a near miss of a known one.

    Others are left to `kname doctor`: tools of one's own may use the prefix too.
    """
    return [
        f"{name} is not a kname variable (did you mean {nearest}?); ignoring it"
        for name, _ in unknown_variables(env)
        if (nearest := _nearest(name, MISSPELLING))
    ]


def _nearest(name: str, cutoff: float) -> str | None:
    import difflib

    return next(iter(difflib.get_close_matches(name, KNOWN_VARIABLES, 1, cutoff)), None)


def _read_strict(env: Mapping[str, str], problems: list[str]) -> bool:
    value = env.get(KNAME_STRICT, "")
    strict = parse_switch(value)
    if strict is None:
        problems.append(switch_problem(KNAME_STRICT, value) + "; using off")
        return False
    return strict


def native_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether KNAME_NATIVE asks for the C hot path (the default; a bad value counts as that):
    Config.native, read alone (for kname.hotpath while nothing is installed)."""
    env = os.environ if environ is None else environ
    return _read_native(env.get(KNAME_NATIVE), [])


def _read_native(value: str | None, problems: list[str]) -> bool:
    return _read_on_by_default(
        "KNAME_NATIVE", value, "the C hot path where built", "the pure-Python one", problems
    )


def sources_kept(environ: Mapping[str, str] | None = None) -> bool:
    """Whether KNAME_SOURCES lets saved documents keep source lines (the default; a bad value
    counts as that): Config.sources, read alone (for kname.documents.sources at each write)."""
    env = os.environ if environ is None else environ
    return _read_sources(env.get(KNAME_SOURCES), [])


def _read_sources(value: str | None, problems: list[str]) -> bool:
    return _read_on_by_default(
        KNAME_SOURCES, value, "a census, profile or page keeps the source around its lines",
        "none kept", problems,
    )  # fmt: skip


def driver_hook_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether KNAME_DRIVER_HOOK leaves the driver hook on (the default; a bad value counts as
    that, said by read_config): Config.driver_hook, read alone (for kname.driver_hook)."""
    env = os.environ if environ is None else environ
    return _read_driver_hook(env.get(KNAME_DRIVER_HOOK), [])


def _read_driver_hook(value: str | None, problems: list[str]) -> bool:
    return _read_on_by_default(
        KNAME_DRIVER_HOOK, value, "under an NVTX tool, every launch named at the driver",
        "only launches kname wraps get ranges", problems,
    )  # fmt: skip


def _read_verdict(value: str, problems: list[str]) -> bool:
    """KNAME_PROFILE_VERDICT: a switch, off by default (docs/verdict.md: what timing costs)."""
    state = parse_switch(value)
    if state is None:
        problems.append(
            f"{KNAME_PROFILE_VERDICT}={value!r} is not a switch value; accepted: "
            f"{'/'.join(SWITCH_ON)} (launch calls timed for the launch-bound verdict) or "
            f"{'/'.join(v for v in SWITCH_OFF if v)} (not timed, the default); using the default"
        )
    return bool(state)


def _read_on_by_default(
    variable: str, value: str | None, on: str, off: str, problems: list[str]
) -> bool:
    """A switch that is on unless set off (`on`, `off`: what each means, for the message)."""
    if value is None or not value.strip():
        return True
    state = parse_switch(value)
    if state is None:
        problems.append(
            f"{variable}={value!r} is not a switch value; accepted: {'/'.join(SWITCH_ON)} ({on}, "
            f"the default) or {'/'.join(v for v in SWITCH_OFF if v)} ({off}); using the default"
        )
        return True
    return state


def _read_targets(
    value: str | None, builtin_targets: tuple[str, ...], problems: list[str]
) -> tuple[str, ...] | None:
    entries = _comma_list(value)
    if not entries:
        return None
    accepted = []
    for entry in entries:
        if entry in builtin_targets or _USER_TARGET.match(entry):
            accepted.append(entry)
        else:
            problems.append(
                f"KNAME_TARGETS entry {entry!r} is neither a built-in target "
                f"({', '.join(builtin_targets)}) nor module:qualname{_target_hint(entry)}; "
                "ignoring it"
            )
    return tuple(accepted) or None  # nothing usable left: the default, every built-in target


def _target_hint(entry: str) -> str:
    """`; did you mean 'a.b:f'?` for a dotted path written without its colon, else ''."""
    module, dot, qualname = entry.rpartition(".")
    if dot and ":" not in entry and _USER_TARGET.match(f"{module}:{qualname}"):
        return f"; did you mean {module + ':' + qualname!r}?"
    return ""


_MODULE_EXAMPLES = {KNAME_SKIP: "mypkg.launchers", KNAME_USER: "torch._inductor"}


def _read_modules(variable: str, value: str | None, problems: list[str]) -> tuple[str, ...]:
    """KNAME_SKIP or KNAME_USER: a comma list of dotted module prefixes."""
    accepted = []
    for entry in _comma_list(value):
        # A file name ends in .py; a module named `py` inside a package is rare enough to refuse.
        if _MODULE_PREFIX.match(entry) and not entry.endswith(".py"):
            accepted.append(entry)
        else:
            problems.append(
                f"{variable} entry {entry!r} is not a dotted module name such as "
                f"{_MODULE_EXAMPLES[variable]!r}{_module_hint(entry)}; ignoring it"
            )
    return tuple(accepted)


def _module_hint(entry: str) -> str:
    """`; did you mean 'a.b'?` for a file name (a.b.py), else ''."""
    module = entry.removesuffix(".py")
    if module != entry and _MODULE_PREFIX.match(module):
        return f"; did you mean {module!r} (a module, not a file)?"
    return ""


def _read_format(value: str | None, problems: list[str]) -> str:
    if value is None or not value.strip():
        return DEFAULT_FORMAT
    problem = format_problem(value)
    if problem is None:
        return value
    fields = " ".join("{" + name + "}" for name in FORMAT_FIELDS)
    problems.append(f"{problem}; accepted fields: {fields}; using {DEFAULT_FORMAT!r}")
    return DEFAULT_FORMAT


def _read_depth(value: str | None, problems: list[str]) -> int:
    text = (value or "").strip()
    if not text:
        return 1
    # The length check first: int() refuses strings of over 4300 digits.
    if text.isascii() and text.isdigit() and len(text) <= 9 and 1 <= int(text) <= MAX_DEPTH:
        return int(text)
    problems.append(f"KNAME_DEPTH={value!r} is not a whole number from 1 to {MAX_DEPTH}; using 1")
    return 1


def _read_mode(value: str | None, problems: list[str]) -> str:
    text = (value or "").strip().lower()
    if not text:
        return "nvtx"
    if text in MODES:
        return text
    problems.append(f"KNAME_MODE={value!r} is not one of {', '.join(MODES)}; using nvtx")
    return "nvtx"


def _read_profile_settings(
    env: Mapping[str, str], mode: str, problems: list[str]
) -> dict[str, str | int | float | None]:
    """KNAME_PROFILE_TRACE, _HTML, _TOP, _FLUSH and _TRACE_MAX (read with KNAME_MODE=profile
    only)."""
    settings: dict[str, str | int | float | None] = {}
    given = {v: (env.get(v) or "").strip() for v in (*PROFILE_OUTPUTS, *PROFILE_SETTINGS)}
    for variable in [v for v, text in given.items() if text and mode != "profile"]:
        problems.append(
            f"{variable}={env[variable]!r} is only read with KNAME_MODE=profile "
            f"(KNAME_MODE is {mode}); ignoring it"
        )
    if mode != "profile":
        return settings
    for variable, attribute in PROFILE_OUTPUTS.items():
        settings[attribute] = _read_output(variable, given[variable], problems)
    settings["verdict"] = _read_verdict(given[KNAME_PROFILE_VERDICT], problems)
    counts = {
        "top": (KNAME_PROFILE_TOP, "call sites in the table", DEFAULT_TOP),
        "trace_max": (
            KNAME_PROFILE_TRACE_MAX,
            "launch calls, GPU records and graph node events the trace keeps",
            DEFAULT_TRACE_MAX,
        ),
    }
    for attribute, (variable, what, default) in counts.items():
        if given[variable]:
            settings[attribute] = parse_count(given[variable])
            if settings[attribute] is None:
                settings[attribute] = default
                problems.append(
                    f"{variable}={env[variable]!r} is not a whole number of 1 or more ({what}); "
                    f"using {default}"
                )
    if given[KNAME_PROFILE_MEMORY]:
        settings["memory"] = _read_memory_switch(env[KNAME_PROFILE_MEMORY], problems)
    if given[KNAME_PROFILE_BACKWARD]:
        settings["backward_lines"] = _read_backward_switch(env[KNAME_PROFILE_BACKWARD], problems)
    if given[KNAME_PROFILE_TORCH_TRACKER]:
        settings["torch_tracker"] = _read_torch_tracker(env[KNAME_PROFILE_TORCH_TRACKER], problems)
    for variable, attribute in PROFILE_SECONDS.items():
        if given[variable]:
            settings[attribute] = parse_seconds(given[variable])
            if settings[attribute] is None:
                problems.append(
                    f"{variable}={env[variable]!r} is not a number of seconds above 0 (such as "
                    f"30 or 0.5); using {_SECONDS_DEFAULTS[variable]}"
                )
    return settings


def _read_memory_switch(value: str, problems: list[str]) -> bool:
    """KNAME_PROFILE_MEMORY: on or off; a bad value is a problem, and off."""
    return _read_off_by_default(KNAME_PROFILE_MEMORY, value, "memory is not profiled", problems)


def backward_lines_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether KNAME_PROFILE_BACKWARD asks for backward time per forward line (off by default: it
    costs each torch call of a profiled run tens of µs; a bad value is off, said by read_config):
    Config.backward_lines, read alone (for the torch unit)."""
    env = os.environ if environ is None else environ
    value = env.get(KNAME_PROFILE_BACKWARD)
    return value is not None and _read_backward_switch(value, [])


def torch_tracker_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether --memory follows torch's blocks through its allocator's tracker: unless
    KNAME_PROFILE_TORCH_TRACKER is off (its GPU trace instead, x1.21 to x1.40 on a training
    step where the tracker is within noise of kname profile: docs/memory.md; a bad value is on,
    said by read_config): Config.torch_tracker, read alone (for memory_hooks)."""
    env = os.environ if environ is None else environ
    return _read_torch_tracker(env.get(KNAME_PROFILE_TORCH_TRACKER), [])


def _read_torch_tracker(value: str | None, problems: list[str]) -> bool:
    return _read_on_by_default(
        KNAME_PROFILE_TORCH_TRACKER,
        value,
        "torch's allocator tracker",
        "torch's GPU trace",
        problems,
    )


def _read_backward_switch(value: str, problems: list[str]) -> bool:
    return _read_off_by_default(
        KNAME_PROFILE_BACKWARD, value, "backward time stays on the backward() line", problems
    )


def _read_off_by_default(variable: str, value: str, off: str, problems: list[str]) -> bool:
    """A switch that is off unless set on; a bad value is a problem, and off."""
    switch = parse_switch(value)
    if switch is None:
        accepted = ", ".join(SWITCH_ON + SWITCH_OFF[1:])
        problems.append(f"{variable}={value!r} is not one of {accepted}; {off}")
    return bool(switch)


def _read_output(variable: str, value: str | None, problems: list[str]) -> str | None:
    """An output path, whose placeholders ({rank}, {host}, {pid}) are checked now, at start-up:
    a path with an unknown one is a problem, and nothing is written there."""
    text = (value or "").strip()
    if text == "-" and variable != "KNAME_REPORT":
        # `-` has one meaning everywhere: the table on stderr. A trace or a page is no table.
        problems.append(
            f"{variable}='-': only KNAME_REPORT takes - (the table on stderr); a trace or a page "
            "is a file: name one, or /dev/stdout; nothing is written"
        )
        return None
    if not text or text == "-":
        return text or None
    problem = template_problem(variable, text)
    if problem is not None:
        problems.append(f"{problem}; nothing is written there")
        return None
    return text


def _read_trigger(value: str | None, problems: list[str]) -> str | None:
    """KNAME_PROFILE_TRIGGER, in any mode: a file path, made absolute now (the program may
    change directory); touching that file opens a profile window (profiling/ondemand.py)."""
    text = (value or "").strip()
    if not text:
        return None
    if not text.isprintable() or len(text) > 4096:
        problems.append(
            f"KNAME_PROFILE_TRIGGER={text[:80]!r} is not a file path (printable, at "
            "most 4096 characters); no trigger is watched"
        )
        return None
    return os.path.abspath(text)


def parse_count(text: str) -> int | None:
    """A whole number of 1 or more written in at most 9 digits ('20'), else None."""
    # The length check first: int() refuses strings of over 4300 digits.
    if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) >= 1:
        return int(text)
    return None


def parse_seconds(text: str) -> float | None:
    """A positive number of seconds written as digits with at most one point ('30', '0.5'),
    or None for anything else."""
    # Digits only: float() would also take 'nan', 'inf', '1e400' and '١'.
    if not re.fullmatch(r"[0-9]{1,9}(\.[0-9]{0,9})?|\.[0-9]{1,9}", text):
        return None
    seconds = float(text)
    return seconds if seconds > 0 else None


def _read_ranks(value: str | None, problems: list[str]) -> RankSpans | None:
    spans = []
    for entry in _comma_list(value):
        span = _rank_span(entry)
        if span is None:
            problems.append(
                f"KNAME_RANKS entry {entry!r} is neither a rank (3) nor a range of ranks (0-7) "
                f"of whole numbers from 0 to {MAX_RANK}; ignoring it"
            )
        else:
            spans.append(span)
    return merge_rank_spans(spans) or None  # nothing usable left: the default, every rank


def _rank_span(entry: str) -> tuple[int, int] | None:
    """(first, last) of `entry`, '3' or '0-7', or None if it is neither."""
    match = re.fullmatch(r"([0-9]{1,9})(?:\s*-\s*([0-9]{1,9}))?", entry)
    if match is None:
        return None
    first = int(match[1])
    last = first if match[2] is None else int(match[2])
    return (first, last) if first <= last else None


def merge_rank_spans(spans: list[tuple[int, int]]) -> RankSpans:
    """`spans` sorted, with overlapping and adjacent spans joined: KNAME_RANKS's one form."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def format_ranks(ranks: RankSpans) -> str:
    """KNAME_RANKS's text for `ranks` ('0,2-5'); read back, it gives `ranks` again."""
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in ranks)


def _read_domain(value: str | None, problems: list[str]) -> str:
    text = (value or "").strip()
    if not text:
        return DEFAULT_DOMAIN
    try:
        text.encode("utf-8")  # NVTX takes UTF-8; undecodable bytes arrive as lone surrogates
    except UnicodeEncodeError:
        problems.append(f"KNAME_DOMAIN={value!r} is not valid UTF-8 text; using {DEFAULT_DOMAIN!r}")
        return DEFAULT_DOMAIN
    return text


def _printable(value: object) -> str:
    """`value` as text on one line: non-printable characters (newlines too) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def _comma_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]
