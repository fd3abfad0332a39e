"""The start-up gate shipped in the wheel: kname.pth, in a fresh venv with the wheel installed."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from support import REPO, Venv, line_of, make_venv
from test_reliability import run_program

from kname.config import SWITCH_OFF

pytestmark = pytest.mark.slow

PROBE = (
    "import sys; print(*[m in sys.modules for m in "
    "('kname', 'kname._startup', 'kname.importhooks')]);"
    "import kname; print(kname.is_installed())"
)


def probe(venv: Venv, *python_args: str, env: dict[str, str] | None = None) -> list[str]:
    """Which of kname, kname._startup and kname.importhooks start-up imported, then whether kname
    installed."""
    result = venv.python_run(*python_args, "-c", PROBE, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_wheel_puts_kname_pth_in_site_packages(kname_venv: Venv) -> None:
    pth = kname_venv.site_packages / "kname.pth"
    assert pth.is_file()
    assert pth.read_text().startswith("import ")


@pytest.mark.parametrize("value", [None, "", "0", "false", "No", "OFF"])
def test_switched_off_start_up_imports_neither_kname_nor_wrapt(kname_venv: Venv, value) -> None:
    env = {} if value is None else {"KNAME": value}
    result = kname_venv.python_run(
        "-c", "import sys; print('kname' in sys.modules, 'wrapt' in sys.modules)", env=env
    )
    assert result.stdout.split() == ["False", "False"], result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_kname_env_switches_kname_on_at_start_up(kname_venv: Venv, value: str) -> None:
    assert probe(kname_venv, env={"KNAME": value}) == ["True", "True", "True", "True"]


def test_dash_x_kname_switches_kname_on_at_start_up(kname_venv: Venv) -> None:
    assert probe(kname_venv, "-X", "kname") == ["True", "True", "True", "True"]


def test_kname_is_importable_from_the_wheel_not_the_checkout(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", "import kname; print(kname.__file__)")
    assert Path(result.stdout.strip()).is_relative_to(kname_venv.site_packages)


def test_an_unknown_switch_value_warns_once_and_stays_off(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", "import kname; print(kname.is_installed())",
                                   env={"KNAME": "maybe"})  # fmt: skip
    assert result.stdout.split() == ["False"]
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "KNAME='maybe'" in lines[0]
    assert "1/true/yes/on" in lines[0] and "0/false/no/off" in lines[0]


def test_a_bad_kname_variable_gives_one_line_and_the_program_runs(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", "print('ran')", env={"KNAME": "1", "KNAME_DEPTH": "deep"})
    assert result.returncode == 0
    assert result.stdout.strip() == "ran"
    assert result.stderr.count("\n") == 1
    assert "KNAME_DEPTH='deep'" in result.stderr and "1 to 16" in result.stderr


def test_kname_strict_turns_a_bad_variable_into_an_error(kname_venv: Venv) -> None:
    result = kname_venv.python_run(
        "-c", "print('ran')", env={"KNAME": "1", "KNAME_MODE": "loud", "KNAME_STRICT": "1"}
    )
    assert result.returncode == 2
    assert "ran" not in result.stdout
    assert "KNAME_MODE='loud'" in result.stderr


def test_kname_strict_stops_for_a_target_that_is_not_found(kname_venv: Venv, tmp_path) -> None:
    (tmp_path / "mylaunch.py").write_text("def launch():\n    pass\n")
    env = {"KNAME": "1", "KNAME_TARGETS": "mylaunch:nofunc", "PYTHONPATH": str(tmp_path)}
    program = ("-c", "import mylaunch; print('ran')")
    lenient = kname_venv.python_run(*program, env=env)
    assert (lenient.returncode, lenient.stdout) == (0, "ran\n")
    assert lenient.stderr.count("\n") == 1 and "nofunc" in lenient.stderr
    strict = kname_venv.python_run(*program, env={**env, "KNAME_STRICT": "1"})
    assert (strict.returncode, strict.stdout) == (2, ""), strict.stderr
    assert strict.stderr.count("\n") == 1, strict.stderr
    assert "nofunc" in strict.stderr and "KNAME_STRICT is on: stopping" in strict.stderr


def test_kname_strict_stops_for_an_unwritable_report(kname_venv: Venv, tmp_path) -> None:
    env = {"KNAME": "1", "KNAME_REPORT": str(tmp_path / "missing" / "c.json")}
    lenient = kname_venv.python_run("-c", "print('ran')", env=env)
    assert (lenient.returncode, lenient.stdout) == (0, "ran\n")
    strict = kname_venv.python_run("-c", "print('ran')", env={**env, "KNAME_STRICT": "1"})
    assert (strict.returncode, strict.stdout) == (2, "ran\n")
    assert strict.stderr.count("\n") == 1, strict.stderr
    assert "census was not saved" in strict.stderr and "KNAME_STRICT is on" in strict.stderr


def test_a_misspelled_variable_is_one_line_at_start_up(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", "print('ran')", env={"KNAME": "1", "KNAME_MDOE": "census"})
    assert (result.returncode, result.stdout) == (0, "ran\n")
    assert result.stderr == (
        "kname: KNAME_MDOE is not a kname variable (did you mean KNAME_MODE?); ignoring it\n"
    )


def test_pip_uninstall_removes_kname_pth(tmp_path: Path, kname_wheel: Path) -> None:
    venv = make_venv(tmp_path / "env")
    venv.install(str(kname_wheel))
    assert (venv.site_packages / "kname.pth").is_file()
    venv.pip("uninstall", "-y", "-q", "kname")
    assert not (venv.site_packages / "kname.pth").exists()
    assert not (venv.site_packages / "kname").exists()


SITECUSTOMIZE_DIR = Path(__file__).resolve().parent.parent / "sitecustomize_example"


def sitecustomize_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """PYTHONPATH with the example first and another project's sitecustomize behind it."""
    other = tmp_path / "other"
    other.mkdir(exist_ok=True)
    (other / "sitecustomize.py").write_text("import sys; sys.other_sitecustomize_ran = True\n")
    return {"PYTHONPATH": f"{SITECUSTOMIZE_DIR}:{other}", **extra}


SITE_PROBE = (
    "import sys; print('kname._startup' in sys.modules, "
    "getattr(sys, 'other_sitecustomize_ran', False))"
)


def test_sitecustomize_example_switches_kname_on_and_chains(venv_without_pth, tmp_path) -> None:
    for python_args, env in (([], {"KNAME": "1"}), (["-X", "kname"], {})):
        result = venv_without_pth.python_run(
            *python_args, "-c", SITE_PROBE, env=sitecustomize_env(tmp_path, **env)
        )
        assert result.stdout.split() == ["True", "True"], result.stderr


def test_sitecustomize_example_imports_nothing_when_off(venv_without_pth, tmp_path) -> None:
    result = venv_without_pth.python_run("-c", SITE_PROBE, env=sitecustomize_env(tmp_path))
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_pth_and_sitecustomize_together_start_kname_once(kname_venv: Venv, tmp_path) -> None:
    result = kname_venv.python_run(
        "-c", "import kname.lifecycle as h; print(h.is_installed())",
        env=sitecustomize_env(tmp_path, KNAME="1", KNAME_DEPTH="x"),
    )  # fmt: skip
    assert result.stdout.split() == ["True"]
    assert result.stderr.count("KNAME_DEPTH") == 1


def test_kname_strict_does_not_stop_the_kname_command_itself(kname_venv: Venv) -> None:
    bad = {"KNAME": "1", "KNAME_MODE": "loud", "KNAME_STRICT": "1"}
    result = kname_venv.python_run("-m", "kname", "--version", env=bad)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("kname ")
    assert result.stderr.count("KNAME_MODE='loud'") == 1


COULD_NOT_START = (
    "kname: could not start (RuntimeError: broken on purpose); the program runs without kname"
)


def broken_kname(tmp_path: Path) -> Path:
    """A folder holding a kname package whose import fails, to put first on PYTHONPATH."""
    package = tmp_path / "broken" / "kname"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('broken on purpose')\n")
    return package.parent


def test_a_kname_that_fails_to_import_is_one_line_at_start_up(
    kname_venv: Venv, tmp_path: Path
) -> None:
    """Whatever breaks `import kname` itself at start-up (a broken install; an interpreter missing
    part of its standard library), the program runs, and stderr
    has one line in place of site's traceback under `Error processing line 1 of kname.pth`; the
    sitecustomize example behind kname.pth does not say it again."""
    broken = broken_kname(tmp_path)
    for path in (f"{broken}", f"{SITECUSTOMIZE_DIR}:{broken}"):
        result = kname_venv.python_run("-c", "print('ran')", env={"KNAME": "1", "PYTHONPATH": path})
        assert result.returncode == 0 and result.stdout.split() == ["ran"], result.stderr
        assert result.stderr.splitlines() == [COULD_NOT_START], path


def test_the_sitecustomize_gates_say_a_failed_import_in_one_line(
    venv_without_pth: Venv, tmp_path: Path
) -> None:
    """The same from the sitecustomize example, and from the one `kname run` puts on the path."""
    broken = broken_kname(tmp_path)
    for gate in (SITECUSTOMIZE_DIR, venv_without_pth.site_packages / "kname" / "_bootstrap"):
        env = {"KNAME": "1", "PYTHONPATH": f"{gate}:{broken}"}
        result = venv_without_pth.python_run("-c", "print('ran')", env=env)
        assert result.returncode == 0 and result.stdout.split() == ["ran"], result.stderr
        assert result.stderr.splitlines() == [COULD_NOT_START], gate


def cheap_off_values(source: str) -> tuple[str, ...]:
    """The tuple of off-values a start-up gate's cheap test compares KNAME with."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.NotIn)
            and isinstance(node.comparators[0], ast.Tuple)
        ):
            values = ast.literal_eval(node.comparators[0])
            if isinstance(values, tuple) and "" in values:
                return values
    raise AssertionError("no `not in (...)` test of KNAME found")


@pytest.mark.parametrize("gate", ["kname.pth", "sitecustomize.py"])
def test_the_cheap_gates_test_the_same_off_values_as_kname_config(gate: str) -> None:
    """The switch is parsed once, in kname.config; the gates' cheap test must agree with it, or a
    value kname calls off would import kname (or one it calls on would not start it)."""
    assert cheap_off_values((REPO / "kname" / "_bootstrap" / gate).read_text()) == SWITCH_OFF


# --------------------------------------------------------------------------
# What a switched-on start-up imports
# --------------------------------------------------------------------------

# Modules kname never imports on the C hot path: the nvtx package and numpy (which it imports)
# cost about 110 ms, and the extension calls NVTX itself.
NOT_ON_THE_C_PATH = ("numpy", "nvtx")
# Modules kname's start-up must not import on the C hot path: those, and wrapt, whose package
# imports asyncio (about 20 ms); kname imports it when a watched module is imported. Nor,
# with no KNAME_REPORT, kname's saved documents and the json they import (about 2 ms). Nor
# dataclasses and inspect, with the ast, dis and tokenize they import (4 to 5 ms, and 0.6 ms
# per dataclass made), nor sysconfig (0.5 ms), tempfile or the source cache (linecache).
NOT_AT_START_UP = (
    *NOT_ON_THE_C_PATH, "wrapt", "asyncio", "kname.documents", "json",
    "dataclasses", "inspect", "ast", "dis", "tokenize", "linecache", "sysconfig", "tempfile",
)  # fmt: skip

IMPORTED = "import json, sys; print(json.dumps(sorted(sys.modules)))"

# A user target launched once, under an NVTX tool: the modules there were at the program's
# first line and at its end, and which hot path ran.
LAUNCHES = """\
import json
import sys

at_start = sorted(sys.modules)
import noop
from kname import hotpath

noop.launch(1)  # launch-line
print(json.dumps({
    "at_start": at_start,
    "at_end": sorted(sys.modules),
    "c_ranges": hotpath.current().nvtx_range is not None,
}))
"""


def imported_at_start_up(venv: Venv, env: dict[str, str]) -> set[str]:
    """The modules in sys.modules at a `-c` program's first line."""
    done = venv.python_run("-c", IMPORTED, env=env)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def why_no_c_ranges(venv: Venv) -> str:
    """Why the venv's kname makes no NVTX ranges in C ("" where it does)."""
    probe = (
        "from kname import hotpath; h = hotpath.choose(True); "
        "print(h.why_python or ('' if h.nvtx_range else 'built without the NVTX headers'))"
    )
    done = venv.python_run("-c", probe)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_switched_on_start_up_on_the_c_hot_path_imports_none_of_the_modules_it_defers(
    kname_venv: Venv,
) -> None:
    why_not = why_no_c_ranges(kname_venv)
    if why_not:
        pytest.skip(f"kname's C hot path makes no NVTX ranges here: {why_not}")
    off = imported_at_start_up(kname_venv, {"KNAME_NATIVE": "1"})
    on = imported_at_start_up(kname_venv, {"KNAME": "1", "KNAME_NATIVE": "1"})
    assert "kname._startup" in on
    assert sorted(set(NOT_AT_START_UP) & (on - off)) == []


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_switched_on_program_has_its_ranges_and_nvtx_only_on_the_python_path(
    kname_venv: Venv, inject_lib: Path, tmp_path: Path, native: str
) -> None:
    """Under an NVTX tool, started by KNAME=1, each hot path names the launch; the C one calls
    NVTX itself and never imports the nvtx package, the Python one imports it at start-up."""
    why_not = why_no_c_ranges(kname_venv)
    if native == "1" and why_not:
        pytest.skip(f"kname's C hot path makes no NVTX ranges here: {why_not}")
    env = {"KNAME": "1", "KNAME_TARGETS": "noop:launch", "KNAME_NATIVE": native}
    done, capture = run_program(kname_venv, inject_lib, tmp_path, LAUNCHES, env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["c_ranges"] is (native == "1")
    if native == "1":
        assert sorted(set(NOT_ON_THE_C_PATH) & set(seen["at_end"])) == []
    else:
        assert "nvtx" in seen["at_start"]
    assert "wrapt" not in seen["at_start"]
    assert "wrapt.importer" in seen["at_end"]  # noop is watched: its import went through wrapt
    assert capture.ranges("kname") == [f"<module> prog.py:{line_of(LAUNCHES, 'launch-line')}"]
    assert capture.balanced(), capture.stack_errors()


# A watched module imported by a KNAME=1 program: wrapt is imported then, and its loader calls
# kname's hooks (the target's, and one more watched here to count its calls).
WATCHED_IMPORT = """\
import json
import os
import sys
import traceback

from kname import importhooks

wrapt_at_start = "wrapt" in sys.modules
calls = []


def called(module):
    stack = [frame.filename for frame in traceback.extract_stack()]
    by_wrapt = any(path.endswith(os.path.join("wrapt", "importer.py")) for path in stack)
    calls.append({"module": module.__name__, "by_wrapt": by_wrapt})


importhooks.watch("noop", called)
import noop

noop.launch(1)  # launch-line
registry = sys.modules["wrapt.importer"]._post_import_hooks
print(json.dumps({
    "wrapt_at_start": wrapt_at_start,
    "calls": calls,
    "in_wrapt": sum(isinstance(hook, importhooks.Watch) for hook in registry.get("noop", [])),
    "loader": type(noop.__loader__).__name__,
}))
"""


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_watched_import_imports_wrapt_whose_loader_calls_each_hook_once(
    kname_venv: Venv, inject_lib: Path, tmp_path: Path, native: str
) -> None:
    env = {"KNAME": "1", "KNAME_TARGETS": "noop:launch", "KNAME_NATIVE": native}
    done, capture = run_program(kname_venv, inject_lib, tmp_path, WATCHED_IMPORT, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout) == {
        "wrapt_at_start": False,
        "calls": [{"module": "noop", "by_wrapt": True}],
        "in_wrapt": 2,  # the target's hook and this one, kept for a reload
        "loader": "SourceFileLoader",  # wrapt's loader put the module's own back
    }
    assert capture.ranges("kname") == [f"<module> prog.py:{line_of(WATCHED_IMPORT, 'launch-line')}"]
    assert capture.balanced(), capture.stack_errors()


# numba on the simulator in a KNAME=1 program: the watched numba modules are imported inside
# numba's own import, where kname first imports wrapt; each launch is still named by its line.
NUMBA_LAUNCHES = """\
import json
import sys

wrapt_at_start = "wrapt" in sys.modules
import numpy as np
from numba import cuda


@cuda.jit
def inc(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += 1


out = np.zeros(4)
inc[1, 4](out)  # launch-line
print(json.dumps({
    "wrapt_at_start": wrapt_at_start,
    "wrapt_at_end": "wrapt.importer" in sys.modules,
    "out": out.tolist(),
}))
"""


@pytest.mark.parametrize("native", ["1", "0"])
def test_numba_on_the_simulator_is_named_though_wrapt_came_in_with_numbas_import(
    kname_venv: Venv, inject_lib: Path, tmp_path: Path, native: str
) -> None:
    env = {"KNAME": "1", "KNAME_NATIVE": native, "NUMBA_ENABLE_CUDASIM": "1"}
    done, capture = run_program(kname_venv, inject_lib, tmp_path, NUMBA_LAUNCHES, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout) == {
        "wrapt_at_start": False,
        "wrapt_at_end": True,
        "out": [1.0] * 4,
    }
    assert capture.ranges("kname") == [f"<module> prog.py:{line_of(NUMBA_LAUNCHES, 'launch-line')}"]
    assert capture.balanced(), capture.stack_errors()
