"""Names for a call site: the display name (KNAME_FORMAT) and an identifier-safe form.

Runs once per new call site, never per launch.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import NamedTuple

from kname import cells, faults
from kname._warnings import warn_once
from kname.config import MAX_NAME_LENGTH
from kname.paths import short_path

MAX_IDENTIFIER = 200
CALLER_SEPARATOR = " < "
NO_USER_FRAME = "<no user frame>"
# A cut name ends in " ..." and a digest of the whole name, which keeps long names apart.
_DIGEST = 10
_CUT_HEAD = MAX_NAME_LENGTH - len(" ...") - _DIGEST

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]+")
_roots: tuple[str, ...] | None = None
# path_roots() as far as it got: the candidates, then each made absolute, kept as soon as it is,
# so that an attempt a timer interrupts is resumed by the next. None once _roots is set.
_roots_made: list[str | None] | None = None
_roots_from: list[str] | None = None

# Code that Python 3.12+ runs in the frame of the code it is written in (PEP 709); generator
# expressions keep a frame of their own on every version.
INLINED = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>"})
# Python 3.10 only (no co_qualname): per file, the qualified names its code is created under.
_MAX_FILES = 64
_created_names: dict[str, tuple[list[str], dict[tuple[str, int], list]]] = {}
# The file each `{path}` shown in a name was read from (a cell's code too), for the source a
# saved document keeps (kname.documents.sources): the first file of a path wins.
_MAX_SHOWN_FILES = 4096
_shown_files: dict[str, str] = {}


class FrameFacts(NamedTuple):
    """What a name may say about one frame of the call site (a tuple: made at every new site,
    where a frozen dataclass's __init__ cost a microsecond)."""

    function: str
    path: str
    module: str
    file: str
    line: int


_new_facts = tuple.__new__


def frame_facts(frame: FrameType) -> FrameFacts:
    """Read the name-relevant facts of a live frame."""
    return facts_of(frame, frame_place(frame), function_name(frame))


def frame_place(frame: FrameType) -> tuple[str, int]:
    """`{path}` and `{line}` of a live frame: a notebook or IPython cell's code by its cell
    (`<cell 3>`) and line there, else its file's short path and line."""
    filename = frame.f_code.co_filename
    # A cell's code runs under IPython, or has a pseudo file name (`<ipython-input-3-...>`, a
    # timing magic's): elsewhere no code is a cell's, and that is asked at no cost.
    if "IPython" in sys.modules or filename.startswith("<"):
        place = cells.cell_place(frame)
        if place is not None:
            return place
    roots = _roots if _roots is not None else path_roots()  # made once: read, not called
    return _short_path(filename, roots), frame.f_lineno or 0


def file_path(filename: str) -> str:
    """`{path}` of code from the real file `filename` (not a cell's), as frame_place gives it,
    the file noted as shown (facts_of): for the C wrapper's naming of a miss, once per file."""
    roots = _roots if _roots is not None else path_roots()
    path = _short_path(filename, roots)
    if path not in _shown_files:
        _show_file(path, filename)
    return path


def facts_of(frame: FrameType, place: tuple[str, int], function: str) -> FrameFacts:
    """The facts of a live frame, from its place (frame_place) and function (function_name)."""
    path, line = place
    if path not in _shown_files:  # once per path
        _show_file(path, frame.f_code.co_filename)
    module = frame.f_globals.get("__name__")
    file = path[path.rfind("/") + 1 :]
    facts = (function, path, module if isinstance(module, str) else "?", file, line)
    return _new_facts(FrameFacts, facts)  # the tuple made in C: FrameFacts() runs its __new__


def _show_file(path: str, filename: str) -> None:
    if len(_shown_files) < _MAX_SHOWN_FILES and filename not in cells.TIMED_FILES:
        # As the name shows it: UTF-8, an undecodable byte replaced (display_name); most paths
        # are ASCII, asked here without a call (once per new file).
        _shown_files.setdefault(path if path.isascii() else _valid_utf8(path), filename)


def shown_files() -> dict[str, str]:
    """{`{path}` as this process's names show it: the file it was read from}."""
    return dict(_shown_files)


def function_name(frame: FrameType) -> str:
    """`{function}`: the qualified name of the frame's code, the same on every Python 3.10+.

    As Python 3.12+ gives it: `Solver.step`, `train.<locals>.inner`, `<lambda>`, `<module>`. A
    list, set or dict comprehension is named after the code it is written in, which 3.12+ runs it
    in (PEP 709); a generator expression keeps its own name (`Solver.step.<locals>.<genexpr>`) on
    every version. On 3.10, which has no `co_qualname`, the name is read from the code that
    creates the function (once per file). Code timed by `%timeit` is named as code in a cell.
    """
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None) or _created_name(code, frame.f_globals)
    if "<" not in qualname and code.co_filename not in cells.TIMED_FILES:
        return qualname  # most functions: nothing to fold, not %timeit's (asked at every miss)
    return fold_comprehensions(cells.untimed_name(code.co_filename, qualname))


def fold_comprehensions(qualname: str) -> str:
    """`qualname` with its list, set and dict comprehensions folded into the code around them:
    `Solver.step.<locals>.<listcomp>` is `Solver.step`, a top-level `<listcomp>` is `<module>`."""
    if "<" not in qualname:  # no comprehension, nor `<locals>`: most functions
        return qualname
    parts = [part for part in qualname.split(".") if part not in INLINED]
    # Only a folded name can end in `<locals>`: it was the comprehension's.
    while parts and parts[-1] == "<locals>":
        parts.pop()
    return ".".join(parts) or "<module>"


# The fields a template may name, in the order template_fields numbers them.
FIELDS = ("kernel", "function", "path", "module", "file", "line", "lib")


def template_fields(template: str) -> tuple[str | int, ...] | None:
    """`template` as its literal texts and the FIELDS index of each field between them, for the
    C wrapper, which renders a name from these as _render does; None where a field has a format
    spec, a conversion or another name (and for a template str.format refuses): Python renders."""
    import _string  # str.format's own parser, built in

    parts: list[str | int] = []
    try:
        for literal, field, spec, conversion in _string.formatter_parser(template):
            if literal:
                parts.append(literal)
            if field is None:
                continue
            if spec or conversion or field not in FIELDS:
                return None
            parts.append(FIELDS.index(field))
    except ValueError:
        return None
    return tuple(parts)


def display_name(template: str, kernel: str, lib: str, frames: list[FrameFacts]) -> str:
    """The name shown in the profiler: the call site, then its callers, each by the template.

    At most MAX_NAME_LENGTH characters: a longer name is cut, and said once.
    """
    if len(frames) == 1:
        name = _render(template, kernel, lib, frames[0])
    else:
        name = CALLER_SEPARATOR.join([_render(template, kernel, lib, frame) for frame in frames])
    if name.isascii() and len(name) <= MAX_NAME_LENGTH:
        return name  # most names, at every miss: no call more
    # File names may hold lone surrogates (undecodable bytes); NVTX needs valid UTF-8.
    return _cut(_valid_utf8(name))


def _valid_utf8(text: str) -> str:
    """`text` with each lone surrogate (an undecodable byte of a file name) replaced."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def kernel_only_name(kernel: str) -> str:
    """The name of a launch with no user frame on its stack (a kernel run as a thread's target)."""
    return _cut(_valid_utf8(f"{kernel} {NO_USER_FRAME}".strip()))


def kernel_label(kernel: object) -> str:
    """A kernel's name from the kernel object itself (for `site_name(kernel=...)`), or the text.

    The name of the function it was made from (numba-cuda, numba's simulator, Triton, cupyx.jit),
    else its `name` (CuPy), else its own or its type's name. Never raises.
    """
    if isinstance(kernel, str):
        return kernel
    for attribute in ("py_func", "fn", "_func"):
        name = _name_of(_attribute(kernel, attribute))
        if name:
            return name
    name = _attribute(kernel, "name")
    if isinstance(name, str) and name:
        return name
    return _name_of(kernel) or type(kernel).__qualname__


def identifier_name(kernel: str, frame: FrameFacts) -> str:
    """An identifier-safe name such as `axpy__mymodel_solver_py_L42` (for kernel renaming)."""
    kernel_part = _identifier_piece(kernel.rsplit(".", 1)[-1]) or "kernel"
    path_part = _identifier_piece(frame.path) or "site"
    name = f"{kernel_part}__{path_part}_L{max(frame.line, 0)}"
    if name[0].isdigit():
        name = "k" + name
    if len(name) > MAX_IDENTIFIER:
        # A stable digest of the whole name keeps two long names apart after the cut.
        digest = sha1_hex(name)[:10]
        name = f"{name[: MAX_IDENTIFIER - 11]}_{digest}"
    return name


def path_roots() -> tuple[str, ...]:
    """sys.path and the working directory, snapshotted at the first call.

    Not at install time: the .pth gate runs before Python puts the script's folder on sys.path.
    """
    global _roots, _roots_from, _roots_made
    if _roots is not None:
        return _roots
    candidates = _roots_from
    if candidates is None:
        candidates = _roots_from = [*sys.path, _cwd(), "~"]
    made = _roots_made
    if made is None or len(made) != len(candidates):
        made = _roots_made = [None] * len(candidates)
    for index, path in enumerate(candidates):
        if made[index] is None:  # set by index: a signal handler may fill some meanwhile
            made[index] = os.path.expanduser(path) if path == "~" else _absolute(path)
    *absolute, home = made
    unwanted = {"", os.sep, home}
    _roots = tuple([p for p in dict.fromkeys(absolute) if p is not None and p not in unwanted])
    _roots_from = _roots_made = None
    return _roots


def _created_name(code: CodeType, module_globals: dict) -> str:
    """Python 3.10: the qualified name that the code creating `code`'s function gave it, found
    in its file compiled again; the bare name where the source is gone or has changed."""
    if code.co_name == "<module>":
        return code.co_name
    found = _created_names_in(code.co_filename, module_globals).get(
        (code.co_name, code.co_firstlineno), []
    )
    qualnames = {qualname for _, qualname in found}
    if len(qualnames) == 1:
        return qualnames.pop()
    # Two functions of one name on one line (`lambda: lambda: 0`): the one compiled the same.
    return next((qualname for twin, qualname in found if twin == code), code.co_name)


def _created_names_in(filename: str, module_globals: dict) -> dict[tuple[str, int], list]:
    """(name, first line) -> [(code, qualified name)] for every function, class body, lambda and
    comprehension in the source of `filename`, compiled once while linecache keeps that source.

    Keyed by name and line, not by the code itself: pytest rewrites its test modules' asserts, so
    their code differs from the file's compiled again.
    """
    import linecache  # deferred, as the rest of Python 3.10's naming: not at every start-up

    lines = linecache.getlines(filename, module_globals)
    cached = _created_names.get(filename)
    if cached is not None and cached[0] is lines:
        return cached[1]
    names: dict[tuple[str, int], list] = {}
    try:
        module = compile("".join(lines), filename, "exec", dont_inherit=True)
        _collect_created_names(module, module.co_name, names)
    except RecursionError:
        return names  # named near the recursion limit: bare names, this time only
    except (SyntaxError, ValueError, MemoryError) as exc:
        # The file changed since it was run, or is not Python: bare names.
        if faults.from_outside(exc, compile, "".join(lines), filename, "exec", 0, True):
            raise
    if lines:
        if len(_created_names) >= _MAX_FILES:
            _created_names.pop(next(iter(_created_names), ""), None)
        _created_names[filename] = (lines, names)
    return names


def _collect_created_names(
    code: CodeType, qualname: str, names: dict[tuple[str, int], list]
) -> None:
    """Add `code`, created under `qualname`, and the code it creates, to `names`."""
    # Python 3.10 creates a function as LOAD_CONST <code>, LOAD_CONST <qualified name>,
    # MAKE_FUNCTION: the name is the compiler's own. A class body is created under the bare
    # class name, and stores its qualified name first thing: LOAD_CONST, STORE_NAME __qualname__.
    import dis

    load_const, store_name = dis.opmap["LOAD_CONST"], dis.opmap["STORE_NAME"]
    consts, created, stored = code.co_consts, {}, None
    if any(isinstance(c, CodeType) for c in consts) or "__qualname__" in code.co_names:
        for (first, a), (second, b) in itertools.pairwise(_instructions(code)):
            if first != load_const:
                continue
            if second == load_const and isinstance(consts[a], CodeType):
                created.setdefault(id(consts[a]), consts[b])
            elif second == store_name and code.co_names[b] == "__qualname__" and stored is None:
                stored = consts[a]  # the compiler's store comes before any of the user's
    if code.co_name != "<module>" and isinstance(stored, str):
        qualname = stored
    if isinstance(qualname, str):
        names.setdefault((code.co_name, code.co_firstlineno), []).append((code, qualname))
    for constant in consts:
        if isinstance(constant, CodeType):
            _collect_created_names(constant, created.get(id(constant), constant.co_name), names)


def _instructions(code: CodeType) -> Iterator[tuple[int, int]]:
    """(opcode, argument) of each instruction of Python 3.10's bytecode: two bytes each, a large
    argument spread over EXTENDED_ARG prefixes. Much cheaper than dis.get_instructions."""
    from dis import EXTENDED_ARG

    raw, extended = code.co_code, 0
    for at in range(0, len(raw), 2):
        operation, argument = raw[at], raw[at + 1] | extended
        extended = argument << 8 if operation == EXTENDED_ARG else 0
        if operation != EXTENDED_ARG:
            yield operation, argument


@functools.lru_cache(maxsize=4096)
def _short_path(filename: str, roots: tuple[str, ...]) -> str:
    # A new call site is usually in a file seen before: parse each file name once.
    return short_path(filename, roots)


def _render(template: str, kernel: str, lib: str, frame: FrameFacts) -> str:
    return template.format(
        kernel=kernel,
        function=frame.function,
        path=frame.path,
        module=frame.module,
        file=frame.file,
        line=frame.line,
        lib=lib,
    )


def _cut(name: str) -> str:
    if len(name) <= MAX_NAME_LENGTH:
        return name
    warn_once(
        "name-length",
        f"a call-site name was longer than {MAX_NAME_LENGTH} characters (see KNAME_FORMAT and "
        f"KNAME_DEPTH); such names are cut to {MAX_NAME_LENGTH}, ending in a digest of the whole",
    )
    digest = sha1_hex(name)[:_DIGEST]
    return f"{name[:_CUT_HEAD]} ...{digest}"


def sha1_hex(text: str) -> str:
    """The hex SHA-1 of `text` in UTF-8 (a lone surrogate, from an undecodable file name, as
    its escape)."""
    import hashlib  # deferred: about 2 ms of every KNAME=1 start-up, for rare long names

    return hashlib.sha1(text.encode("utf-8", "backslashreplace")).hexdigest()


def _attribute(thing: object, attribute: str) -> object:
    try:
        return getattr(thing, attribute, None)
    except Exception as exc:  # a __getattr__ that queries a driver (PyCUDA's Function) may fail
        if faults.from_outside(exc, getattr, thing, attribute, None):
            raise
        return None


def _name_of(function: object) -> str | None:
    name = _attribute(function, "__qualname__") or _attribute(function, "__name__")
    return name if isinstance(name, str) and name else None


def _identifier_piece(text: str) -> str:
    return _NOT_IDENTIFIER.sub("_", text).strip("_")


def _absolute(path: str) -> str:
    try:
        return os.path.abspath(path) if path else ""
    except (OSError, ValueError) as exc:  # (a TimeoutError from outside is an OSError too)
        if faults.from_outside(exc, os.path.abspath, path):
            raise
        return ""


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError as exc:  # the working directory was deleted
        if faults.from_outside(exc, os.getcwd):
            raise
        return ""
