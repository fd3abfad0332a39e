"""kname in a test suite: `pytest --kname`, per-test launch counts, baselines, `kname_census`.

    pytest --kname                         name every launch during the run (for a profiler)
    pytest --kname-report launches.json    ... and write each test's launches per call site
    pytest --kname-baseline launches.json  fail the tests whose launch counts changed
    pytest --kname-baseline launches.json --kname-update-baseline    accept this run's counts
    kname report launches.json             the whole suite's launches per call site, as a census

A test's launches are those of its body (pytest's call phase), not of its fixtures: a module or
session fixture's launches would land on whichever test ran first, which changes with selection
and with pytest-xdist. Registered through the `pytest11` entry point; without these options it
adds the options, the fixture and one cheap hook, and installs nothing. A report or baseline that
cannot be written is one line in kname's part of the summary; the suite's outcome stays its own.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

import kname
from kname import stretch
from kname.documents.diff import compare, kinds_of, render_diff
from kname.documents.files import load, write_atomically
from kname.documents.pytest_report import render_pytest_report
from kname.documents.schema import PYTEST_REPORT, DocumentError
from kname.documents.text import count_of

_CENSUS = pytest.StashKey[dict]()
_LINE = re.compile(r":[0-9]+(?= |$)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kname", "kname: GPU kernel launches named after their call sites")
    group.addoption(
        "--kname", action="store_true", default=False,
        help="name every GPU kernel launch after its call site, and count them per test",
    )  # fmt: skip
    group.addoption(
        "--kname-report", metavar="PATH", default=None,
        help="write each test's launches per call site to PATH as JSON (implies --kname)",
    )  # fmt: skip
    group.addoption(
        "--kname-baseline", metavar="PATH", default=None,
        help="fail the tests whose launches per call site differ from PATH, a file written by "
        "--kname-report or --kname-update-baseline (implies --kname)",
    )  # fmt: skip
    group.addoption(
        "--kname-update-baseline", action="store_true", default=False,
        help="write this run's counts into the --kname-baseline file instead of comparing",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    option = config.option
    if option.kname_update_baseline and not option.kname_baseline:
        raise pytest.UsageError("--kname-update-baseline needs --kname-baseline PATH")
    if not (option.kname or option.kname_report or option.kname_baseline):
        return
    kname.install()  # idempotent: KNAME=1 may have installed it already
    config.pluginmanager.register(KnameRun(config), "kname-run")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    # The fixture counts the test's body: restart it after every fixture has been set up.
    counting = getattr(item, "funcargs", {}).get("kname_census")
    if counting is not None:
        counting.restart()


@pytest.fixture
def kname_census():
    """The launches of this test's body so far: `assert kname_census.launches("step") == 30`.

    `launches(name)` sums the call sites whose name is `name` or starts with it followed by a
    space ("step" picks `step test_solver.py:12`); `launches(kernel="axpy")` picks by kernel.
    Without --kname, kname is installed for this test only.
    """
    installed_here = not kname.is_installed()
    if installed_here:
        kname.install()
    try:
        yield stretch.Stretch("kname census of this test")
    finally:
        if installed_here:
            kname.uninstall()


class KnameRun:
    """What `--kname` adds to the session: per-test counts, the report, the baseline."""

    def __init__(self, config: pytest.Config) -> None:
        option = config.option
        self.config = config
        self.report_path = _absolute(option.kname_report)
        self.baseline_path = _absolute(option.kname_baseline)
        self.update = bool(option.kname_update_baseline)
        self.baseline: dict[str, Any] | None = None  # compared with, unless updating
        self.saved: dict[str, Any] = {}  # the baseline file's tests, kept when updating
        if self.baseline_path and (not self.update or os.path.exists(self.baseline_path)):
            # Read now, so a bad file is a usage error before any test runs.
            self.saved = load_report(self.baseline_path, "--kname-baseline")["tests"]
            self.baseline = None if self.update else self.saved
        self.tests: dict[str, dict[str, Any]] = {}  # node id -> its census, as reported
        # option -> why its file could not be written ("" when it was), said in the summary
        self.unwritten: dict[str, str] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        before = stretch.take()
        yield
        item.stash[_CENSUS] = stretch.since(before)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        counted = item.stash.get(_CENSUS, None)
        if report.when != "call" or counted is None:
            return
        # A plain attribute of the report travels to pytest-xdist's controller with it.
        report.kname_census = {
            "sites": counted["sites"],
            "total_launches": counted["total_launches"],
        }
        if self.baseline is not None and report.passed:
            change = baseline_change(self.baseline.get(report.nodeid), counted)
            if change:
                report.outcome = "failed"
                report.longrepr = (
                    f"{change}\n(call sites compared without line numbers; baseline "
                    f"{self.baseline_path}; accept the new counts with --kname-update-baseline)"
                )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        counted = getattr(report, "kname_census", None)
        if report.when == "call" and counted is not None:
            self.tests[report.nodeid] = {"outcome": report.outcome, **counted}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return  # a pytest-xdist worker: its reports went to the controller, which writes
        if self.report_path:
            self.unwritten["--kname-report"] = _write(self.report_path, self.tests)
        if self.update and self.baseline_path:
            self.unwritten["--kname-baseline"] = _write(
                self.baseline_path, self._updated_baseline()
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        terminalreporter.ensure_newline()  # after the progress line, not after the heading
        terminalreporter.section("kname", sep="-")
        for line in self._summary():
            terminalreporter.write_line(line)

    def _updated_baseline(self) -> dict[str, dict[str, Any]]:
        """The saved baseline with this run's passed tests put in; other tests keep theirs."""
        passed = {n: t for n, t in self.tests.items() if t["outcome"] == "passed"}
        return {**self.saved, **passed}

    def _summary(self) -> list[str]:
        total = sum(t["total_launches"] for t in self.tests.values())
        sites = {s["name"] for t in self.tests.values() for s in t["sites"]}
        launched = sum(1 for t in self.tests.values() if t["total_launches"])
        lines = [
            f"kname: {count_of(total, 'launch')} from {count_of(len(sites), 'call site')} "
            f"in {count_of(launched, 'test')} (test bodies only)"
        ]
        report_fault = self.unwritten.get("--kname-report")
        baseline_fault = self.unwritten.get("--kname-baseline")
        if report_fault:
            lines.append(
                f"kname: --kname-report {self.report_path} could not be written ({report_fault});"
                " each test's launches were not saved"
            )
        elif self.report_path:
            lines.append(f"kname: each test's launches written to {self.report_path}")
        if baseline_fault:
            lines.append(
                f"kname: --kname-baseline {self.baseline_path} could not be updated "
                f"({baseline_fault}); it is as it was"
            )
        elif self.update:
            kept = sum(1 for t in self.tests.values() if t["outcome"] == "passed")
            lines.append(
                f"kname: baseline {self.baseline_path} updated with {count_of(kept, 'test')}"
            )
        elif self.baseline is not None:
            changed = [
                n for n, t in self.tests.items()
                if n in self.baseline and baseline_change(self.baseline[n], t)
            ]  # fmt: skip
            new = [n for n in self.tests if n not in self.baseline]
            lines.append(
                f"kname: baseline {self.baseline_path}: {count_of(len(changed), 'test')} changed"
                + (f", {count_of(len(new), 'test')} not in it (passed; "
                   "--kname-update-baseline adds them)" if new else "")
            )  # fmt: skip
        return lines


def baseline_change(saved: dict[str, Any] | None, counted: dict[str, Any]) -> str:
    """The diff of a test's launches from its saved ones, or "" if the same (or none saved).

    Call sites are compared by name without line numbers, and kernel: moving a launch to
    another line of the same function is not a change.
    """
    if saved is None:
        return ""
    before, after = _without_lines(saved), _without_lines(counted)
    changes = compare(before, after)
    if not changes:
        return ""
    kinds = kinds_of(changes, ("added", "removed", "changed"))
    rows = render_diff(before, after, ("baseline", "this run")).split("\n", 1)[1]
    return (
        "kname: this test's launches per call site differ from the baseline "
        f"({count_of(before['total_launches'], 'launch')} in it, {after['total_launches']} now): "
        f"{kinds}\n" + rows.rstrip("\n")
    )


def write_report(path: str, tests: dict[str, dict[str, Any]]) -> None:
    """Write the tests' censuses to `path` (JSON, one site per line, tests in node-id order)."""
    write_atomically(path, render_pytest_report(tests))


def load_report(path: str, option: str) -> dict[str, Any]:
    """Read a file written by --kname-report; any fault, hostile files too, is a one-line
    UsageError naming `option`."""
    if not os.path.lexists(path) and option == "--kname-baseline":
        raise pytest.UsageError(
            f"{option} {path}: no such file (write it first with --kname-update-baseline)"
        )
    try:
        return load(path, (PYTEST_REPORT,))
    except DocumentError as exc:
        raise pytest.UsageError(f"{option} {exc}") from None


def _write(path: str, tests: dict[str, dict[str, Any]]) -> str:
    """Write a report; "" if written, else why not (the suite's outcome is never changed)."""
    try:
        write_report(path, tests)
    except Exception as exc:  # said in kname's section of the summary, never a traceback
        return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ""


def _without_lines(test: dict[str, Any]) -> dict[str, Any]:
    sites = [{**site, "name": _LINE.sub("", site["name"])} for site in test["sites"]]
    return {"sites": sites, "total_launches": test["total_launches"]}


def _absolute(path: str | None) -> str | None:
    # Relative to where pytest started, even if a test changes directory.
    return os.path.abspath(path) if path else None
