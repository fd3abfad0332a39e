"""kname.hotpath: the one place that chooses the C hot path or its Python twin, once per install.

The launch behaviour of both paths is tested on both (the tests marked `launches`); here:
the choice, its reasons, when it is made (KNAME_NATIVE read once, by kname.config), and that no
other module imports the extensions or reads the variable.
"""

from __future__ import annotations

import ast
import importlib
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from support import REPO

import kname
from kname import callsite, hotpath, pyhotpath

BUILDABLE = (
    platform.python_implementation() == "CPython"
    and sys.version_info >= (3, 11)
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
)
COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
WHY_NOT_NATIVE = hotpath.choose(True).why_python  # "" where the C hot path is in use
needs_native = pytest.mark.skipif(bool(WHY_NOT_NATIVE), reason=f"no C hot path: {WHY_NOT_NATIVE}")
PYTHON_TWINS = {
    "launch_wrapper": pyhotpath.launch_wrapper,
    "counter": pyhotpath.Counter,
    "skip_beneath": pyhotpath.skip_beneath,
    "subscript_launch": pyhotpath.subscript_launch,
    "base_call": pyhotpath.base_call,
    "use_direct_call": pyhotpath.use_direct_call,
}


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module `probe` with a no-op `launch`, importable (not imported yet)."""
    (tmp_path / "probe.py").write_text("def launch(*args):\n    return args\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "probe", raising=False)
    return "probe:launch"


# --------------------------------------------------------------------------
# The two choices, and why
# --------------------------------------------------------------------------


@pytest.mark.skipif(not (BUILDABLE and COMPILER), reason="no C compiler, or not CPython 3.11+")
def test_the_c_hot_path_is_chosen_wherever_it_can_be_built() -> None:
    chosen = hotpath.choose(True)
    assert chosen.why_python == "", chosen.why_python
    assert Path(chosen.extension_file).name.startswith("_native.")
    assert chosen.launch_wrapper.__module__ == "kname._native"
    assert chosen.is_launch_caller is not None
    assert type(wrap_noop()).__module__ == "kname._native"  # KNAME_NATIVE unset: the default


def test_kname_native_off_hands_out_every_python_twin_and_says_why() -> None:
    chosen = hotpath.choose(False)
    assert chosen.why_python == "KNAME_NATIVE is off" and chosen.extension_file == ""
    assert {name: getattr(chosen, name) for name in PYTHON_TWINS} == PYTHON_TWINS
    assert chosen.is_launch_caller is None and chosen.nvtx_range is chosen.nvtx_domain is None
    assert chosen.cupti() == (None, "KNAME_NATIVE is off")


@pytest.mark.parametrize("value", ["0", "off", " no "])
def test_any_off_value_of_kname_native_makes_python_wrappers(monkeypatch, value: str) -> None:
    monkeypatch.setenv("KNAME_NATIVE", value)
    assert type(wrap_noop()).__name__ == "function"
    assert hotpath.current().why_python == "KNAME_NATIVE is off"


def test_a_free_threaded_python_gets_the_python_path_and_says_why(monkeypatch) -> None:
    monkeypatch.setattr(hotpath, "_imports", {})  # the extension not tried yet
    # A free-threaded build's ABI flags have a "t" (3.13t: "t"); this interpreter's are mocked.
    monkeypatch.setattr(sys, "abiflags", "t", raising=False)
    chosen = hotpath.choose(True)
    monkeypatch.undo()
    assert "free-threaded" in chosen.why_python and chosen.extension_file == ""
    assert {name: getattr(chosen, name) for name in PYTHON_TWINS} == PYTHON_TWINS


@needs_native
def test_the_c_path_hands_out_the_extensions_types() -> None:
    chosen = hotpath.choose(True)
    native = sys.modules[hotpath.NATIVE]
    assert chosen.launch_wrapper is native.LaunchWrapper and chosen.counter is native.Counter
    assert chosen.skip_beneath is native.SkipBeneath and chosen.base_call is native.BaseCall
    assert chosen.use_direct_call is native.use_direct_call
    assert chosen.is_launch_caller is native.is_launch_caller
    assert chosen.nvtx_range is getattr(native, "nvtx_range", None)


# --------------------------------------------------------------------------
# Decided once per install
# --------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("first", ["0", "1"])
def test_kname_native_changed_after_install_changes_nothing_until_the_next_install(
    monkeypatch, probe: str, first: str
) -> None:
    """The wrappers made when a watched module is imported later are of the install's hot path,
    whatever the environment says by then; the next install() reads it again."""
    then = "1" if first == "0" else "0"
    monkeypatch.setenv("KNAME_NATIVE", first)
    kname.install(targets=[probe])
    chosen = hotpath.current()
    monkeypatch.setenv("KNAME_NATIVE", then)
    module = importlib.import_module("probe")  # the hook wraps its launch now
    assert wrapper_kind(module.launch) == WRAPPER_KINDS[first]
    assert hotpath.current() is chosen
    kname.uninstall()
    kname.install(targets=[probe])
    assert wrapper_kind(module.launch) == WRAPPER_KINDS[then]


WRAPPER_KINDS = {"0": "function", "1": "LaunchWrapper"}  # KNAME_NATIVE -> the wrapper's type


def wrapper_kind(launch) -> str:
    assert launch.__wrapped__ is not None  # wrapped by kname
    return type(launch).__name__


def test_uninstalled_the_hot_path_is_decided_at_its_first_need(monkeypatch) -> None:
    """Without install() (kname.site_name, a wrapper made by hand), KNAME_NATIVE is read at the
    first need and kept until the next install() or uninstall()."""
    kname.uninstall()
    monkeypatch.setenv("KNAME_NATIVE", "0")
    chosen = hotpath.current()
    monkeypatch.setenv("KNAME_NATIVE", "1")
    assert hotpath.current() is chosen and type(wrap_noop()).__name__ == "function"
    kname.uninstall()
    assert hotpath.current().why_python == WHY_NOT_NATIVE


@needs_native
def test_launch_counts_go_on_across_installs_on_either_hot_path(monkeypatch, probe: str) -> None:
    """A line's count is kept by uninstall(): the next install counts on, whichever hot path it
    chose (its counters are of the other kind)."""
    for native in ("1", "0", "1"):
        monkeypatch.setenv("KNAME_NATIVE", native)
        kname.install(targets=[probe])
        module = importlib.import_module("probe")
        for _ in range(2):
            module.launch()  # one line
        kname.uninstall()
    assert list(kname.names().values()) == [6]


# --------------------------------------------------------------------------
# The extensions and KNAME_NATIVE have one home each
# --------------------------------------------------------------------------


def package_sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(REPO)): ast.parse(path.read_text())
        for path in sorted((REPO / "kname").rglob("*.py"))
    }


def test_no_module_but_hotpath_imports_the_extensions() -> None:
    extensions = {hotpath.NATIVE, hotpath.NATIVE_CUPTI}
    found = []
    for path, tree in package_sources().items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]  # importlib.import_module(name), sys.modules[name]
            found += [(path, name) for name in names if name in extensions]
    assert {path for path, _ in found} == {"kname/hotpath.py"}, found


def names_kname_native(node: ast.expr) -> bool:
    """The variable's name, spelled or as config's constant of it."""
    return (isinstance(node, ast.Constant) and node.value == "KNAME_NATIVE") or (
        isinstance(node, ast.Name) and node.id == "KNAME_NATIVE"
    )


def test_no_module_but_config_reads_kname_native() -> None:
    reads = []
    for path, tree in package_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                keys = node.args[:1]  # environ.get(name), os.getenv(name), environ.pop(name)
            elif isinstance(node, ast.Subscript):
                keys = [node.slice]  # environ[name]
            else:
                continue
            if any(names_kname_native(k) for k in keys):
                reads.append((path, node.lineno))
    assert {path for path, _ in reads} == {"kname/config.py"}, reads


def test_install_imports_no_cupti_extension_until_kname_profile_asks(tmp_path: Path) -> None:
    """The CUPTI callback's extension is chosen with the hot path but imported only when a
    profile starts: an install that does not profile pays nothing for it."""
    program = textwrap.dedent(
        """
        import sys
        import kname
        from kname import hotpath
        kname.install()
        before = "kname._native_cupti" in sys.modules
        module, why = hotpath.current().cupti()
        print(before, module is not None or why)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before, chosen = done.stdout.split(maxsplit=1)
    native, why = hotpath.choose(True).cupti()
    assert before == "False" and chosen.strip() == ("True" if native is not None else why)


def wrap_noop():
    """A launch wrapper of a no-op, made by hand on the hot path in effect."""
    from kname.launch import LaunchSpec, Switch, make_launch_wrapper

    callsite.configure()
    return make_launch_wrapper(lambda *args: args, LaunchSpec("test", lambda _k: "k"), Switch())
