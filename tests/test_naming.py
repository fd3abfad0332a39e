"""Tests for kname.naming: display names from templates, identifier-safe names, path roots."""

from __future__ import annotations

import inspect
import os
import re
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kname import naming
from kname.config import DEFAULT_FORMAT, FORMAT_FIELDS, MAX_NAME_LENGTH, format_problem
from kname.naming import (
    CALLER_SEPARATOR,
    MAX_IDENTIFIER,
    FrameFacts,
    display_name,
    frame_facts,
    identifier_name,
    path_roots,
)
from kname.paths import short_path

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROPERTY = settings(max_examples=300, deadline=None)

STEP = FrameFacts("Solver.step", "mymodel/solver.py", "mymodel.solver", "solver.py", 42)
TRAIN = FrameFacts("train", "mymodel/train.py", "mymodel.train", "train.py", 10)
MAIN = FrameFacts("<module>", "run.py", "__main__", "run.py", 3)


def facts(path: str = "mymodel/solver.py", line: int = 42, function: str = "step") -> FrameFacts:
    return FrameFacts(function, path, "m", path.rsplit("/", 1)[-1], line)


# --------------------------------------------------------------------------
# display_name
# --------------------------------------------------------------------------


def test_the_default_template_gives_function_path_and_line() -> None:
    assert display_name(DEFAULT_FORMAT, "axpy", "numba", [STEP]) == (
        "Solver.step mymodel/solver.py:42"
    )


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{kernel}", "axpy"),
        ("{kernel} @ {file}:{line}", "axpy @ solver.py:42"),
        ("{lib}/{module}.{function}", "numba/mymodel.solver.Solver.step"),
        ("{path}:{line:>5}", "mymodel/solver.py:   42"),
        ("{line:04d} {{{kernel}}}", "0042 {axpy}"),
    ],
)
def test_a_custom_template_renders_every_field(template: str, expected: str) -> None:
    assert display_name(template, "axpy", "numba", [STEP]) == expected


def test_deeper_frames_follow_as_callers_each_rendered_by_the_template() -> None:
    name = display_name("{kernel} {file}:{line}", "axpy", "numba", [STEP, TRAIN, MAIN])
    assert name.split(CALLER_SEPARATOR) == [
        "axpy solver.py:42",
        "axpy train.py:10",
        "axpy run.py:3",
    ]
    assert display_name("{function}:{line}", "axpy", "numba", [STEP, MAIN]) == (
        "Solver.step:42 < <module>:3"
    )


def test_display_name_of_one_frame_has_no_caller_separator() -> None:
    assert CALLER_SEPARATOR not in display_name(DEFAULT_FORMAT, "k", "numba", [MAIN])


def test_frame_facts_reads_a_live_frame() -> None:
    frame = inspect.currentframe()
    here = frame.f_lineno
    got = frame_facts(frame)
    assert got.function == "test_frame_facts_reads_a_live_frame"
    assert got.module == __name__
    assert got.path == short_path(__file__, path_roots())
    assert got.file == "test_naming.py"
    assert got.line == here + 1


def test_frame_facts_of_a_method_uses_the_qualified_name() -> None:
    class Solver:
        def step(self):
            return frame_facts(sys._getframe())

    got = Solver().step()
    assert got.function.endswith("Solver.step")


def test_frame_facts_of_code_without_a_module_name_says_question_mark() -> None:
    namespace: dict = {}
    exec("import sys\ndef f():\n    return sys._getframe()\n", namespace)
    namespace.pop("__name__", None)
    got = frame_facts(namespace["f"]())
    assert got.module == "?"
    assert got.path == "<string>"


# --------------------------------------------------------------------------
# The length of a name
# --------------------------------------------------------------------------

CUT = re.compile(r" \.\.\.[0-9a-f]{10}$")


def full_name(template: str, kernel: str, lib: str, frames: list[FrameFacts]) -> str:
    """What display_name renders before any cut: each frame by the template, joined."""
    return CALLER_SEPARATOR.join(
        template.format(kernel=kernel, lib=lib, line=f.line, function=f.function, path=f.path,
                        module=f.module, file=f.file)
        for f in frames
    )  # fmt: skip


def test_a_name_over_the_limit_is_cut_with_a_digest_and_said_once(capsys) -> None:
    template = "{line:>999}" * 11_000  # the template of the report: 11 MB per name
    for line in (1, 2):
        name = display_name(template, "axpy", "numba", [facts(line=line)])
        assert len(name) == MAX_NAME_LENGTH
        assert CUT.search(name), name[-20:]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(MAX_NAME_LENGTH) in err[0], err


def test_a_template_whose_names_are_all_over_the_limit_is_refused_in_one_short_line() -> None:
    problem = format_problem("{line:>999}" * 11_000)
    assert problem is not None and f"over {MAX_NAME_LENGTH} characters" in problem
    assert len(problem) < 300 and "\n" not in problem
    assert format_problem("{line:>999}") is None


specs = st.one_of(
    st.just(""),
    st.builds("{}{}".format, st.sampled_from(["", "<", ">", "^"]), st.integers(0, 999)),
)
pieces = st.one_of(
    st.builds(lambda name, spec: "{" + name + (":" + spec if spec else "") + "}",
              st.sampled_from(FORMAT_FIELDS), specs),
    st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=30),
)  # fmt: skip
templates = st.lists(pieces, min_size=1, max_size=40).map("".join)
frame_facts_lists = st.lists(
    st.builds(FrameFacts, st.text(max_size=60), st.text(max_size=200), st.text(max_size=40),
              st.text(max_size=40), st.integers(0, 10**6)),
    min_size=1, max_size=16,
)  # fmt: skip


@PROPERTY
@given(templates, st.text(max_size=300), frame_facts_lists)
def test_a_name_is_never_longer_than_the_limit_and_short_ones_are_left_whole(
    template, kernel, frames
) -> None:
    full = full_name(template, kernel, "numba", frames).encode("utf-8", "replace").decode()
    name = display_name(template, kernel, "numba", frames)
    assert len(name) <= MAX_NAME_LENGTH
    if len(full) <= MAX_NAME_LENGTH:
        assert name == full
    else:
        assert CUT.search(name)
        head = CUT.split(name)[0]
        assert full.startswith(head) and len(head) > MAX_NAME_LENGTH - 20


@PROPERTY
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 30))
def test_two_long_names_that_differ_only_past_the_limit_stay_apart(line_a, line_b, repeat) -> None:
    assume(line_a != line_b)
    template = "{path}" + "-" * MAX_NAME_LENGTH + "{line}" * repeat
    a = display_name(template, "k", "numba", [facts(line=line_a)])
    b = display_name(template, "k", "numba", [facts(line=line_b)])
    assert len(a) == len(b) == MAX_NAME_LENGTH
    assert a != b


# --------------------------------------------------------------------------
# kernel_label: site_name(kernel=<object>)
# --------------------------------------------------------------------------


class PyFuncKernel:  # as numba-cuda's dispatcher
    def __init__(self, function):
        self.py_func = function


class FnKernel:  # as numba's simulator kernel and Triton's JITFunction
    def __init__(self, function):
        self.fn = function


class NamedKernel:  # as CuPy's RawKernel
    name = "my_raw_kernel"


class Fussy:  # answers every unknown attribute, as PyCUDA's Function does, by failing
    def __getattr__(self, name):
        raise RuntimeError(f"driver query {name} failed")


def axpy():
    pass


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("axpy", "axpy"),
        (PyFuncKernel(axpy), "axpy"),
        (FnKernel(axpy), "axpy"),
        (NamedKernel(), "my_raw_kernel"),
        (axpy, "axpy"),
        (Fussy(), "Fussy"),
        (3, "int"),
    ],
    ids=["text", "numba", "simulator", "cupy", "function", "fussy", "other"],
)
def test_kernel_label_names_a_kernel_object_by_its_function(kernel, expected) -> None:
    assert naming.kernel_label(kernel) == expected


# --------------------------------------------------------------------------
# identifier_name
# --------------------------------------------------------------------------


def test_identifier_name_example() -> None:
    assert identifier_name("axpy", facts()) == "axpy__mymodel_solver_py_L42"


@pytest.mark.parametrize(
    ("kernel", "path", "line", "expected"),
    [
        ("mymodel.kernels.axpy", "a/b.py", 1, "axpy__a_b_py_L1"),  # the last dotted part
        ("", "x.py", 3, "kernel__x_py_L3"),
        ("...", "<stdin>", 7, "kernel__stdin_L7"),
        ("ä", "<cell 3>", 2, "kernel__cell_3_L2"),
        ("3d_stencil", "x.py", 1, "k3d_stencil__x_py_L1"),
        ("k", "///", -5, "k__site_L0"),
    ],
)
def test_identifier_name_cleans_each_part(kernel: str, path: str, line: int, expected: str) -> None:
    assert identifier_name(kernel, facts(path, line)) == expected


def test_a_long_identifier_is_cut_to_the_limit_with_a_digest() -> None:
    name = identifier_name("k" * 500, facts())
    assert len(name) == MAX_IDENTIFIER
    assert re.fullmatch(r"k+_[0-9a-f]{10}", name)


def test_two_long_names_with_the_same_head_do_not_collide() -> None:
    path = "pkg/" + "deep/" * 60
    first = identifier_name("axpy", facts(path + "one.py", 1))
    second = identifier_name("axpy", facts(path + "two.py", 1))
    assert first[:150] == second[:150]
    assert first != second


kernels = st.one_of(st.text(), st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,300}", fullmatch=True))
paths = st.one_of(
    st.text(),
    st.lists(st.text(min_size=1, max_size=40), max_size=20).map("/".join),
)
lines = st.integers(-(10**12), 10**12)


@PROPERTY
@given(kernels, paths, st.text(), lines)
def test_identifier_name_is_always_a_short_identifier(kernel, path, function, line) -> None:
    name = identifier_name(kernel, facts(path, line, function))
    assert IDENTIFIER.match(name), name
    assert len(name) <= MAX_IDENTIFIER


@PROPERTY
@given(kernels, paths, lines)
def test_identifier_name_is_stable(kernel: str, path: str, line: int) -> None:
    first = identifier_name(kernel, facts(path, line))
    again = identifier_name(str(kernel), FrameFacts("other", path, "other", "x", line))
    assert first == again


# Names from the domain: kernels and path components without underscores, so that each
# distinct site has a distinct full name, which the cut must keep apart.
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
kernel_names = st.builds(
    str.__add__, st.sampled_from(LETTERS), st.text(alphabet=LETTERS + "0123456789", max_size=80)
)
site_paths = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=30),
    min_size=1,
    max_size=12,
)
sites = st.tuples(kernel_names, site_paths.map(lambda p: "/".join(p) + ".py"), lines)


@PROPERTY
@given(sites, sites)
def test_long_names_of_two_different_sites_never_collide(first, second) -> None:
    assume(first != second)
    assume(first[2] >= 0 and second[2] >= 0)  # negative lines all read L0
    a = identifier_name(first[0], facts(first[1], first[2]))
    b = identifier_name(second[0], facts(second[1], second[2]))
    assert a != b


@PROPERTY
@given(kernel_names, site_paths, site_paths, st.integers(0, 10**6))
def test_sites_sharing_a_long_head_never_collide(kernel, head, tails, line) -> None:
    common = "/".join(["x" * 30] * 8 + head)
    a = identifier_name(kernel, facts(common + "/a/" + "/".join(tails) + ".py", line))
    b = identifier_name(kernel, facts(common + "/b/" + "/".join(tails) + ".py", line))
    assert len(a) == len(b) == MAX_IDENTIFIER
    assert a != b


# --------------------------------------------------------------------------
# path_roots
# --------------------------------------------------------------------------


@pytest.fixture
def fresh_roots(monkeypatch: pytest.MonkeyPatch):
    """Forget the snapshot of path roots for one test (and restore it afterwards)."""
    monkeypatch.setattr(naming, "_roots", None)
    return monkeypatch


def test_path_roots_exclude_slash_home_and_empty(fresh_roots, tmp_path) -> None:
    home = os.path.expanduser("~")
    project = tmp_path / "project"
    project.mkdir()
    fresh_roots.setattr(sys, "path", ["", os.sep, home, home + os.sep, str(project) + os.sep])
    fresh_roots.chdir(tmp_path)
    roots = path_roots()
    assert os.sep not in roots
    assert home not in roots
    assert "" not in roots
    assert roots == (str(project), str(tmp_path))


def test_path_roots_are_absolute_and_without_repeats(fresh_roots, tmp_path) -> None:
    fresh_roots.chdir(tmp_path)
    fresh_roots.setattr(sys, "path", ["rel", str(tmp_path / "rel"), str(tmp_path)])
    assert path_roots() == (str(tmp_path / "rel"), str(tmp_path))


def test_path_roots_are_a_snapshot_taken_at_the_first_call(fresh_roots, tmp_path) -> None:
    fresh_roots.setattr(sys, "path", [str(tmp_path / "a")])
    fresh_roots.chdir(tmp_path)
    first = path_roots()
    sys.path.append(str(tmp_path / "b"))
    assert path_roots() is first


def test_a_file_under_a_root_is_named_relative_to_it(fresh_roots, tmp_path) -> None:
    fresh_roots.setattr(sys, "path", [str(tmp_path)])
    fresh_roots.chdir(tmp_path)
    assert short_path(str(tmp_path / "pkg" / "mod.py"), path_roots()) == "pkg/mod.py"
