"""kname's import hooks against the rest of the import system: other sys.meta_path finders, and
install() while the target module is still being imported (on another thread or this one).

The target is fakegpu, written into tmp_path; the other finder stands in for another tool's (it
claims fakegpu as pytest's assertion rewriter claims a test module: it finds the file itself
and loads it with a loader of its own, never asking the finders behind it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support import FAKEGPU, REPO

import kname
from kname import importhooks


class OwnLoader(importlib.machinery.SourceFileLoader):
    """Another tool's loader (pytest's rewrites the module's code; this one only loads it)."""


class Claimer:
    """Another tool's meta-path finder that claims the modules named."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None:
            spec.loader = OwnLoader(fullname, spec.origin)
        return spec


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """fakegpu and two modules that do nothing, importable from tmp_path (not yet imported)."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    for name in ("unrelated", "unrelated_too"):
        (tmp_path / f"{name}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("fakegpu", "unrelated", "unrelated_too", "gate", "slowgpu")
    for name in names:
        sys.modules.pop(name, None)
    meta_path = list(sys.meta_path)
    yield tmp_path
    kname.uninstall()
    kept = [f for f in sys.meta_path if f in meta_path or importhooks.is_kname_finder(f)]
    sys.meta_path[:] = kept
    for name in names:
        sys.modules.pop(name, None)


def launches() -> int:
    return sum(kname.names().values())


def is_wrapper(candidate) -> bool:
    return getattr(candidate, "_kname_wrapper", False) is True


# --------------------------------------------------------------------------
# Another meta-path finder ahead of kname's
# --------------------------------------------------------------------------


def test_a_finder_put_ahead_of_kname_after_install_does_not_stop_it(modules, capsys) -> None:
    kname.install(targets=["fakegpu:launch"])
    sys.meta_path.insert(0, Claimer("fakegpu"))
    importlib.import_module("unrelated")  # a program imports other modules meanwhile
    module = importlib.import_module("fakegpu")
    assert isinstance(module.__loader__, OwnLoader)  # the other tool still loaded it
    assert is_wrapper(module.launch)
    module.launch()
    assert launches() == 1
    assert capsys.readouterr().err == ""


def test_a_target_claimed_by_a_finder_ahead_is_wrapped_at_the_next_import_and_said(
    modules, capsys
) -> None:
    kname.install(targets=["fakegpu:launch"])
    sys.meta_path.insert(0, Claimer("fakegpu"))
    module = importlib.import_module("fakegpu")  # no import between: kname's finder never ran
    importlib.import_module("unrelated")
    assert is_wrapper(module.launch)
    module.launch()
    assert launches() == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "'fakegpu'" in lines[0] and "OwnLoader" in lines[0], lines[0]
    importlib.import_module("unrelated_too")
    assert capsys.readouterr().err == ""  # said once


def test_a_target_imported_past_kname_for_good_is_said_at_exit(modules) -> None:
    program = textwrap.dedent(
        """
        import sys, kname
        from test_importhooks import Claimer
        kname.install(targets=["fakegpu:launch"])
        sys.meta_path.insert(0, Claimer("fakegpu"))
        import fakegpu
        fakegpu.launch()
        print(kname.names())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(modules), str(REPO), str(Path(__file__).parent)])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=env, cwd=modules, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{}"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "'fakegpu'" in lines[0] and "not named" in lines[0], lines[0]


def test_a_module_bound_to_a_watched_name_by_hand_is_wrapped_without_a_word(
    modules, capsys
) -> None:
    """As numba's simulator binds its dispatcher to numba.cuda.dispatcher: not imported past
    kname by another hook, so nothing to say, even with another finder about."""
    (modules / "simgpu.py").write_text(FAKEGPU)
    kname.install(targets=["fakegpu:launch"])
    sys.meta_path.insert(0, Claimer("nothing"))
    importlib.import_module("unrelated")  # kname's finder finds the other one ahead of it
    try:
        sys.modules["fakegpu"] = importlib.import_module("simgpu")
        importlib.import_module("unrelated_too")
        assert is_wrapper(sys.modules["simgpu"].launch)
        assert capsys.readouterr().err == ""
    finally:
        sys.modules.pop("simgpu", None)


def test_uninstall_takes_kname_finder_away_again(modules) -> None:
    before = list(sys.meta_path)
    kname.install(targets=["fakegpu:launch"])
    sys.meta_path.insert(0, Claimer("nothing"))
    importlib.import_module("unrelated")
    assert importhooks.is_kname_finder(sys.meta_path[0])
    kname.uninstall()
    assert [f for f in sys.meta_path if not isinstance(f, Claimer)] == before


# --------------------------------------------------------------------------
# wrapt, brought in by the first watched import
# --------------------------------------------------------------------------


def test_the_first_watched_import_hands_every_watch_to_wrapt(modules, monkeypatch) -> None:
    """Before any watched import kname holds its watches itself; the first one runs the module,
    hands every watch to wrapt's registry, and wrapt calls its hooks, once; a reload goes through
    wrapt's finder."""
    monkeypatch.setattr(importhooks, "_importer", None)  # as at start-up, wrapt not in use yet
    monkeypatch.setattr(importhooks, "_wrapt_finder", None)
    calls = []
    hooks = [importhooks.watch(name, calls.append) for name in ("fakegpu", "unrelated")]
    try:
        module = importlib.import_module("fakegpu")
        assert calls == [module]
        registry = sys.modules["wrapt.importer"]._post_import_hooks
        assert importhooks._importer is sys.modules["wrapt.importer"]
        assert registry["fakegpu"] == [hooks[0]] and registry["unrelated"] == [hooks[1]]
        assert type(module.__loader__) is importlib.machinery.SourceFileLoader
        assert importlib.reload(module) is module
        assert calls == [module, module]
        assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    finally:
        importhooks.unwatch(hooks)
    assert "fakegpu" not in registry and "unrelated" not in registry


# --------------------------------------------------------------------------
# A hook that fails
# --------------------------------------------------------------------------


@pytest.mark.parametrize("imported_first", [True, False], ids=["before", "after"])
def test_a_hook_that_raises_is_one_line_and_the_import_stands(
    modules, capsys, imported_first: bool
) -> None:
    """wrapt's loader lets a hook's exception fail the import that has just run: kname's hooks
    say it once instead, the program's import (or its install()) goes on, and the hook stays
    for the next reload."""
    called = []

    def broken(module):
        called.append(module)
        raise RuntimeError("no launch here")

    if imported_first:
        importlib.import_module("fakegpu")
    hook = importhooks.watch("fakegpu", broken)
    try:
        module = importlib.import_module("fakegpu")
        assert importlib.reload(module) is module
    finally:
        importhooks.unwatch([hook])
    assert called == [module, module]
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["kname: could not wrap 'fakegpu' (no launch here)"], lines


# --------------------------------------------------------------------------
# install() while the target module is being imported
# --------------------------------------------------------------------------

GATE = """
import threading
entered, proceed = threading.Event(), threading.Event()
"""

SLOWGPU = """
import gate
gate.entered.set()
assert gate.proceed.wait(30)


def launch(*args):
    return args
"""


def test_install_while_another_thread_imports_the_target_wraps_it(modules, capsys) -> None:
    (modules / "gate.py").write_text(GATE)
    (modules / "slowgpu.py").write_text(SLOWGPU)
    gate = importlib.import_module("gate")
    importer = threading.Thread(target=importlib.import_module, args=("slowgpu",))
    importer.start()
    assert gate.entered.wait(30)
    kname.install(targets=["slowgpu:launch"])  # slowgpu is in sys.modules, half run
    gate.proceed.set()
    importer.join(30)
    module = sys.modules["slowgpu"]
    assert is_wrapper(module.launch)
    assert module.launch(1) == (1,)
    assert launches() == 1
    assert capsys.readouterr().err == ""


def test_install_from_the_target_module_itself_wraps_it_once_it_has_run(modules, capsys) -> None:
    (modules / "selfgpu.py").write_text(
        "import kname\nkname.install(targets=['selfgpu:launch'])\n\n\n"
        "def launch(*args):\n    return args\n"
    )
    try:
        module = importlib.import_module("selfgpu")
        assert is_wrapper(module.launch)
        module.launch()
        assert launches() == 1
        assert capsys.readouterr().err == ""
    finally:
        sys.modules.pop("selfgpu", None)


def test_a_failed_import_leaves_the_hook_for_the_next_attempt(modules, capsys) -> None:
    (modules / "gate.py").write_text(GATE)
    failing = SLOWGPU.replace("assert gate.proceed", "assert not gate.proceed")
    (modules / "slowgpu.py").write_text(failing)
    gate = importlib.import_module("gate")
    failed = []

    def import_failing() -> None:
        try:
            importlib.import_module("slowgpu")
        except AssertionError as exc:
            failed.append(exc)

    importer = threading.Thread(target=import_failing)
    importer.start()
    assert gate.entered.wait(30)
    kname.install(targets=["slowgpu:launch"])
    gate.proceed.set()
    importer.join(30)
    assert failed and "slowgpu" not in sys.modules
    (modules / "slowgpu.py").write_text("def launch(*args):\n    return args\n")
    importlib.invalidate_caches()
    module = importlib.import_module("slowgpu")
    assert is_wrapper(module.launch)
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------
# Messages for a target that is not there
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("fakegpu:nofunc", "module fakegpu has no attribute 'nofunc'"),
        ("fakegpu:lauch", "module fakegpu has no attribute 'lauch' (did you mean 'launch'?)"),
        (
            "fakegpu:Stream.lanch",
            "class fakegpu.Stream has no attribute 'lanch' (did you mean 'launch'?)",
        ),
        ("fakegpu:Nope.launch", "module fakegpu has no attribute 'Nope'"),
    ],
)
def test_a_missing_attribute_is_said_plainly_naming_the_entry(modules, capsys, entry, expected):
    importlib.import_module("fakegpu")
    kname.install(targets=[entry])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    start = f"kname: install(targets=...) entry {entry!r} was not found: "
    assert lines[0].startswith(start), lines
    assert expected in lines[0], lines[0]
