"""`kname doctor`: what kname needs for names to appear here, and what to do about each gap.

Every check returns (mark, text) lines. None imports a GPU library: find_spec locates a
top-level package without running it, versions come from installed metadata, and each library
unit (kname.targets) says which packages and distributions are its library. The profiling lines
import the CUPTI binding (which initialises no GPU) and ask the driver its version; only
`--profile-check` touches the GPU, and only when asked.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable

from kname import importable
from kname._version import __version__
from kname.config import (
    KNAME,
    KNAME_DEPTH,
    KNAME_DOMAIN,
    KNAME_DRIVER_HOOK,
    KNAME_FORMAT,
    KNAME_MODE,
    KNAME_NATIVE,
    KNAME_PROFILE_BACKWARD,
    KNAME_PROFILE_DELAY,
    KNAME_PROFILE_DURATION,
    KNAME_PROFILE_FLUSH,
    KNAME_PROFILE_HTML,
    KNAME_PROFILE_MEMORY,
    KNAME_PROFILE_TOP,
    KNAME_PROFILE_TORCH_TRACKER,
    KNAME_PROFILE_TRACE,
    KNAME_PROFILE_TRACE_MAX,
    KNAME_PROFILE_TRIGGER,
    KNAME_PROFILE_VERDICT,
    KNAME_RANKS,
    KNAME_REPORT,
    KNAME_SKIP,
    KNAME_SOURCES,
    KNAME_STRICT,
    KNAME_TARGETS,
    KNAME_USER,
    KNOWN_VARIABLES,
    Config,
    ConfigError,
    format_ranks,
    read_config,
    switch_problem,
    switch_state,
    unknown_variables,
)
from kname.rank_paths import expand
from kname.ranks import find_rank
from kname.targets import BUILTIN, library

OK, PROBLEM, NOTE = "✓", "✗", "–"
NVTX_INJECTION_VARIABLES = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")
DEPENDENCIES = (("wrapt", "wrapt"), ("nvtx", "nvtx"))  # (import name, distribution)
CUPTI_BINDING, CUPTI_LIBRARY = "cupti-python", "nvidia-cuda-cupti"  # distributions
# The CUDA releases for which cupti-python is published, within kname[profile]'s range (13.x),
# each with nvidia-cuda-cupti of that release: the only ones doctor's advice names (a test
# installs each pair, dry run, from the package index). cupti-python 13.4 asks for
# nvidia-cuda-cupti~=13.4, which gives 13.5 with no binding of its own: a pair that differs.
CUPTI_RELEASES = ((13, 0), (13, 2), (13, 3), (13, 4))
DRIVER_LIBRARIES = ("libcuda.so.1", "nvcuda.dll")

EXAMPLES = """\
examples:
  kname doctor                            check this environment
  KNAME=1 kname doctor                    ... with the switch on, as your program would run
  nsys profile kname doctor               ... under a profiler, with its NVTX tool attached
  kname doctor --profile-check            ... and whether CUPTI's GPU records arrive for
                                          kname profile (runs one tiny kernel on the GPU)

Each line starts with ✓ (fine), ✗ (a reason names will not appear, and what to do) or
– (for your information: the switch being off, say). The exit status is 1 if any line is ✗,
else 0.
"""


def main(profile_check: bool = False) -> int:
    """Print every check; 1 if any found a problem, else 0. With `profile_check`, also start
    kname profile's collection and launch one tiny kernel (the GPU is used)."""
    config, config_lines = _check_configuration()
    lines = [
        *_check_kname(),
        *_check_gate(),
        *_check_switch(),
        *_check_dependencies(),
        *_check_hot_path(config),
        *_check_targets(config),
        *_check_nvtx_tool(config),
        *_check_driver_hook(config),
        *_check_profiling(config),
        *config_lines,
    ]
    print(f"kname doctor: kname {__version__}, Python {sys.version.split()[0]} ({sys.executable})")
    _print(lines)
    if profile_check:
        # Last, after a flush: what CUPTI's start says on stderr then follows the lines above.
        sys.stdout.flush()
        checked = _check_profile_records()
        _print(checked)
        lines += checked
    return 1 if any(mark == PROBLEM for mark, _ in lines) else 0


def _print(lines: list[tuple[str, str]]) -> None:
    for mark, text in lines:
        print(f"{mark} {text}" if mark else text)


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
            "nothing here. `kname run -- python app.py` starts kname itself; else install "
            "kname's wheel (pip install kname; an editable install has no kname.pth), or use a "
            "sitecustomize.py (see sitecustomize_example/)"
        )
        lines.append((PROBLEM, problem))
    return lines


def _check_switch() -> list[tuple[str, str]]:
    source, value, state = switch_state()
    if state is None:
        return [(PROBLEM, f"switch: {switch_problem(source, value)}")]
    if not state:
        shown = "KNAME is not set" if KNAME not in os.environ else f"KNAME={value!r}"
        advice = "set KNAME=1, or run python -X kname app.py, or kname run -- python app.py"
        # Off is how kname is installed, not a fault: the program runs as before, unnamed.
        return [(NOTE, f"switch: off ({shown}): to name launches, {advice}")]
    setting = f"{source}={value!r}" if source == KNAME else source
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


def _check_hot_path(config: Config) -> list[tuple[str, str]]:
    from kname import hotpath

    hot_path = hotpath.choose(config.native)
    if hot_path.why_python:
        why = hot_path.why_python
        return [(NOTE, f"hot path: pure Python ({why}): the same names, more time per launch")]
    lines = [(OK, f"hot path: native, the C extension ({hot_path.extension_file})")]
    if hot_path.nvtx_range is not None:
        lines.append((OK, "NVTX ranges: pushed and popped through the NVTX C API, from C"))
    else:
        lines.append((
            NOTE,
            "NVTX ranges: through the nvtx package (kname._native was built without the NVTX "
            "headers: pip install nvidia-nvtx, then reinstall kname); a little more time per "
            "launch under a profiler",
        ))  # fmt: skip
    return lines


def _check_driver_hook(config: Config) -> list[tuple[str, str]]:
    from kname import driver_hook, hotpath

    ready, line = driver_hook.doctor_line(config.mode, hotpath.choose(config.native))
    return [(OK if ready else NOTE, line)]


def _check_targets(config: Config) -> list[tuple[str, str]]:
    chosen = BUILTIN if config.targets is None else config.targets
    lines = []
    for name in chosen:
        try:
            lines.append(_check_builtin(name) if name in BUILTIN else _check_user_target(name))
        except Exception as exc:
            lines.append((PROBLEM, f"target {name}: its definition failed to load ({exc})"))
    if not any(mark == OK for mark, _ in lines):
        problem = (
            "no target's library is importable, so there is nothing to name: install one "
            '(pip install "kname[auto]" brings numba-cuda) or set KNAME_TARGETS=module:function '
            "for your own launcher"
        )
        lines.append((PROBLEM, problem))
    return lines


def _check_builtin(name: str) -> tuple[str, str]:
    packages = library(name).packages[:1]  # the first: the one it wraps
    missing = [p for p in packages if _find_origin(p) is None]
    if missing:
        return NOTE, f"target {name}: {', '.join(missing)} not installed (nothing to name)"
    versions = [f"{d} {_version(d)}" for d in _distributions_of(name, packages)]
    return OK, f"target {name}: {', '.join(versions) or ', '.join(packages)}"


def _check_user_target(name: str) -> tuple[str, str]:
    """Whether a module:qualname target's module can be imported, looked for as a program
    started here would: the current directory first (`python app.py` run here puts the app's
    directory first; the `kname` command's own sys.path starts with its bin directory)."""
    module, qualname = name.split(":", 1)
    here = os.getcwd()
    spec = importable.find(module, first=[here])
    if spec is None:
        meant = importable.nearest(module, first=[here])
        hint = f" (did you mean {meant}:{qualname}?)" if meant else ""
        problem = (
            f"no module {module!r} can be imported from the current directory ({here}) or this "
            f"Python's sys.path{hint}"
        )
        return PROBLEM, f"target {name} (KNAME_TARGETS): {problem}"
    origin = spec.origin or next(iter(spec.submodule_search_locations or []), "")
    if _inside(origin, here) and importable.find(module) is None:
        where = f"found in the current directory ({origin}), as a program started here imports it"
        return OK, f"target {name}: {module}, {where}"
    packages = (module.split(".", 1)[0],)
    versions = [f"{d} {_version(d)}" for d in _distributions_of(name, packages)]
    return OK, f"target {name}: {', '.join(versions) or packages[0]}"


def _inside(path: str, directory: str) -> bool:
    try:
        return os.path.commonpath([os.path.realpath(path), os.path.realpath(directory)]) == (
            os.path.realpath(directory)
        )
    except ValueError:  # another drive, or a relative path with an absolute one
        return False


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


def installed_pair_differs() -> bool:
    """Whether the installed CUPTI binding and library (by their metadata) are of different
    CUDA releases: the ✗ line of _check_profiling."""
    binding, library = _version_or_none(CUPTI_BINDING), _version_or_none(CUPTI_LIBRARY)
    return bool(binding and library and releases_differ(binding, library))


def releases_differ(binding: str, library: str) -> bool:
    """Whether two versions (the CUPTI binding's, its library's) name different CUDA releases:
    a different major.minor. False when either has no major.minor to compare."""
    binding_release, library_release = _release(binding), _release(library)
    if binding_release is None or library_release is None:
        return False
    return binding_release != library_release


def _release(version: str) -> tuple[int, int] | None:
    match = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _check_profiling(config: Config) -> list[tuple[str, str]]:
    """kname profile's needs: the CUPTI binding, its library and the driver, by their versions.

    A gap is a problem (✗) in profile mode only: elsewhere names appear without CUPTI.
    """
    gap = PROBLEM if config.mode == "profile" else NOTE
    binding = _version_or_none(CUPTI_BINDING)
    library = _version_or_none(CUPTI_LIBRARY)
    try:
        from cupti import cupti
    except Exception as exc:  # ImportError, or OSError loading libcupti
        if binding is None:
            advice = _cupti_advice(binding, library, _driver_version())
            problem = f"the CUPTI binding is not installed; kname profile needs it: {advice}"
            return [(gap, f"profiling: {problem}")]
        problem = f"profiling: {CUPTI_BINDING} {binding} does not import ({_reason(exc)})"
        return [(gap, problem)]
    lines = [(OK, f"profiling: CUPTI binding {CUPTI_BINDING} {binding or '(version unknown)'}")]
    api = _call_or_none(getattr(cupti, "get_version", None))
    api_text = f", CUPTI API version {api}" if api is not None else ""
    if library is None:
        text = f"{CUPTI_LIBRARY} is not installed: CUPTI comes from the CUDA toolkit{api_text}"
        lines.append((NOTE, f"profiling: CUPTI library: {text} (its version is not checked)"))
    else:
        lines.append((NOTE, f"profiling: CUPTI library {CUPTI_LIBRARY} {library}{api_text}"))
    driver = _driver_version()
    if driver is None:
        text = f"no CUDA driver ({DRIVER_LIBRARIES[0]} cannot be loaded): kname profile needs a GPU"
        lines.append((NOTE, f"profiling: {text}"))
    else:
        lines.append((NOTE, f"profiling: CUDA driver for CUDA {driver}"))
    if binding and library and releases_differ(binding, library):
        # A failure in every mode: kname profile would run, and silently record no GPU time.
        problem = (
            f"profiling: {CUPTI_BINDING} {binding} and {CUPTI_LIBRARY} {library} are of different "
            "CUDA releases, so kname profile may record no GPU time, without any error: "
            f"{_cupti_advice(binding, library, driver)}"
        )
        lines.append((PROBLEM, problem))
    return lines


def cupti_release(
    binding: tuple[int, int] | None,
    library: tuple[int, int] | None,
    driver: tuple[int, int] | None,
    published: tuple[tuple[int, int], ...] = CUPTI_RELEASES,
) -> tuple[int, int]:
    """The CUDA release whose CUPTI binding and library to install together: the installed
    library's, else the binding's, where cupti-python is `published` for it and the driver (when
    known) runs it; else the newest such."""
    runnable = [r for r in published if driver is None or r <= driver] or list(published)
    for installed in (library, binding):
        if installed in runnable:
            return installed
    return max(runnable)


def _cupti_advice(binding: str | None, library: str | None, driver: str | None) -> str:
    """`pip install` of the CUPTI binding and library of one published CUDA release: of each
    that is missing or of another release (one line)."""
    driver_release = _release(driver) if driver else None
    release = cupti_release(
        _release(binding) if binding else None, _release(library) if library else None,
        driver_release,
    )  # fmt: skip
    text = ".".join(map(str, release))
    installed = ((CUPTI_BINDING, binding), (CUPTI_LIBRARY, library))
    wanted = [d for d, version in installed if version is None or _release(version) != release]
    advice = "pip install " + " ".join(f"'{d}=={text}.*'" for d in wanted)
    if driver_release is not None and driver_release < release:
        advice += f" (and a CUDA driver for CUDA {text} or newer: this one is for CUDA {driver})"
    return advice


def _driver_version() -> str | None:
    """The CUDA release the driver supports (`13.0`), or None without one. Asked of the driver
    itself: no CUDA Python package needed, and cuDriverGetVersion needs no cuInit."""
    import ctypes

    for name in DRIVER_LIBRARIES:
        try:
            driver = ctypes.CDLL(name)
            version = ctypes.c_int(0)
            if driver.cuDriverGetVersion(ctypes.byref(version)) == 0:
                return f"{version.value // 1000}.{version.value % 1000 // 10}"
        except (OSError, AttributeError):
            continue
    return None


def _check_profile_records() -> list[tuple[str, str]]:
    """Profile one tiny kernel as kname profile would: do CUPTI's GPU records arrive?"""
    if _driver_version() is None:
        return [(NOTE, "profile check: no CUDA driver here, so no GPU: skipped")]
    launch, why_not = _tiny_kernel()
    if launch is None:
        return [(NOTE, f"profile check: {why_not}: skipped")]
    try:
        from kname.documents.kernel_names import display_name
        from kname.documents.text import count_of
        from kname.profiling.session import ProfileSession

        session = ProfileSession()
        if not session.start():
            problem = "profile check: kname profile's collection did not start (said above)"
            return [(PROBLEM, problem)]
        try:
            launch()
        finally:
            session.stop()
    except Exception as exc:
        return [(PROBLEM, f"profile check: the test kernel failed ({_reason(exc)})")]
    join = session.join
    if not join.record_count:
        problem = (
            f"profile check: no GPU record arrived for {join.launch_count} launch calls: the "
            "CUPTI binding and library must come from one CUDA release (their versions above)"
        )
        return [(PROBLEM, problem)]
    kernels = ", ".join(display_name(k) for site in session.sites for k in site["kernels"])
    records = count_of(join.record_count, "GPU record")
    text = f"{records} arrived for {count_of(join.launch_count, 'launch call')} ({kernels})"
    return [(OK, f"profile check: {text}")]


def _tiny_kernel() -> tuple[Callable[[], None] | None, str]:
    """A function launching one tiny kernel on the GPU with numba-cuda, else with CuPy; or None
    and why not."""
    reasons = []
    launchers = (("numba-cuda", "numba", _numba_kernel), ("CuPy", "cupy", _cupy_kernel))
    for name, module, make in launchers:
        try:
            return make(), ""
        except Exception as exc:
            missing = isinstance(exc, ModuleNotFoundError) and exc.name == module
            reasons.append(f"{name} is not installed" if missing else f"{name}: {_reason(exc)}")
    return None, "; ".join(reasons)


def _numba_kernel() -> Callable[[], None]:
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        raise RuntimeError("NUMBA_ENABLE_CUDASIM=1: its simulator launches nothing on a GPU")
    if not cuda.is_available():
        raise RuntimeError("numba sees no GPU")

    @cuda.jit
    def kname_doctor_kernel(out):
        out[0] = 1

    def launch() -> None:
        out = cuda.device_array(1, dtype="int32")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba's "grid size 1 ... under-utilization"
            kname_doctor_kernel[1, 1](out)
        cuda.synchronize()

    return launch


def _cupy_kernel() -> Callable[[], None]:
    import cupy

    if not cupy.cuda.is_available():
        raise RuntimeError("CuPy sees no GPU")

    def launch() -> None:
        cupy.arange(4)  # one kernel, which fills the array
        cupy.cuda.runtime.deviceSynchronize()

    return launch


def _check_configuration() -> tuple[Config, list[tuple[str, str]]]:
    """The effective Config and its lines: each bad value, then the settings in effect."""
    try:
        config = read_config(builtin_targets=BUILTIN)
        strict = ""
    except ConfigError:
        # KNAME_STRICT=1 stops at the first problem; list them all.
        config = read_config({**os.environ, KNAME_STRICT: "0"}, builtin_targets=BUILTIN)
        strict = " (KNAME_STRICT is on: the program would stop here)"
    lines = [(PROBLEM, problem + strict) for problem in config.problems]
    lines.extend(_check_unknown_variables(config.problems))
    lines.extend(_check_report_destination(config.report))
    clean = not any(mark == PROBLEM for mark, _ in lines)
    lines.append((OK if clean else NOTE, "configuration in effect:"))
    settings = _settings_in_effect(config, strict=bool(config.strict or strict))
    width = max(map(len, settings))
    lines.extend(("", f"    {variable:<{width}} {value}") for variable, value in settings.items())
    return config, lines


def _settings_in_effect(config: Config, strict: bool) -> dict[str, str]:
    """Every variable kname reads (config.KNOWN_VARIABLES, in its order) -> its value in effect."""
    every_target = f"{', '.join(BUILTIN)} (every built-in target)"
    state = switch_state()[2]
    hook_off = os.environ.get(KNAME_DRIVER_HOOK, "").strip() == "0"
    described = {
        KNAME: {True: "on", False: "off"}.get(state, "off (its value is not understood)"),
        KNAME_TARGETS: every_target if config.targets is None else ",".join(config.targets),
        KNAME_SKIP: ",".join(config.skip) or "(none)",
        KNAME_USER: ",".join(config.user) or "(none)",
        KNAME_FORMAT: repr(config.format),
        KNAME_DEPTH: str(config.depth),
        KNAME_MODE: config.mode,
        KNAME_REPORT: {None: "(none)", "-": "- (stderr)"}.get(config.report, config.report),
        KNAME_DOMAIN: config.domain,
        KNAME_STRICT: "on" if strict else "off",
        KNAME_PROFILE_TRACE: config.trace or "(none)",
        KNAME_PROFILE_HTML: config.html or "(none)",
        KNAME_PROFILE_TOP: f"{config.top} call sites in the table",
        KNAME_PROFILE_TRACE_MAX: f"{config.trace_max} records in a trace at most",
        KNAME_PROFILE_FLUSH: f"every {config.flush:g} s" if config.flush else "at exit only",
        KNAME_PROFILE_DELAY: f"{config.delay:g} s" if config.delay else "none (from the start)",
        KNAME_PROFILE_DURATION: f"{config.duration:g} s" if config.duration else "to the end",
        KNAME_PROFILE_MEMORY: "on (memory per line)" if config.memory else "off",
        KNAME_PROFILE_BACKWARD: "on (per forward line)" if config.backward_lines else "off",
        KNAME_PROFILE_TORCH_TRACKER: "on (torch's allocator tracker, where it builds)"
        if config.torch_tracker
        else "off (torch's GPU trace)",
        KNAME_PROFILE_VERDICT: "on (launch calls timed: the launch-bound verdict)"
        if config.verdict
        else "off",
        KNAME_NATIVE: "on (where built)" if config.native else "off (pure Python)",
        KNAME_RANKS: "every rank" if config.ranks is None else format_ranks(config.ranks),
        KNAME_SOURCES: "on (saved documents keep their lines' source)" if config.sources else "off",
        KNAME_DRIVER_HOOK: "off" if hook_off else "on (where it can be: see its line above)",
        KNAME_PROFILE_TRIGGER: config.trigger or "(none: kname attach PID only)",
    }
    return {variable: described[variable] for variable in KNOWN_VARIABLES}


def _check_unknown_variables(problems: tuple[str, ...]) -> list[tuple[str, str]]:
    """A line for each KNAME_* variable kname does not read, but for the misspellings that
    `problems` already names."""
    lines = []
    for name, nearest in unknown_variables():
        if any(problem.startswith(f"{name} ") for problem in problems):
            continue
        hint = (
            f"the nearest is {nearest}" if nearest else f"kname reads {', '.join(KNOWN_VARIABLES)}"
        )
        lines.append((PROBLEM, f"{name} is not a kname variable; ignoring it ({hint})"))
    return lines


def _check_report_destination(destination: str | None) -> list[tuple[str, str]]:
    if destination in (None, "-"):
        return []
    # This process's own path ({rank}, {host}, {pid} filled in; config checked the template).
    destination = expand(destination, find_rank(), variable=KNAME_REPORT)
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


def _distributions_of(target: str, packages: tuple[str, ...]) -> list[str]:
    """The target's installed distributions: its unit's list, else those providing `packages`."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    if target in BUILTIN:
        installed = []
        for distribution in library(target).distributions:
            try:
                version(distribution)
            except PackageNotFoundError:
                continue
            installed.append(distribution)
        return installed
    try:
        provided = packages_distributions()
    except Exception:  # broken metadata of some unrelated package: versions are a nicety
        return []
    return list(dict.fromkeys(d for p in packages for d in provided.get(p, ())))


def _version(distribution: str) -> str:
    return _version_or_none(distribution) or "(version unknown)"


def _version_or_none(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _call_or_none(function: Callable[[], object] | None) -> object:
    """function(), or None when there is none or it raises (no driver, say)."""
    if function is None:
        return None
    try:
        return function()
    except Exception:
        return None


def _mentions(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return text in file.read()
    except OSError:
        return False
