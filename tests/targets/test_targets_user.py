"""KNAME_TARGETS `module:qualname` entries: which are refused, what their messages say, and that a
kernel launched inside one (a launcher of the user's own) sits in exactly one kname range.

Nesting runs real numba kernels on the simulator, in a subprocess under NVTX capture; the
launcher is a package of the test's own (`mypkg.gpu:launch`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, cleaned, kernels, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.launches

# --------------------------------------------------------------------------
# A kernel inside a user-named launcher: one range, counted once
# --------------------------------------------------------------------------

GPU = kernels.program("""\
def _run(out, x):
    axpy[1, 32](out, 2.0, x)  # inner-launch


def launch(out, x):
    \"\"\"The user's own launcher (a KNAME_TARGETS entry): launches a numba kernel.\"\"\"
    _run(out, x)


def launch_twice(out, x):
    launch(out, x)  # nested-target
    launch(out, x)


def other(out, x):
    \"\"\"Not a target: launches through the same helper.\"\"\"
    _run(out, x)
""")

HEADER = """
import numpy as np
import kname
kname.install()
out, x = np.zeros(32), np.ones(32)
"""


def run_nesting_app(source: str, lib: Path, tmp_path: Path, targets: str) -> tuple[str, Capture]:
    """Run `source` as app.py (numba simulator) under NVTX capture; return (source, capture)."""
    source = textwrap.dedent(HEADER) + textwrap.dedent(source)
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "gpu.py").write_text(GPU)
    (tmp_path / "app.py").write_text(source)
    env = {
        "PYTHONPATH": f"{REPO}:{tmp_path}",
        "NUMBA_ENABLE_CUDASIM": "1",
        "KNAME_FORMAT": "{kernel}|{function}|{file}:{line}",
        "KNAME_TARGETS": targets,
    }
    args = [sys.executable, str(tmp_path / "app.py")]
    done, capture = run_captured(args, lib, tmp_path, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    assert capture.balanced(), capture.stack_errors()
    return source, capture


def test_a_kernel_inside_a_user_named_launcher_is_in_one_range_counted_once(inject_lib, tmp_path):
    source, capture = run_nesting_app(
        """
        import mypkg.gpu
        for _ in range(10):
            mypkg.gpu.launch(out, x)  # outer-line
        assert sum(kname.names().values()) == 10, kname.names()
        assert out[0] == 20  # each launch ran once: out = 2 * x + out
        """,
        inject_lib,
        tmp_path,
        targets="numba,mypkg.gpu:launch",
    )
    outer = f"launch|<module>|app.py:{line_of(source, 'outer-line')}"
    assert capture.ranges("kname") == [outer] * 10
    assert capture.max_depth("kname") == 1


def test_a_launch_line_reached_inside_and_outside_a_user_launcher_is_named_once_each_way(
    inject_lib, tmp_path
):
    # The same kernel line (`_run`) is reached through the named launcher and, before and after,
    # through a function that is not a target: the cached site of the one must not answer the
    # other.
    source, capture = run_nesting_app(
        """
        import mypkg.gpu
        for _ in range(2):
            mypkg.gpu.other(out, x)
            mypkg.gpu.launch(out, x)  # outer-line
        names = kname.names()
        assert sum(names.values()) == 4 and len(names) == 2, names
        assert out[0] == 8
        """,
        inject_lib,
        tmp_path,
        targets="numba,mypkg.gpu:launch",
    )
    inner = f"axpy|_run|gpu.py:{line_of(GPU, 'inner-launch')}"
    outer = f"launch|<module>|app.py:{line_of(source, 'outer-line')}"
    assert capture.ranges("kname") == [inner, outer, inner, outer]
    assert capture.max_depth("kname") == 1


def test_the_outermost_of_two_nested_user_launchers_names_the_launch(inject_lib, tmp_path):
    source, capture = run_nesting_app(
        """
        import mypkg.gpu
        mypkg.gpu.launch_twice(out, x)  # outer-line
        assert kname.names() == {next(iter(kname.names())): 1}, kname.names()
        """,
        inject_lib,
        tmp_path,
        targets="numba,mypkg.gpu:launch,mypkg.gpu:launch_twice",
    )
    assert capture.ranges("kname") == [
        f"launch_twice|<module>|app.py:{line_of(source, 'outer-line')}"
    ]


def test_a_launcher_added_to_a_running_install_names_the_kernels_inside_it(inject_lib, tmp_path):
    # numba's wrappers were made before the launcher was a target: they are made again, so a
    # kernel inside the launcher is not a second range, counted twice.
    source, capture = run_nesting_app(
        """
        kname.install(targets=["mypkg.gpu:launch"])  # numba is named already (KNAME_TARGETS)
        import mypkg.gpu
        mypkg.gpu.launch(out, x)  # outer-line
        assert sum(kname.names().values()) == 1, kname.names()
        """,
        inject_lib,
        tmp_path,
        targets="numba",
    )
    assert capture.ranges("kname") == [f"launch|<module>|app.py:{line_of(source, 'outer-line')}"]


def test_a_launcher_referenced_before_install_leaves_the_kernel_its_own_range(inject_lib, tmp_path):
    source, capture = run_nesting_app(
        """
        kname.uninstall()
        from mypkg.gpu import launch  # the original: kname cannot reach this reference
        kname.install()
        import mypkg.gpu
        launch(out, x)
        mypkg.gpu.launch(out, x)  # outer-line
        """,
        inject_lib,
        tmp_path,
        targets="numba,mypkg.gpu:launch",
    )
    assert capture.ranges("kname") == [
        f"axpy|_run|gpu.py:{line_of(GPU, 'inner-launch')}",
        f"launch|<module>|app.py:{line_of(source, 'outer-line')}",
    ]


# --------------------------------------------------------------------------
# Targets kname itself runs on: refused with one line
# --------------------------------------------------------------------------

RUNS_ON = [
    "builtins:len",
    "builtins:isinstance",
    "builtins:getattr",
    "sys:_getframe",
    "os.path:join",
    "threading:Thread.run",
    "importlib:import_module",
    "itertools:count",
    "kname.callsite:resolve",
    "wrapt:FunctionWrapper",
    "nvtx:push_range",
    "numpy:asarray",
]


def test_targets_kname_runs_on_are_refused_with_one_line_each(tmp_path) -> None:
    # In a subprocess: on the code before the fix, builtins:len spun forever after a
    # RecursionError.
    done = run_program(
        f"""
        import importlib, kname
        for entry in {RUNS_ON!r}:
            module_name, qualname = entry.split(":")
            owner = importlib.import_module(module_name)
            *path, attribute = qualname.split(".")
            for part in path:
                owner = getattr(owner, part)
            before = vars(owner)[attribute]
            kname.install(targets=[entry])
            assert vars(owner)[attribute] is before, entry
            kname.uninstall()
        print("done")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    lines = done.stderr.splitlines()
    assert len(lines) == len(RUNS_ON), lines
    for entry, line in zip(RUNS_ON, lines, strict=True):
        assert line.startswith(f"kname: install(targets=...) entry {entry!r} is refused"), line


def run_program(source: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "prog.py").write_text(textwrap.dedent(source))
    environ = {k: v for k, v in os.environ.items() if not cleaned(k)}
    environ.update(PYTHONPATH=f"{REPO}:{tmp_path}", NUMBA_ENABLE_CUDASIM="1", **env)
    return subprocess.run([sys.executable, "prog.py"], capture_output=True, text=True,
                          env=environ, cwd=tmp_path, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize("entry", ["builtins:len", "builtins:isinstance", "builtins:getattr"])
def test_a_builtin_beside_numba_is_refused_and_numba_still_named(entry: str, tmp_path) -> None:
    done = run_program(
        """
        import kname
        kname.install()
        import numpy as np
        from numba import cuda

        @cuda.jit
        def fill(out):
            out[cuda.grid(1)] = len(out)

        out = np.zeros(4)
        fill[1, 4](out)
        print(list(kname.names().values()), out.tolist())
        """,
        tmp_path,
        KNAME_TARGETS=f"numba,{entry}",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"kname: KNAME_TARGETS entry {entry!r} is refused"), lines
    assert done.stdout.strip() == "[1] [4.0, 4.0, 4.0, 4.0]"


# --------------------------------------------------------------------------
# A target that is not a function: what to name instead
# --------------------------------------------------------------------------

MUTLIB = """
class Runner:
    def __call__(self, x):
        return x


class Plain:
    pass


runner = Runner()
"""


@pytest.fixture
def mutlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A module of the test's own, importable (imported by the test)."""
    (tmp_path / "mutlib.py").write_text(MUTLIB)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mutlib", raising=False)
    import mutlib

    yield mutlib
    sys.modules.pop("mutlib", None)


def refusal(capsys: pytest.CaptureFixture[str], entry: str) -> str:
    import kname

    kname.install(targets=[entry])
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"kname: install(targets=...) entry {entry!r} is not a function"), line
    return line


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("mutlib:Runner.__call__", "class mutlib.Runner has no __call__ of its own (it is type's)"),
        ("mutlib:Runner", "(name a launch function or method)"),
    ],
)
def test_a_class_without_its_own_call_is_never_offered_a_call_target(mutlib, capsys, entry, said):
    # `del Runner.__call__` leaves Runner.__call__ found on its metaclass (type.__call__, which
    # makes instances): kname suggested `mutlib:Runner.__call__.__call__`, and for the class
    # itself `mutlib:Runner.__call__`, neither of which launches anything.
    del mutlib.Runner.__call__
    line = refusal(capsys, entry)
    assert "such as" not in line, line
    assert said in line, line


def test_a_class_is_offered_its_call_method(mutlib, capsys) -> None:
    line = refusal(capsys, "mutlib:Runner")
    assert line.endswith("(name a launch function or method, such as mutlib:Runner.__call__)")


def test_an_instance_is_offered_its_class_call_method(mutlib, capsys) -> None:
    # An instance's own __call__ attribute is never what calling it runs: its class's is.
    line = refusal(capsys, "mutlib:runner")
    assert line.endswith("(name a launch function or method, such as mutlib:Runner.__call__)")


def test_a_class_that_cannot_be_called_is_offered_nothing(mutlib, capsys) -> None:
    line = refusal(capsys, "mutlib:Plain")
    assert line.endswith("(name a launch function or method)"), line
