"""Reliability at import time and with bad configuration: kname says one clear line at most, and
the program runs. Real programs in a venv with kname's wheel (tests/test_lifecycle.py covers the
same wrapping rules in-process), plus an in-process property test of install() itself.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from support import PARENT_PTH, Venv, cleaned, kernels, line_of, make_venv
from test_reliability import NOOP_TARGET, count_ranges, kname_lines, run_program

import kname
from kname import _warnings, callsite, lifecycle, naming
from kname.config import parse_switch

pytestmark = [pytest.mark.slow, pytest.mark.launches]

SIM = {"NUMBA_ENABLE_CUDASIM": "1"}

# --------------------------------------------------------------------------
# Imported before install, reloaded, installed and uninstalled again and again
# --------------------------------------------------------------------------

BEFORE_AND_RELOAD = kernels.program(
    """\
import importlib
import json

import noop

import kname  # only now: the target modules are already imported

out = np.zeros(4)
noop.launch(1)  # before-install
inc[1, 4](out)  # sim-before-install
kname.install(targets=["noop:launch", "numba"])
noop.launch(2)  # after-install
inc[1, 4](out)  # sim-after-install
importlib.reload(noop)
noop.launch(3)  # after-reload
kname.uninstall()
noop.launch(4)  # after-uninstall
inc[1, 4](out)  # sim-after-uninstall
importlib.reload(noop)
noop.launch(5)  # reloaded-after-uninstall
print(json.dumps({"out": out.tolist()}))
""",
    kernels.INC,
)


def test_targets_imported_before_install_then_reloaded_are_named_once(
    kname_venv, inject_lib, tmp_path
) -> None:
    done, capture = run_program(kname_venv, inject_lib, tmp_path, BEFORE_AND_RELOAD, env=SIM)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout) == {"out": [3.0] * 4}
    assert capture.ranges("kname") == [
        f"<module> prog.py:{line_of(BEFORE_AND_RELOAD, f'# {marker}')}"
        for marker in ("after-install", "sim-after-install", "after-reload")
    ]
    assert capture.max_depth("kname") == 1  # a reloaded module is wrapped once, not twice
    assert capture.balanced(), capture.stack_errors()


INSTALL_100 = """\
import json
import sys

import kname
import noop
from kname import callsite, importhooks

wrapped = noop.launch  # KNAME=1: wrapped at import, by the start-up install()
original = wrapped.__wrapped__
meta_path = list(sys.meta_path)
identity = []
for i in range(100):
    kname.uninstall()
    identity.append(noop.launch is original)
    noop.launch(i)  # while-off
    kname.install()
    identity.append(noop.launch is not original and noop.launch.__wrapped__ is original)
    noop.launch(i)  # while-on
kname.uninstall()
print(json.dumps({
    "identity": all(identity) and noop.launch is original,
    "meta_path": [type(f).__name__ for f in sys.meta_path] == [
        type(f).__name__ for f in meta_path if not importhooks.is_kname_finder(f)
    ],
    "watched": sorted(importhooks._watched_names),
    "hooks": sorted(sys.modules["wrapt.importer"]._post_import_hooks),  # noop's import used it
    "sites": len(callsite.sites),
    "wrapper_codes": len(callsite._wrapper_code_ids),
    "census": kname.names(),
}))
"""


def test_install_and_uninstall_100_times_restore_identity_and_name_each_time(
    kname_venv, inject_lib, tmp_path, hot_path
) -> None:
    done, capture = run_program(kname_venv, inject_lib, tmp_path, INSTALL_100, env=NOOP_TARGET)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    installed = f"<module> prog.py:{line_of(INSTALL_100, 'while-on')}"
    # uninstall() forgets the cached sites but keeps their counts: each install's launch counted.
    assert json.loads(done.stdout) == {
        "identity": True, "meta_path": True, "watched": [], "hooks": [], "sites": 0,
        "wrapper_codes": 1,  # the Python wrapper's one code object, on either hot path
        "census": {installed: 100},
    }  # fmt: skip
    assert count_ranges(capture) == {installed: 100}
    assert capture.balanced(), capture.stack_errors()


# --------------------------------------------------------------------------
# A target library missing, or of a version kname does not know
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def venv_without_numba(tmp_path_factory: pytest.TempPathFactory, kname_wheel: Path) -> Venv:
    """kname's wheel and its dependencies (wrapt, nvtx, numpy), but no numba or other GPU lib."""
    root = tmp_path_factory.mktemp("no_numba")
    deps = root / "deps"
    deps.mkdir()
    import numpy
    import nvtx
    import wrapt

    for module in (numpy, nvtx, wrapt):
        package = Path(module.__file__).parent
        (deps / package.name).symlink_to(package)
        libs = package.with_name(package.name + ".libs")
        if libs.exists():
            (deps / libs.name).symlink_to(libs)
    made = make_venv(root / "env")
    (made.site_packages / PARENT_PTH).write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    made.install(str(kname_wheel))
    return made


MISSING = """\
try:
    import numba
except ImportError as exc:
    print("no numba:", type(exc).__name__)
import noop

print(noop.launch(1))  # launch-line
"""


@pytest.mark.parametrize("targets", ["numba,noop:launch", None])
def test_a_missing_target_library_says_nothing_and_the_rest_works(
    venv_without_numba, inject_lib, tmp_path, targets
) -> None:
    env = {"KNAME": "1", "KNAME_TARGETS": targets}  # None: every built-in target, none installed
    done, capture = run_program(venv_without_numba, inject_lib, tmp_path, MISSING, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no numba: ModuleNotFoundError\n3\n"
    assert done.stderr == ""
    named = [f"<module> prog.py:{line_of(MISSING, 'launch-line')}"] if targets else []
    assert capture.ranges("kname") == named


FAKE_NUMBA = {
    "numba/__init__.py": '__version__ = "0.1.0"\n',
    "numba/cuda/__init__.py": "",
    "numba/cuda/dispatcher.py": "class Dispatcher:  # no _LaunchConfiguration here\n    pass\n",
}

OLD_NUMBA = """\
import numba.cuda.dispatcher
import noop

print(numba.__version__, noop.launch(1))  # launch-line
"""


def test_an_unsupported_library_version_gives_one_clear_line_and_the_rest_works(
    venv_without_numba, inject_lib, tmp_path
) -> None:
    """A fake numba 0.1.0 (numba-cuda's own import redirection is absent from this venv)."""
    done, capture = run_program(
        venv_without_numba, inject_lib, tmp_path, OLD_NUMBA, files=FAKE_NUMBA,
        env={"KNAME": "1", "KNAME_TARGETS": "numba,noop:launch"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0.1.0 3\n"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kname: built-in target 'numba'")
    assert "numba.cuda.dispatcher:_LaunchConfiguration.__call__" in lines[0]
    assert "unsupported version 0.1.0 of numba" in lines[0]
    assert capture.ranges("kname") == [f"<module> prog.py:{line_of(OLD_NUMBA, 'launch-line')}"]


BROKEN_MODULE = '''\
"""A module whose KNAME_TARGETS entries are mostly wrong."""

CONST = 5


class Kernel:
    def __call__(self, x):
        return x


def launch(x):
    return x + 1
'''

BROKEN = """\
import broken

kernel = broken.Kernel()
print(broken.CONST, isinstance(kernel, broken.Kernel), kernel(7), broken.launch(1))  # launch-line
"""


def test_broken_user_named_targets_give_one_line_each_and_change_nothing(
    kname_venv, inject_lib, tmp_path
) -> None:
    entries = "broken:missing,broken:CONST,broken:Kernel,nosuchmodule:launch,broken:launch"
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, BROKEN, files={"broken.py": BROKEN_MODULE},
        env={"KNAME": "1", "KNAME_TARGETS": entries},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "5 True 7 2\n"  # the constant and the class are what they were
    lines = done.stderr.splitlines()
    assert len(lines) == 4, lines
    entries = ("broken:missing", "broken:CONST", "broken:Kernel", "nosuchmodule:launch")
    for line, entry in zip(lines, entries, strict=True):
        assert line.startswith("kname: KNAME_TARGETS entry ") and entry in line, line
    # nosuchmodule can never be imported: said at exit, once nothing can import it any more.
    assert "named nothing: module 'nosuchmodule' was never imported" in lines[3]
    assert capture.ranges("kname") == [f"<module> prog.py:{line_of(BROKEN, 'launch-line')}"]


# --------------------------------------------------------------------------
# Bad configuration
# --------------------------------------------------------------------------

VARIABLES = (
    "KNAME", "KNAME_TARGETS", "KNAME_SKIP", "KNAME_FORMAT", "KNAME_DEPTH", "KNAME_MODE",
    "KNAME_REPORT", "KNAME_DOMAIN", "KNAME_STRICT", "KNAME_NATIVE",
)  # fmt: skip
GARBAGE = {
    # Undecodable bytes, a terminal escape, format fields, a newline and a tab.
    "bytes": b"\xff\xfe\x1b[31m{0}{line:{kernel}}\n\t%s,",
    "long": "9" * 5000 + "{",
}

CONFIGURED = """\
import noop

total = 0
for i in range(10):
    total += noop.launch(i)  # launch-line
print(total)
"""


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
@pytest.mark.parametrize("variable", VARIABLES)
def test_garbage_in_any_variable_gives_at_most_one_line_and_the_program_runs(
    kname_venv, inject_lib, tmp_path, variable, garbage
) -> None:
    value = GARBAGE[garbage]
    if variable == "KNAME_TARGETS":  # keep one good entry, so there is something to name
        value = (value if isinstance(value, bytes) else value.encode()) + b",noop:launch"
    env = {**NOOP_TARGET, variable: value}
    done, capture = run_program(kname_venv, inject_lib, tmp_path, CONFIGURED, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "100\n"
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) <= 1, lines
    assert kname_lines(done.stderr) == lines
    if lines:
        assert variable in lines[0] and "internal error" not in lines[0], lines
    # Any text is a path, and any UTF-8 text a domain name: those may well be accepted.
    if variable != "KNAME_REPORT" and (variable != "KNAME_DOMAIN" or garbage == "bytes"):
        assert lines, "garbage was accepted silently"
    named = f"<module> prog.py:{line_of(CONFIGURED, 'launch-line')}"
    expected = [] if variable == "KNAME" else [named] * 10  # a bad KNAME means off
    assert capture.ranges() == expected  # in any domain: any UTF-8 text is a domain name
    assert capture.balanced(), capture.stack_errors()


ANY_TEXT = st.one_of(
    st.text(),
    st.text(alphabet="{}:!.,<>^=0123456789 _-/\n\x1b" + "kernelfunctionpathline", max_size=40),
    st.binary(max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape")),
)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch):
    """A fake target module `reliability_gpu`; kname and its caches are restored afterwards."""
    module = types.ModuleType("reliability_gpu")
    exec("def launch(x):\n    return 2 * x + 1\n", module.__dict__)
    monkeypatch.setitem(sys.modules, "reliability_gpu", module)
    monkeypatch.setattr(naming, "_roots", None)
    reports: list[str] = []
    # No atexit writer in pytest.
    monkeypatch.setattr(lifecycle, "write_at_exit", lambda path, strict=False: reports.append(path))
    yield module, reports


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(env=st.dictionaries(st.sampled_from(VARIABLES[1:]), ANY_TEXT, min_size=1))
@example(env={"KNAME_MODE": "PROFILE"})  # found by CI: a valid mode, without a GPU there
def test_install_under_any_environment_never_raises_and_launches_still_run(
    in_process, monkeypatch, capsys, env
) -> None:
    """install() itself (not just config parsing) with garbage in every KNAME_* variable."""
    assume(parse_switch(env.get("KNAME_STRICT")) is not True)  # strict: an error, by design
    module, _ = in_process
    monkeypatch.setattr(_warnings, "_said", set())
    for name in [v for v in VARIABLES if cleaned(v, ("KNAME",))]:
        monkeypatch.delenv(name, raising=False)
    real_read_config = lifecycle.read_config
    monkeypatch.setattr(
        lifecycle, "read_config", lambda environ=None, **kw: real_read_config(environ or env, **kw)
    )
    try:
        kname.install(targets=["reliability_gpu:launch"])
        assert [module.launch(i) for i in range(3)] == [1, 3, 5]
        assert sum(kname.names().values()) == 3
    finally:
        kname.uninstall()
        callsite.clear()  # uninstall() keeps the counts; the next example starts from none
    err = capsys.readouterr().err
    profiling = (env.get("KNAME_MODE") or "").strip().lower() == "profile"
    for line in err.splitlines():
        if profiling and line.startswith("kname: profile: "):
            continue  # a valid mode, whose CUPTI may not start here (no GPU): one line says so
        assert line.startswith("kname: KNAME_"), line  # one variable named; no internal error
        assert any(line.startswith(f"kname: {v}") for v in env), line
    assert module.launch(4) == 9
