"""The pytest plugin, in real inner pytest sessions (pytester, each in a subprocess) whose tests
launch numba kernels on the CUDA simulator: the report, baselines, the fixture, pytest-xdist,
the entry point, and no change at all without --kname.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from support import REPO, Venv, kernels, line_of

pytest_plugins = ["pytester"]

# Every inner session loads the plugin from this checkout; `no:kname` keeps out the entry point
# of a kname installed in the test environment, which would register the module a second time.
PLUGIN = ("-p", "no:kname", "-p", "kname.pytest_plugin")
# Plugins of the test environment the inner sessions have no use for: hypothesis's alone takes
# half of an inner session's start.
UNUSED = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")

SUITE = kernels.program("""\
import pytest


def step(out, x, times):
    for _ in range(times):
        axpy[1, 8](out, 2.0, x)  # step-line


@pytest.fixture
def warm():
    step(np.zeros(8), np.ones(8), 5)  # a fixture's launches are not the test's


def test_steps(warm):
    step(np.zeros(8), np.ones(8), STEPS)


def test_direct():
    axpy[1, 8](np.zeros(8), 1.0, np.ones(8))  # direct-line


def test_quiet():
    pass
""")

STEP_LINE = line_of(SUITE, "step-line")
DIRECT_LINE = line_of(SUITE, "direct-line")


def suite(steps: int = 3, shift: int = 0) -> str:
    """SUITE with test_steps making `steps` launches, its code `shift` lines further down."""
    return SUITE.replace("STEPS", str(steps)).replace(
        "\n\ndef step(", "\n" * shift + "\n\ndef step("
    )


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose sessions see this checkout's kname and run kernels on the simulator."""
    for name in list(os.environ):
        if name.startswith(("KNAME", "NVTX_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    # pytester makes its folder the home directory, and kname never shortens paths relative to
    # the home directory: it would name files after the user's folders.
    monkeypatch.setenv("HOME", str(pytester.path / "home"))
    return pytester


def run(inner: pytest.Pytester, *args: str) -> pytest.RunResult:
    return inner.runpytest_subprocess(*PLUGIN, *UNUSED, *args, timeout=300)


def test_the_report_lists_each_tests_launches_per_call_site(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite())
    result = run(inner, "--kname-report", "launches.json")
    result.assert_outcomes(passed=3)
    report = json.loads((inner.path / "launches.json").read_text())
    assert report["report"] == "pytest" and report["schema"] == 1
    assert report["total_launches"] == 4
    sites = {nodeid: test["sites"] for nodeid, test in report["tests"].items()}
    assert sites == {
        "test_gpu.py::test_direct": [
            {"name": f"test_direct test_gpu.py:{DIRECT_LINE}", "kernel": "axpy", "lib": "numba",
             "launches": 1, "share": 1.0, "order": 1},
        ],
        "test_gpu.py::test_quiet": [],
        "test_gpu.py::test_steps": [  # 3, not 8: the fixture's 5 launches are left out
            {"name": f"step test_gpu.py:{STEP_LINE}", "kernel": "axpy", "lib": "numba",
             "launches": 3, "share": 1.0, "order": 1},
        ],
    }  # fmt: skip
    assert {test["outcome"] for test in report["tests"].values()} == {"passed"}
    result.stdout.fnmatch_lines(
        [
            "*- kname -*",
            "kname: 4 launches from 2 call sites in 2 tests (test bodies only)",
            f"kname: each test's launches written to {inner.path / 'launches.json'}",
        ]
    )


def test_a_baseline_passes_fails_with_a_diff_and_is_updated(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite(steps=3))
    missing = run(inner, "--kname-baseline", "baseline.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(
        ["*--kname-baseline *baseline.json: no such file (write it first*"]
    )

    written = run(inner, "--kname-baseline", "baseline.json", "--kname-update-baseline")
    written.assert_outcomes(passed=3)
    written.stdout.fnmatch_lines(["kname: baseline *baseline.json updated with 3 tests"])

    same = run(inner, "--kname-baseline", "baseline.json")
    same.assert_outcomes(passed=3)
    same.stdout.fnmatch_lines(["kname: baseline *baseline.json: 0 tests changed"])

    # Moved down by four lines, same launches: not a change.
    inner.makepyfile(test_gpu=suite(steps=3, shift=4))
    run(inner, "--kname-baseline", "baseline.json").assert_outcomes(passed=3)

    inner.makepyfile(test_gpu=suite(steps=4))
    changed = run(inner, "--kname-baseline", "baseline.json")
    changed.assert_outcomes(passed=2, failed=1)
    changed.stdout.fnmatch_lines(
        [
            "*_ test_steps _*",
            "kname: this test's launches per call site differ from the baseline "
            "(3 launches in it, 4 now): 1 changed",
            "changed  step test_gpu.py [[]axpy[]]  3  ->  4  (+1)",
            "(call sites compared without line numbers; baseline *baseline.json; accept the new "
            "counts with --kname-update-baseline)",
            "*kname: baseline *baseline.json: 1 test changed",
            "FAILED test_gpu.py::test_steps - kname: this test's launches*",
        ]
    )

    run(inner, "--kname-baseline", "baseline.json", "--kname-update-baseline").assert_outcomes(
        passed=3
    )
    run(inner, "--kname-baseline", "baseline.json").assert_outcomes(passed=3)


def test_a_test_that_starts_launching_fails_and_a_new_test_passes(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite())
    run(inner, "--kname-baseline", "baseline.json", "--kname-update-baseline")
    louder = suite().replace(
        "def test_quiet():\n    pass", "def test_quiet():\n    step(np.zeros(8), np.ones(8), 2)"
    )
    inner.makepyfile(
        test_gpu=louder + "\n\ndef test_new():\n    step(np.zeros(8), np.ones(8), 1)\n"
    )
    result = run(inner, "--kname-baseline", "baseline.json")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*(0 launches in it, 2 now): 1 added",
            "added  step test_gpu.py [[]axpy[]]  0  ->  2  (+2)",
            "*kname: baseline *: 1 test changed, 1 test not in it (passed; --kname-update-baseline "
            "adds them)",
            "FAILED test_gpu.py::test_quiet - *",
        ]
    )


def test_updating_keeps_the_tests_that_did_not_run_or_failed(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite(steps=3))
    run(inner, "--kname-baseline", "baseline.json", "--kname-update-baseline")
    broken = suite(steps=7).replace("def test_direct():\n", "def test_direct():\n    assert 0\n")
    inner.makepyfile(test_gpu=broken)
    result = run(inner, "-k", "not quiet", "--kname-baseline", "baseline.json",
                 "--kname-update-baseline")  # fmt: skip
    result.assert_outcomes(passed=1, failed=1, deselected=1)
    tests = json.loads((inner.path / "baseline.json").read_text())["tests"]
    assert sorted(tests) == ["test_gpu.py::test_direct", "test_gpu.py::test_quiet",
                             "test_gpu.py::test_steps"]  # fmt: skip
    assert tests["test_gpu.py::test_steps"]["total_launches"] == 7  # passed: updated
    assert tests["test_gpu.py::test_direct"]["total_launches"] == 1  # failed: kept as it was


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "--kname-baseline *bad.json: not valid JSON (*"),
        ('{"report": "pytest", "schema": 1, "tests": {}, "total_launches": ' + "7" * 5000 + "}",
         "--kname-baseline *bad.json: not valid JSON (a number has more than 4300 digits)"),
        ("[" * 100_000 + "]" * 100_000, "--kname-baseline *bad.json: not valid JSON (nested *)"),
        ('{"report": "pytest", "schema": 1, "tests": {"t": null}}',
         "--kname-baseline *bad.json: test 't' must be an object with 'sites' and "
         "'total_launches', not null"),
        ('{"report": "pytest", "schema": 1, "tests": {"t": [1]}}',
         "--kname-baseline *bad.json: test 't' must be an object with *, not a list"),
        ('{"report": "pytest", "schema": 1, "tests": {"t": "x"}}',
         "--kname-baseline *bad.json: test 't' must be an object with *, not a string"),
        ('{"sites": []}', "--kname-baseline *bad.json: not a kname test report (--kname-report)"),
        ('{"report": "pytest", "schema": 9, "tests": {}}', "*: test report schema 9 is not *"),
        ('{"report": "pytest", "schema": 1, "tests": {"t": {"sites": 3, "total_launches": 0}}}',
         "--kname-baseline *bad.json: t: 'sites' must be a list"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("update", [(), ("--kname-update-baseline",)], ids=["compare", "update"])
def test_a_bad_baseline_is_one_line_naming_the_option(inner, content, message, update) -> None:
    inner.makepyfile(test_gpu=suite())
    (inner.path / "bad.json").write_text(content)
    result = run(inner, "--kname-baseline", "bad.json", *update)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()
    assert (inner.path / "bad.json").read_text() == content  # an update never overwrites it


MIXED = """\
def test_passes():
    pass


def test_fails():
    assert 0
"""


@pytest.mark.parametrize(
    ("option", "where", "reason"),
    [
        ("--kname-report", "missing/r.json", "No such file or directory"),
        ("--kname-report", "a-directory", "it is a directory, not a file kname can write"),
        ("--kname-report", "/dev/full", "No space left on device"),
        ("--kname-baseline", "missing/r.json", "No such file or directory"),
    ],
)
def test_a_file_that_cannot_be_written_is_one_line_and_the_suite_keeps_its_outcome(
    inner: pytest.Pytester, option: str, where: str, reason: str
) -> None:
    """The report, or the baseline being updated, cannot be written: one line in kname's
    section; the pass/fail summary and the exit status are the suite's own."""
    inner.makepyfile(test_mixed=MIXED)
    (inner.path / "a-directory").mkdir()
    update = ("--kname-update-baseline",) if option == "--kname-baseline" else ()
    result = run(inner, option, where, *update)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    written = "written" if option == "--kname-report" else "updated"
    lines = [line for line in result.stdout.lines if line.startswith("kname: ")]
    assert lines[1:] == [
        f"kname: {option} {inner.path / where if where[0] != '/' else where} could not be "
        f"{written} ({reason}); "
        + ("each test's launches were not saved" if written == "written" else "it is as it was")
    ]


@pytest.mark.parametrize(
    ("where", "what"), [("a-directory", "a directory"), ("/dev/null", "a character device")]
)
def test_a_baseline_that_is_not_a_file_is_one_line(inner: pytest.Pytester, where, what) -> None:
    inner.makepyfile(test_mixed=MIXED)
    (inner.path / "a-directory").mkdir()
    result = run(inner, "--kname-baseline", where)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --kname-baseline *{where}: it is {what}, not a saved file kname can read"]
    )


def test_update_without_a_baseline_path_is_a_usage_error(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite())
    result = run(inner, "--kname-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --kname-update-baseline needs --kname-baseline PATH"])


FIXTURE_TESTS = """\
import numpy as np
import pytest

import kname
from test_gpu import axpy, step


@pytest.fixture
def warm():
    step(np.zeros(8), np.ones(8), 5)


def test_counts_its_own_body(kname_census, warm):
    assert kname_census.launches() == 0  # not warm's five
    step(np.zeros(8), np.ones(8), 30)
    axpy[1, 8](np.zeros(8), 1.0, np.ones(8))  # own-line
    assert kname_census.launches("step") == 30
    assert kname_census.launches("step test_gpu.py:STEP_LINE") == 30
    assert kname_census.launches(kernel="axpy") == 31
    assert kname_census.launches("test_counts_its_own_body") == 1
    assert kname_census.names() == {
        "step test_gpu.py:STEP_LINE": 30, "test_counts_its_own_body test_fixture.py:OWN_LINE": 1
    }


def test_is_fresh_in_every_test(kname_census):
    assert kname_census.launches() == 0


def test_a_wrong_count_says_what_was_counted(kname_census):
    step(np.zeros(8), np.ones(8), 2)
    assert kname_census.launches("step") == 3


def test_kname_is_installed_only_while_the_fixture_is_used():
    print("installed:", kname.is_installed())
"""


@pytest.mark.parametrize("options", [(), ("--kname",)], ids=["alone", "with --kname"])
def test_the_fixture_counts_the_tests_body(inner: pytest.Pytester, options) -> None:
    own_line = line_of(FIXTURE_TESTS, "own-line")
    tests = FIXTURE_TESTS.replace("STEP_LINE", str(STEP_LINE)).replace("OWN_LINE", str(own_line))
    inner.makepyfile(test_gpu=suite(), test_fixture=tests)
    result = run(inner, "test_fixture.py", "-s", *options)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert 2 == 3",
            "* +  where 2 = launches('step')",
            "* +    where launches = <kname census of this test: 2 launches from 1 call site: "
            f"step test_gpu.py:{STEP_LINE} [[]axpy[]] 2>.launches",
        ]
    )
    installed = "True" if options else "False"
    result.stdout.fnmatch_lines([f"*installed: {installed}*"])


NOTHING_HEAVY = """\
import sys


def test_kname_does_nothing():
    import kname

    assert not kname.is_installed()
    assert "wrapt" not in sys.modules  # install() was never called
    assert "numba" not in sys.modules
"""


def test_without_kname_the_plugin_does_nothing(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite(), test_plain=NOTHING_HEAVY)
    # Only this plugin loaded (no other plugin's imports to blame): nothing installed or imported.
    with pytest.MonkeyPatch.context() as only_kname:
        only_kname.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        run(inner, "test_plain.py").assert_outcomes(passed=1)
    with_plugin = run(inner, "-v", "test_gpu.py")
    with_plugin.assert_outcomes(passed=3)
    said = [
        line for line in with_plugin.stdout.lines if line.startswith("kname") or "- kname -" in line
    ]
    assert not said
    assert not list(inner.path.glob("*.json"))
    without = inner.runpytest_subprocess(
        "-p", "no:kname", "-p", "no:cacheprovider", "-v", "test_gpu.py"
    )
    without.assert_outcomes(passed=3)
    test_lines = [line for line in with_plugin.stdout.lines if "PASSED" in line]
    assert test_lines == [line for line in without.stdout.lines if "PASSED" in line]


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed")
def test_under_xdist_the_workers_counts_are_merged_into_one_report(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_gpu=suite(), test_more=suite(steps=6).replace("test_", "test_more_"))
    serial = run(inner, "--kname-report", "serial.json")
    serial.assert_outcomes(passed=6)
    spread = run(
        inner, "-n", "2", "--kname-report", "spread.json", "--kname-baseline", "serial.json"
    )
    spread.assert_outcomes(passed=6)
    spread.stdout.fnmatch_lines(["kname: baseline *serial.json: 0 tests changed"])
    assert (
        json.loads((inner.path / "spread.json").read_text())["tests"]
        == json.loads((inner.path / "serial.json").read_text())["tests"]
    )

    inner.makepyfile(test_more=suite(steps=7).replace("test_", "test_more_"))
    failed = run(inner, "-n", "2", "--kname-baseline", "serial.json")
    failed.assert_outcomes(passed=5, failed=1)
    failed.stdout.fnmatch_lines(["changed  step test_more.py [[]axpy[]]  6  ->  7  (+1)"])


@pytest.mark.slow
def test_the_entry_point_registers_the_plugin_of_the_installed_wheel(
    kname_venv: Venv, tmp_path
) -> None:
    (tmp_path / "test_gpu.py").write_text(suite())
    result = kname_venv.python_run(
        "-m", "pytest", "-p", "no:cacheprovider", "--kname-report", "launches.json", str(tmp_path),
        env={"NUMBA_ENABLE_CUDASIM": "1"}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "launches.json").read_text())
    assert report["tests"]["test_gpu.py::test_steps"]["total_launches"] == 3
