"""The `kname` command, run as the console script the wheel installs into a fresh venv."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, Venv, copy_checkout, kernels, line_of, make_venv, run

import kname
from kname import cli, doctor
from kname.documents.owner import OWNER_VARIABLE

pytestmark = pytest.mark.slow

APP = kernels.program("""\
import sys


def main():
    out, x = np.zeros(4), np.ones(4)
    for _ in range(2):
        axpy[1, 4](out, 2.0, x)  # loop-line
    axpy[1, 4](out, 1.0, x)  # last-line
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


main()
""")

PROBE = """\
import os, sys
import kname
print(kname.is_installed(), *(os.environ.get(v) for v in ("KNAME", "KNAME_MODE", "KNAME_DEPTH",
      "KNAME_SKIP", "KNAME_TARGETS", "KNAME_FORMAT", "KNAME_DOMAIN", "KNAME_REPORT")), sep="|")
sys.exit(3)
"""


def run_kname(venv: Venv, *args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    """The venv's `kname` script, as from a shell with the venv activated and no KNAME set."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    environ.pop("PYTHONPATH", None)
    environ.pop(OWNER_VARIABLE, None)  # each run owns its KNAME_REPORT
    environ["PATH"] = f"{venv.root / 'bin'}{os.pathsep}{environ.get('PATH', '')}"
    environ.update(env or {})
    return subprocess.run(
        [str(venv.root / "bin" / "kname"), *args], capture_output=True, text=True, env=environ,
        cwd=cwd or venv.root,
    )  # fmt: skip


def census(*sites: tuple[str, str, int]) -> dict:
    """A hand-made census of schema 1 from (name, kernel, launches)."""
    total = sum(launches for _, _, launches in sites)
    return {
        "kname": "0.1.0",
        "schema": 1,
        "sites": [
            {
                "name": name,
                "kernel": kernel,
                "lib": "numba",
                "launches": launches,
                "share": round(launches / total, 6),
                "order": order,
            }
            for order, (name, kernel, launches) in enumerate(sites, 1)
        ],
        "total_launches": total,
    }


BEFORE = census(("step solver.py:12", "axpy", 30), ("step solver.py:13", "scale", 10),
                ("main train.py:40", "reduce", 10))  # fmt: skip
AFTER = census(("step solver.py:12", "axpy", 36), ("main train.py:40", "reduce", 10),
               ("step solver.py:15", "scale", 4))  # fmt: skip


@pytest.fixture
def censuses(tmp_path: Path) -> Path:
    (tmp_path / "before.json").write_text(json.dumps(BEFORE))
    (tmp_path / "after.json").write_text(json.dumps(AFTER))
    return tmp_path


def marked(output: str, mark: str) -> list[str]:
    return [line[2:] for line in output.splitlines() if line.startswith(mark + " ")]


def doctor_problems(output: str) -> list[str]:
    """kname doctor's ✗ lines, but for the one about this test environment's own CUPTI pair
    (seen by the test venvs) where its binding and library are of different CUDA releases."""
    problems = marked(output, "✗")
    if doctor.installed_pair_differs():
        ours = [p for p in problems if "are of different CUDA releases" in p]
        assert len(ours) == 1, output
        problems.remove(ours[0])
    return problems


# --- the command itself ---------------------------------------------------------------------


def test_the_wheel_installs_the_kname_command(kname_venv: Venv) -> None:
    result = run_kname(kname_venv, "--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"kname {kname.__version__}\n",
        "",
    )


@pytest.mark.parametrize("command", [[], ["run"], ["doctor"], ["report"]])
def test_help_of_every_command_shows_examples(kname_venv: Venv, command: list[str]) -> None:
    result = run_kname(kname_venv, *command, "--help")
    assert result.returncode == 0 and result.stderr == ""
    assert "examples:\n  kname " in result.stdout


def test_kname_without_a_command_prints_its_usage_and_exits_2(kname_venv: Venv) -> None:
    result = run_kname(kname_venv)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("usage: kname ")
    assert all(f"    {command} " in result.stderr for command in ("run", "profile", "doctor"))


def test_the_top_level_help_promises_no_options_it_does_not_show(kname_venv: Venv) -> None:
    result = run_kname(kname_venv, "--help")
    assert result.returncode == 0
    assert "below" not in result.stdout
    assert "KNAME_* variable per option: kname run --help" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "kname run: needs a command"),
        (["run", "--", "no-such-command-here"], "kname run: command not found: no-such-command"),
        (["report"], "kname report: needs a saved census or profile, e.g. kname report"),
        (["report", "x.json", "--fail-on-change"], "--fail-on-change needs --diff"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(kname_venv: Venv, args, message) -> None:
    result = run_kname(kname_venv, *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("typo", "meant"), [("reprot", "report"), ("rn", "run"), ("doctr", "doctor")]
)
def test_a_mistyped_command_is_refused_not_run_as_a_script(kname_venv, tmp_path, typo, meant):
    runs = (
        run_kname(kname_venv, typo, "census.json", cwd=tmp_path),
        kname_venv.python_run("-m", "kname", typo, "census.json", cwd=tmp_path),
    )
    for result in runs:
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr == (
            f"kname: unknown command {typo!r}; did you mean {meant!r}? (commands: run, profile, "
            "attach, doctor, report)\n"
        )


@pytest.mark.parametrize(
    ("command", "meant"),
    [
        (["run", "app.py"], "kname run python app.py"),  # a script, not executable
        (["run", "--", "./app.py", "5"], "kname run python ./app.py"),
        (["run", "new.py"], "kname run python new.py"),  # not written yet: still a script
        (["run", "notes"], "kname run python notes"),  # a file that is not executable
        (["run", "tool"], "kname run ./tool"),  # executable, but not on PATH
        (["profile", "app.py"], "kname profile python app.py"),
    ],
)
def test_a_command_not_found_says_the_command_line_likely_meant(kname_venv, tmp_path, command,
                                                                 meant) -> None:  # fmt: skip
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "notes").write_text("import sys\n")
    (tmp_path / "tool").write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "tool").chmod(0o755)
    result = run_kname(kname_venv, *command, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    word = command[-2] if command[-1] == "5" else command[-1]
    assert result.stderr == (
        f"kname {command[0]}: command not found: {word}; did you mean `{meant}`?\n"
    )


def test_a_script_named_like_a_command_still_runs(kname_venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "reprot").write_text(PROBE)
    result = kname_venv.python_run("-m", "kname", "reprot", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith("True|1|")


@pytest.mark.parametrize(
    ("args", "meant"),
    [(["--skip", "x", "app.py"], "kname run --skip x -- python app.py"),
     (["--skip=x", "--strict", "app.py", "3"], "kname run --skip=x --strict -- python app.py 3"),
     (["--targets", "numba", "--", "app.py"], "kname run --targets numba -- python app.py")],
)  # fmt: skip
def test_a_run_option_before_the_script_says_it_belongs_to_kname_run(kname_venv, args, meant):
    result = kname_venv.python_run("-m", "kname", *args)
    assert (result.returncode, result.stdout) == (2, "")
    option = args[0].split("=")[0]
    assert (
        result.stderr == f"kname: {option} is an option of kname run, after the word run: {meant}\n"
    )


words = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1).filter(
    lambda word: not word.startswith("-")
)
value_options = st.sampled_from(list(cli.RUN_OPTIONS)).map(lambda option: f"--{option}")
run_options = st.lists(
    st.one_of(
        st.tuples(value_options, words).map(list),
        st.tuples(value_options, words).map(lambda pair: ["=".join(pair)]),
        st.sampled_from(["--strict", "--show-ranges"]).map(lambda flag: [flag]),
    ),
    min_size=1,
    max_size=4,
)


@given(run_options, st.lists(words, max_size=3))
def test_the_command_meant_for_options_before_a_script_is_those_options_then_the_script(
    options, program
) -> None:
    args = [word for option in options for word in option] + program
    meant = cli._run_option_first(args).split("after the word run: ", 1)[1]
    words_meant = shlex.split(meant)
    assert words_meant[:2] == ["kname", "run"]
    end = words_meant.index("--")
    assert words_meant[2:end] == args[: len(args) - len(program)]
    assert words_meant[end + 1 :] == ["python", *(program or ["app.py"])]


def test_run_takes_a_target_of_ones_own_as_before(kname_venv: Venv, tmp_path: Path) -> None:
    program = ["python", "-c", "import os; print(os.environ['KNAME_TARGETS'])"]
    result = run_kname(kname_venv, "run", "--targets", "numba,mymod:launch", "--", *program)
    assert (result.returncode, result.stdout) == (0, "numba,mymod:launch\n"), result.stderr


def test_run_help_lists_the_accepted_values(kname_venv: Venv) -> None:
    result = run_kname(kname_venv, "run", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for accepted in ("nvtx (default), rename, census or profile", "1 to 16",
                     "numba, cupy, triton, pycuda, cuda_core", "module:qualname",
                     "{kernel} {function} {path} {module} {file} {line} {lib}",
                     "'{function} {path}:{line}'", "- (the census table on stderr at exit)",
                     "sets KNAME_STRICT=1", "--show-ranges"):  # fmt: skip
        assert accepted in text, accepted


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--mode", "loud"], "argument --mode: invalid choice: 'loud' (choose from 'nvtx', "),
     (["--depth", "99"], "argument --depth: '99' is not a whole number from 1 to 16"),
     (["--targets", "numbaa"], "argument --targets: 'numbaa' is neither a built-in target "
      "(numba, cupy, triton, pycuda, cuda_core, torch, jax) nor module:qualname; did you mean "
      "numba?"),
     (["--targets", "numba,cupyy"], "'cupyy' is neither a built-in target"),
     (["--targets", "app:", "--strict"], "'app:' is neither a built-in target")],
)  # fmt: skip
def test_run_refuses_a_bad_mode_depth_or_target_in_one_line(kname_venv, args, message) -> None:
    result = run_kname(kname_venv, "run", *args, "--", "python", "-c", "print('ran')")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


# --- kname run ------------------------------------------------------------------------------


def test_run_names_the_apps_lines_in_its_report(kname_venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    result = run_kname(
        kname_venv, "run", "--report", "out.json", "--", "python", "app.py",
        env={"NUMBA_ENABLE_CUDASIM": "1"}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == ""  # quiet unless asked
    document = json.loads((tmp_path / "out.json").read_text())
    assert [(s["name"], s["kernel"], s["launches"]) for s in document["sites"]] == [
        (f"main app.py:{line_of(APP, 'loop-line')}", "axpy", 2),
        (f"main app.py:{line_of(APP, 'last-line')}", "axpy", 1),
    ]


def test_run_passes_the_exit_code_and_its_options_through(kname_venv: Venv, tmp_path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    result = run_kname(
        kname_venv, "run", "--mode", "census", "--depth", "2", "--skip", "mypkg.ops",
        "--targets", "numba", "--format", "{kernel}@{line}", "--domain", "mine",
        "--report", "-", "--", "python", "probe.py", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == "True|1|census|2|mypkg.ops|numba|{kernel}@{line}|mine|-"


def test_run_passes_the_exit_code_of_a_numba_app_through(kname_venv: Venv, tmp_path) -> None:
    (tmp_path / "app.py").write_text(APP)
    result = run_kname(
        kname_venv, "run", "--", "python", "app.py", "5", env={"NUMBA_ENABLE_CUDASIM": "1"},
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 5, result.stderr


def test_python_m_kname_runs_a_script_with_kname_on(kname_venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    result = kname_venv.python_run("-m", "kname", "probe.py", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith("True|1|")


@pytest.fixture(scope="module")
def editable_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """kname installed as `pip install -e .` installs it: an editable wheel (a finder, no
    kname.pth) built by setuptools from a copy of the checkout."""
    root = tmp_path_factory.mktemp("editable")
    copy_checkout(root / "source")
    (root / "dist").mkdir()
    build = f"import setuptools.build_meta as b; b.build_editable({str(root / 'dist')!r})"
    run([sys.executable, "-c", build], cwd=root / "source")
    made = make_venv(root / "env")
    made.install(str(next((root / "dist").glob("*.editable-*.whl"))))
    assert not (made.site_packages / "kname.pth").exists()
    # The test environment's packages, which this venv sees, may hold an installed kname (CI
    # installs one), found before the editable finder (a class), which setuptools puts last.
    (made.site_packages / "zz_editable_first.pth").write_text(
        "import sys; sys.meta_path.sort(key=lambda f: getattr(f, '__name__', '') != "
        "'_EditableFinder')\n"
    )
    where = made.python_run("-c", "import kname; print(kname.__file__)").stdout
    assert where.startswith(str(root / "source")), where
    return made


SIMULATOR = {"NUMBA_ENABLE_CUDASIM": "1", OWNER_VARIABLE: ""}


@pytest.mark.parametrize("install", ["editable_venv", "venv_without_pth"])
def test_run_and_python_m_kname_work_without_kname_pth(request, install, tmp_path) -> None:
    venv = request.getfixturevalue(install)
    (tmp_path / "app.py").write_text(APP)
    expected = [
        (f"main app.py:{line_of(APP, 'loop-line')}", 2),
        (f"main app.py:{line_of(APP, 'last-line')}", 1),
    ]
    by_command = run_kname(venv, "run", "--report", "run.json", "--", "python", "app.py",
                           env=SIMULATOR, cwd=tmp_path)  # fmt: skip
    by_module = venv.python_run("-m", "kname", "app.py", cwd=tmp_path,
                                env={**SIMULATOR, "KNAME_REPORT": "module.json"})  # fmt: skip
    for result, report in ((by_command, "run.json"), (by_module, "module.json")):
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stderr
        document = json.loads((tmp_path / report).read_text())
        assert [(s["name"], s["launches"]) for s in document["sites"]] == expected


def test_run_keeps_the_programs_own_sitecustomize(venv_without_pth: Venv, tmp_path) -> None:
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text("import sys; sys.own_ran = True\n")
    probe = "import sys, kname; print(getattr(sys, 'own_ran', False), kname.is_installed())"
    result = run_kname(venv_without_pth, "run", "--", "python", "-c", probe,
                       env={"PYTHONPATH": str(tmp_path / "own")})  # fmt: skip
    assert result.stdout.split() == ["True", "True"], result.stderr


OWN_SITECUSTOMIZE = "import sys\nOWN = 42\nsys.own_ran = getattr(sys, 'own_ran', 0) + 1\n"


@pytest.mark.parametrize("install", ["editable_venv", "venv_without_pth", "kname_venv"])
def test_run_gives_the_programs_import_sitecustomize_its_own_module(
    request, install, tmp_path
) -> None:
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text(OWN_SITECUSTOMIZE)
    probe = "import sys, kname, sitecustomize as s; print(s.OWN, sys.own_ran, kname.is_installed())"
    result = run_kname(request.getfixturevalue(install), "run", "--", "python", "-c", probe,
                       env={"PYTHONPATH": str(tmp_path / "own")})  # fmt: skip
    assert (result.stdout.split(), result.stderr) == (["42", "1", "True"], "")


def old_python(version: str) -> str:
    """A Python `version`, older than kname supports, from PATH or pyenv; else the test skips."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = [shutil.which(f"python{version}")]
    found += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    for python in filter(None, found):
        if subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0:
            return python  # pyenv's shim for a version not selected fails
    pytest.skip(f"no Python {version} here")


@pytest.mark.parametrize("version", ["2.7", "3.6"])
def test_run_leaves_a_python_older_than_kname_supports_alone(kname_venv, tmp_path, version):
    # The program (kname's Python) starts a tool in an old Python: kname's start-up gate is on
    # its PYTHONPATH too, and must neither fail there nor hide the tool's own sitecustomize.
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text(OWN_SITECUSTOMIZE)
    tool = "import sys, sitecustomize as s; sys.stdout.write('%s %s' % (s.OWN, sys.own_ran))"
    program = f"import subprocess; subprocess.run([{old_python(version)!r}, '-c', {tool!r}])"
    result = run_kname(kname_venv, "run", "--", "python", "-c", program,
                       env={"PYTHONPATH": str(tmp_path / "own")})  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "42 1", "")


def test_run_with_a_second_copy_of_kname_on_the_path_runs_each_sitecustomize_once(
    venv_without_pth: Venv, tmp_path
) -> None:
    # A checkout on PYTHONPATH beside an installed kname: two bootstrap folders, each of which
    # must not take the other for the sitecustomize it shadows (that recursed without end).
    copy = tmp_path / "checkout" / "kname" / "_bootstrap"
    shutil.copytree(REPO / "kname" / "_bootstrap", copy)
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text(
        "import sys; sys.own_ran = getattr(sys, 'own_ran', 0) + 1\n"
    )
    probe = "import sys, kname; print(getattr(sys, 'own_ran', 0), kname.is_installed())"
    pythonpath = os.pathsep.join([str(copy), str(tmp_path / "own")])
    result = run_kname(venv_without_pth, "run", "--", "python", "-c", probe,
                       env={"PYTHONPATH": pythonpath})  # fmt: skip
    assert result.stdout.split() == ["1", "True"], result.stderr
    assert "Error in sitecustomize" not in result.stderr


def test_run_beside_the_sitecustomize_example_runs_each_sitecustomize_once(
    venv_without_pth: Venv, tmp_path
) -> None:
    # kname run's start-up folder first, then the example (which also runs the one it shadows),
    # then the program's own: each ran "the other" without end before.
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text(
        "import sys; sys.own_ran = getattr(sys, 'own_ran', 0) + 1\n"
    )
    probe = "import sys, kname; print(getattr(sys, 'own_ran', 0), kname.is_installed())"
    pythonpath = os.pathsep.join([str(REPO / "sitecustomize_example"), str(tmp_path / "own")])
    result = run_kname(venv_without_pth, "run", "--", "python", "-c", probe,
                       env={"PYTHONPATH": pythonpath})  # fmt: skip
    assert result.stdout.split() == ["1", "True"], result.stderr
    assert "Error in sitecustomize" not in result.stderr


def test_run_says_so_when_the_programs_python_has_no_kname(kname_venv: Venv, tmp_path) -> None:
    bare = make_venv(tmp_path / "bare")  # numba and the rest, but no kname
    # The test environment's packages may hold an installed kname (CI installs one): hide it.
    (bare.site_packages / "zz_no_kname.pth").write_text("import sys; sys.modules['kname'] = None\n")
    (tmp_path / "app.py").write_text(APP)
    result = run_kname(kname_venv, "run", "--report", "out.json", "--", str(bare.python),
                       "app.py", "4", env=SIMULATOR, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 4  # the program still ran, and its exit code passed through
    assert result.stderr == (
        f"kname: kname run: this Python ({bare.python}) cannot import kname, so nothing is "
        "named; install kname for it, or run the program with a Python that has kname\n"
    )
    assert not (tmp_path / "out.json").exists()


# --- kname report ---------------------------------------------------------------------------


def test_report_pretty_prints_a_saved_census(kname_venv: Venv, censuses: Path) -> None:
    result = run_kname(kname_venv, "report", "before.json", cwd=censuses)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "kname census (before.json, written by kname 0.1.0): 50 launches from 3 call sites",
        "call site          kernel  library  launches  share  first seen",
        "step solver.py:12  axpy    numba          30  60.0%           1",
        "step solver.py:13  scale   numba          10  20.0%           2",
        "main train.py:40   reduce  numba          10  20.0%           3",
    ]


def test_report_diff_lists_added_removed_and_changed_sites(kname_venv, censuses: Path) -> None:
    result = run_kname(kname_venv, "report", "before.json", "--diff", "after.json", cwd=censuses)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "kname census diff: before.json (50 launches) -> after.json (50 launches): "
        "1 added, 1 removed, 1 changed",
        "added    step solver.py:15 [scale]   0  ->   4   (+4)",
        "removed  step solver.py:13 [scale]  10  ->   0  (-10)",
        "changed  step solver.py:12 [axpy]   30  ->  36   (+6)",
    ]


def test_report_diff_fails_on_change_only_when_asked(kname_venv, censuses: Path) -> None:
    def diff(*args: str) -> subprocess.CompletedProcess:
        return run_kname(kname_venv, "report", *args, "--fail-on-change", cwd=censuses)

    assert diff("before.json", "--diff", "after.json").returncode == 1
    same = diff("before.json", "--diff", "before.json")
    assert same.returncode == 0
    assert same.stdout == (
        "kname census diff: before.json (50 launches) -> before.json (50 launches): "
        "no change in launches per call site\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "missing.json: no such file"),
        ("{not json", "bad.json: not valid JSON (Expecting property name"),
        (json.dumps({**BEFORE, "schema": 3}), "census schema 3 is not supported"),
        ("[1, 2]", "not a kname census"),
        (json.dumps({**BEFORE, "sites": [{"name": 1}]}), "sites[0] has no 'kernel'"),
        (
            json.dumps(BEFORE).replace('"launches": 30', '"launches": ' + "9" * 5000),
            "a number has more than",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_report_errors_are_one_line_and_exit_2(kname_venv, tmp_path, content, message) -> None:
    name = "missing.json" if content is None else "bad.json"
    if content is not None:
        (tmp_path / name).write_text(content)
    for args in ([name], ["before.json", "--diff", name]):
        (tmp_path / "before.json").write_text(json.dumps(BEFORE))
        result = run_kname(kname_venv, "report", *args, cwd=tmp_path)
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.startswith(f"kname report: {name}: ")
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_report_of_several_files_merges_them(kname_venv: Venv, censuses: Path) -> None:
    child = census(("step solver.py:12", "axpy", 5), ("worker pool.py:7", "axpy", 2))
    (censuses / "before.pid42.json").write_text(json.dumps(child))
    result = run_kname(kname_venv, "report", "before.json", "before.pid42.json", cwd=censuses)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "kname census (before.json + before.pid42.json, written by kname 0.1.0): "
        "57 launches from 4 call sites",
        "call site          kernel  library  launches  share  first seen",
        "step solver.py:12  axpy    numba          35  61.4%           1",
        "step solver.py:13  scale   numba          10  17.5%           2",
        "main train.py:40   reduce  numba          10  17.5%           3",
        "worker pool.py:7   axpy    numba           2   3.5%           2",
    ]  # first seen: the earliest in any file (a merge in any grouping gives the same)
    # The merge compared with one file where every line moved: no change, lines ignored.
    moved = census(("step solver.py:20", "axpy", 35), ("step solver.py:21", "scale", 10),
                   ("main train.py:44", "reduce", 10), ("worker pool.py:9", "axpy", 2))  # fmt: skip
    (censuses / "moved.json").write_text(json.dumps(moved))
    diff = ("report", "before.json", "before.pid42.json", "--diff", "moved.json",
            "--fail-on-change")  # fmt: skip
    assert run_kname(kname_venv, *diff, cwd=censuses).returncode == 1
    same = run_kname(kname_venv, *diff, "--ignore-lines", cwd=censuses)
    assert same.returncode == 0 and "(lines ignored)" in same.stdout, same.stdout + same.stderr


def test_report_diff_can_ignore_line_numbers(kname_venv: Venv, tmp_path: Path) -> None:
    moved = census(("step solver.py:14", "axpy", 30), ("step solver.py:15", "scale", 10),
                   ("main train.py:41", "reduce", 10))  # fmt: skip
    (tmp_path / "before.json").write_text(json.dumps(BEFORE))
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    args = ("report", "before.json", "--diff", "moved.json", "--fail-on-change")
    assert run_kname(kname_venv, *args, cwd=tmp_path).returncode == 1
    result = run_kname(kname_venv, *args, "--ignore-lines", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith("no change in launches per call site (lines ignored)\n")
    (tmp_path / "more.json").write_text(json.dumps(census(("step solver.py:99", "axpy", 31))))
    result = run_kname(kname_venv, "report", "before.json", "--diff", "more.json",
                       "--ignore-lines", cwd=tmp_path)  # fmt: skip
    assert result.stdout.splitlines()[1:] == [
        "removed  step solver.py:* [scale]  10  ->   0  (-10)",
        "removed  main train.py:* [reduce]  10  ->   0  (-10)",
        "changed  step solver.py:* [axpy]   30  ->  31   (+1)",
    ]


def test_the_ci_recipe_survives_an_unrelated_line_shift(kname_venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {"NUMBA_ENABLE_CUDASIM": "1"}
    run_app = ("run", "--mode", "census", "--", "python", "app.py")
    first = run_kname(kname_venv, "run", "--report", "before.json", *run_app[1:], env=env,
                      cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    (tmp_path / "app.py").write_text("# a comment moves every line down\n" + APP)
    second = run_kname(kname_venv, "run", "--report", "after.json", *run_app[1:], env=env,
                       cwd=tmp_path)  # fmt: skip
    assert second.returncode == 0, second.stderr
    diff = ("report", "before.json", "--diff", "after.json", "--fail-on-change")
    assert run_kname(kname_venv, *diff, cwd=tmp_path).returncode == 1  # by line: 2 added, 2 removed
    result = run_kname(kname_venv, *diff, "--ignore-lines", cwd=tmp_path)
    assert result.returncode == 0, result.stdout


def test_report_escapes_control_characters_in_names(kname_venv, tmp_path: Path) -> None:
    hostile = census(("step \x1b[2J\x1b]0;pwned\x07 a.py:1", "ax\x00py", 2),
                     ("fine \ud800 b.py:2", "k\tk", 1))  # fmt: skip
    (tmp_path / "hostile.json").write_text(json.dumps(hostile))
    for args in (["hostile.json"], ["hostile.json", "--diff", "other.json"]):
        (tmp_path / "other.json").write_text(json.dumps(BEFORE))
        result = run_kname(kname_venv, "report", *args, cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert all(line.isprintable() for line in result.stdout.splitlines())
        assert "step \\x1b[2J\\x1b]0;pwned\\x07 a.py:1" in result.stdout
        assert "ax\\x00py" in result.stdout and "k\\tk" in result.stdout
        assert "fine \\ud800 b.py:2" in result.stdout


def test_kname_commands_never_overwrite_the_users_census(kname_venv, censuses: Path) -> None:
    saved = (censuses / "before.json").read_bytes()
    env = {"KNAME": "1", "KNAME_REPORT": "before.json"}
    for args in (["report", "before.json"], ["doctor"], ["--version"]):
        run_kname(kname_venv, *args, env=env, cwd=censuses)
        assert (censuses / "before.json").read_bytes() == saved
    assert sorted(p.name for p in censuses.iterdir()) == ["after.json", "before.json"]


# --- kname doctor ---------------------------------------------------------------------------


def test_doctor_in_the_installed_venv_finds_everything(kname_venv: Venv, inject_lib) -> None:
    result = run_kname(
        kname_venv, "doctor", env={"KNAME": "1", "NVTX_INJECTION64_PATH": str(inject_lib)}
    )
    assert doctor_problems(result.stdout) == []
    assert result.returncode == int(doctor.installed_pair_differs()), result.stdout
    assert result.stderr == ""
    good = marked(result.stdout, "✓")
    assert f"start-up gate: {kname_venv.site_packages / 'kname.pth'}" in good
    assert "switch: on (KNAME='1'); kname started in this process" in good
    assert f"target numba: numba {version('numba')}, numba-cuda {version('numba-cuda')}" in good
    assert f"dependencies: wrapt {version('wrapt')}, nvtx {version('nvtx')}" in good
    assert f"NVTX tool attached: NVTX_INJECTION64_PATH={inject_lib}" in good
    assert "configuration in effect:" in good
    assert any(line.split() == ["KNAME_MODE", "nvtx"] for line in result.stdout.splitlines())


def test_doctor_with_the_switch_off_says_how_to_turn_it_on_and_exits_0(kname_venv) -> None:
    result = run_kname(kname_venv, "doctor")
    assert doctor_problems(result.stdout) == [], result.stdout  # off is how kname is installed
    assert result.returncode == int(doctor.installed_pair_differs())
    (switch,) = [line for line in marked(result.stdout, "–") if line.startswith("switch: ")]
    assert switch.startswith("switch: off (KNAME is not set): to name launches, set KNAME=1")
    assert any(line.startswith("NVTX tool: none attached") for line in marked(result.stdout, "–"))


def test_doctor_names_each_bad_value(kname_venv: Venv, tmp_path: Path) -> None:
    # The switch stays off: with KNAME=1 and KNAME_STRICT=1 the start-up gate itself would stop
    # the `kname` command before doctor could run.
    env = {"KNAME_DEPTH": "deep", "KNAME_MODE": "loud", "KNAME_STRICT": "1",
           "KNAME_REPORT": str(tmp_path / "no-such-dir" / "c.json")}  # fmt: skip
    result = run_kname(kname_venv, "doctor", env=env)
    assert result.returncode == 1
    problems = marked(result.stdout, "✗")
    assert not [p for p in problems if p.startswith("switch: ")]
    assert any(p.startswith("KNAME_DEPTH='deep'") and "1 to 16" in p for p in problems)
    assert any(p.startswith("KNAME_MODE='loud'") and "KNAME_STRICT is on" in p for p in problems)
    assert any(p.startswith("KNAME_REPORT=") and "does not exist" in p for p in problems)


def test_doctor_imports_no_gpu_library(kname_venv: Venv) -> None:
    code = (
        "import sys; from kname.cli import main; code = main(['doctor']);"
        "print(code, [m for m in ('numba', 'numba_cuda', 'cupy', 'triton') if m in sys.modules])"
    )
    result = kname_venv.python_run("-c", code, env={"KNAME": "1"})
    code = int(doctor.installed_pair_differs())  # this environment's CUPTI pair: see above
    assert result.stdout.splitlines()[-1] == f"{code} []", result.stdout + result.stderr


@pytest.fixture(scope="module")
def venv_without_pth(tmp_path_factory: pytest.TempPathFactory, kname_wheel: Path) -> Venv:
    made = make_venv(tmp_path_factory.mktemp("no-pth") / "env")
    made.install(str(kname_wheel))
    (made.site_packages / "kname.pth").unlink()
    return made


def test_doctor_without_kname_pth_says_the_switch_cannot_work(venv_without_pth: Venv) -> None:
    result = run_kname(venv_without_pth, "doctor", env={"KNAME": "1"})
    assert result.returncode == 1
    problems = doctor_problems(result.stdout)
    assert len(problems) == 2, result.stdout
    assert problems[0].startswith("no start-up gate: kname.pth is in none of ")
    assert str(venv_without_pth.site_packages) in problems[0]
    assert problems[1].startswith("switch: on (KNAME='1'), but kname did not start")
