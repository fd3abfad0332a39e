"""install() / uninstall(): what is wrapped, when, and that every original comes back.

Targets are user-named (`fakegpu:...`) on a module written into tmp_path, so each test controls
whether the module is imported before or after install(). The start-up path runs in a subprocess.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import FAKEGPU, REPO, cleaned, line_of
from support.nvtx_capture import run_captured
from wrapt import importer

import kname
from kname import census, hotpath, importhooks, lifecycle, patching

pytestmark = pytest.mark.launches


@pytest.fixture
def gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """fakegpu written into tmp_path and importable (not yet imported); cleaned up after."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fakegpu", None)
    yield tmp_path
    sys.modules.pop("fakegpu", None)


def fakegpu():
    return importlib.import_module("fakegpu")


def is_wrapper(candidate) -> bool:
    return getattr(candidate, "_kname_wrapper", False) is True


def kname_hooks() -> list:
    """kname's hooks, in its own registry and in wrapt's (which holds them once in use)."""
    in_wrapt = [
        hook
        for module_hooks in importer._post_import_hooks.values()
        for hook in module_hooks
        if isinstance(hook, importhooks.Watch)
    ]
    return [*importhooks._watches, *in_wrapt]


def hook_finders() -> int:
    """The post-import finders on sys.meta_path: kname's front one and wrapt's own."""
    return sum(
        importhooks.is_kname_finder(finder) or isinstance(finder, importer.ImportHookFinder)
        for finder in sys.meta_path
    )


# --------------------------------------------------------------------------
# Wrapping once, restoring exactly
# --------------------------------------------------------------------------


def test_install_twice_wraps_once(gpu) -> None:
    module = fakegpu()
    original = vars(module.Kernel)["__call__"]
    kname.install(targets=["fakegpu:Kernel.__call__"])
    kname.install(targets=["fakegpu:Kernel.__call__"])
    wrapper = vars(module.Kernel)["__call__"]
    assert is_wrapper(wrapper)
    assert wrapper.__wrapped__ is original
    assert not is_wrapper(original)
    kernel = module.Kernel()
    assert kernel(1) == ("call", kernel, 1)
    assert sum(kname.names().values()) == 1


@pytest.mark.parametrize("entry", ["fakegpu:launch", "fakegpu:Stream.static_launch"])
def test_a_target_named_twice_is_wrapped_once(gpu, entry: str) -> None:
    fakegpu()
    kname.install(targets=[entry, entry])
    owner, attribute = patching.resolve(fakegpu(), entry.split(":")[1])
    wrapper = patching.unbound(vars(owner)[attribute])
    assert is_wrapper(wrapper)
    assert not is_wrapper(wrapper.__wrapped__)


@pytest.mark.parametrize(
    ("qualname", "kind"),
    [
        ("launch", "function"),
        ("Stream.launch", "method"),
        ("Stream.static_launch", "staticmethod"),
        ("Stream.class_launch", "classmethod"),
    ],
)
def test_uninstall_restores_the_identical_original(gpu, qualname: str, kind: str) -> None:
    module = fakegpu()
    owner, attribute = patching.resolve(module, qualname)
    original = vars(owner)[attribute]
    kname.install(targets=[f"fakegpu:{qualname}"])
    installed = vars(owner)[attribute]
    assert installed is not original
    # A staticmethod stays one, and so on; a plain function's wrapper may be the C one.
    assert type(installed) is type(original) or kind in ("function", "method")
    assert is_wrapper(patching.unbound(installed))
    kname.uninstall()
    assert vars(owner)[attribute] is original


def test_the_wrapped_callables_still_behave_as_they_did(gpu) -> None:
    module = fakegpu()
    targets = ["launch", "Stream.launch", "Stream.static_launch", "Stream.class_launch"]
    kname.install(targets=[f"fakegpu:{t}" for t in targets])
    stream = module.Stream()
    assert module.launch(1) == (1,)
    assert stream.launch(2) == ("method", stream, 2)
    assert module.Stream.static_launch(3) == stream.static_launch(3) == ("static", 3)
    assert module.Stream.class_launch(4) == stream.class_launch(4) == ("class", module.Stream, 4)
    assert module.Child.class_launch(5) == ("class", module.Child, 5)
    assert sum(kname.names().values()) == 7


@pytest.mark.parametrize("attribute", ["launch", "static_launch", "class_launch"])
def test_an_inherited_method_is_wrapped_on_the_subclass_and_deleted_again(gpu, attribute):
    module = fakegpu()
    Child, GrandChild, Stream = module.Child, module.GrandChild, module.Stream
    assert attribute not in vars(Child)
    kname.install(targets=[f"fakegpu:Child.{attribute}"])
    assert is_wrapper(patching.unbound(vars(Child)[attribute]))
    assert vars(Stream)[attribute] is not None and not is_wrapper(
        patching.unbound(vars(Stream)[attribute])
    )
    child = Child()
    expected = {
        "launch": ("method", child, 1),
        "static_launch": ("static", 1),
        "class_launch": ("class", Child, 1),
    }[attribute]
    assert getattr(child, attribute)(1) == expected  # called on an instance
    if attribute != "launch":  # and on the classes, binding to the right one
        assert getattr(Child, attribute)(1) == expected
        grand = ("class", GrandChild, 1) if attribute == "class_launch" else expected
        assert getattr(GrandChild, attribute)(1) == grand
    assert sum(kname.names().values()) == (1 if attribute == "launch" else 3)
    kname.uninstall()
    assert attribute not in vars(Child)
    assert inspect.getattr_static(Child, attribute) is vars(Stream)[attribute]


# --------------------------------------------------------------------------
# Import order and reload
# --------------------------------------------------------------------------


def test_a_module_imported_before_install_is_wrapped_at_once(gpu) -> None:
    original = fakegpu().launch
    kname.install(targets=["fakegpu:launch"])
    assert fakegpu().launch.__wrapped__ is original


def test_a_module_imported_after_install_is_wrapped_on_import(gpu) -> None:
    kname.install(targets=["fakegpu:launch"])
    assert "fakegpu" not in sys.modules
    module = fakegpu()
    assert is_wrapper(module.launch)
    module.launch()
    assert sum(kname.names().values()) == 1


@pytest.mark.parametrize("imported_first", [True, False], ids=["before", "after"])
def test_a_reloaded_module_is_wrapped_again(gpu, imported_first: bool) -> None:
    if imported_first:
        fakegpu()
    kname.install(targets=["fakegpu:launch"])
    module = fakegpu()
    old_wrapper = module.launch
    for _ in range(2):
        reloaded = importlib.reload(module)
        assert reloaded is module
        assert is_wrapper(module.launch)
        assert module.launch is not old_wrapper
        assert not is_wrapper(module.launch.__wrapped__)
        old_wrapper = module.launch
    module.launch()
    assert sum(kname.names().values()) == 1
    fresh = module.launch.__wrapped__
    kname.uninstall()
    assert module.launch is fresh


def test_a_module_reloaded_after_uninstall_is_not_wrapped(gpu) -> None:
    kname.install(targets=["fakegpu:launch"])
    module = fakegpu()
    kname.uninstall()
    importlib.reload(module)
    assert not is_wrapper(module.launch)


@pytest.mark.parametrize("imported_first", [True, False], ids=["before", "after"])
def test_install_and_uninstall_50_times_leave_no_trace(gpu, imported_first: bool) -> None:
    finders = hook_finders()
    if imported_first:
        original = fakegpu().launch
    for _ in range(50):
        kname.install(targets=["fakegpu:launch", "fakegpu:Stream.static_launch"])
        assert kname.is_installed()
        if imported_first:
            assert fakegpu().launch.__wrapped__ is original
        kname.uninstall()
        assert not kname.is_installed()
    assert kname_hooks() == []
    assert hook_finders() == finders
    assert "fakegpu" not in importhooks._watched_names
    assert "fakegpu" not in importer._post_import_hooks
    if imported_first:
        assert fakegpu().launch is original
    else:
        assert "fakegpu" not in sys.modules
        assert not is_wrapper(fakegpu().launch)


def test_uninstall_keeps_a_wrapt_finder_that_was_there_before(gpu) -> None:
    def someone_elses_hook(module):
        pass

    importer.register_post_import_hook(someone_elses_hook, "some_other_module_never_imported")
    try:
        finders = hook_finders()
        kname.install(targets=["fakegpu:launch"])
        fakegpu()  # wrapt's registry now holds kname's hook too
        kname.uninstall()
        assert hook_finders() == finders == 1
        assert importer._post_import_hooks["some_other_module_never_imported"] == [
            someone_elses_hook
        ]
    finally:
        importer._post_import_hooks.pop("some_other_module_never_imported", None)


def test_another_tools_wrapt_import_hook_and_kname_both_see_the_import_once(gpu) -> None:
    """A program may use wrapt's post-import hooks too (an APM agent does): both finders act on
    the one import, each hook runs once, and uninstall() leaves wrapt's finder and hook be."""
    seen = []
    importer.register_post_import_hook(seen.append, "fakegpu")
    try:
        kname.install(targets=["fakegpu:launch"])
        module = fakegpu()
        assert seen == [module]
        assert is_wrapper(module.launch)
        assert type(module.__loader__).__name__ == "SourceFileLoader"
        kname.uninstall()
        assert not any(importhooks.is_kname_finder(f) for f in sys.meta_path)
        assert any(isinstance(f, importer.ImportHookFinder) for f in sys.meta_path)
    finally:
        importer._post_import_hooks.pop("fakegpu", None)


# --------------------------------------------------------------------------
# Targets that do not resolve
# --------------------------------------------------------------------------


def test_an_unresolved_target_gives_one_line_and_the_others_still_work(gpu, capsys, monkeypatch):
    monkeypatch.setenv("KNAME_TARGETS", "fakegpu:nope,fakegpu:launch")
    module = fakegpu()
    kname.install()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "KNAME_TARGETS" in lines[0] and "fakegpu:nope" in lines[0]
    module.launch()
    assert sum(kname.names().values()) == 1


def test_an_unresolved_target_in_a_later_import_is_reported_once(gpu, capsys) -> None:
    kname.install(targets=["fakegpu:Stream.nope", "fakegpu:launch"])
    assert capsys.readouterr().err == ""  # not imported yet: nothing to say
    fakegpu().launch()
    importlib.reload(fakegpu())
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "fakegpu:Stream.nope" in lines[0], lines
    assert sum(kname.names().values()) == 1


def test_an_unresolved_target_at_start_up_gives_one_line(gpu) -> None:
    code = "import fakegpu, kname; kname.install(); fakegpu.launch(); print(kname.names())"
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.update(KNAME_TARGETS="fakegpu:nope, fakegpu:launch", PYTHONPATH=f"{gpu}:{REPO}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=gpu, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "KNAME_TARGETS" in lines[0] and "fakegpu:nope" in lines[0]
    assert done.stdout.strip() == "{'<module> <string>:1': 1}"


# --------------------------------------------------------------------------
# The runtime switch
# --------------------------------------------------------------------------

APP = """
import fakegpu


def step():
    fakegpu.launch()  # L:step
"""


@pytest.fixture
def app(gpu):
    (gpu / "hooks_app.py").write_text(APP)
    kname.install(targets=["fakegpu:launch"])
    module = importlib.import_module("hooks_app")
    yield module
    sys.modules.pop("hooks_app", None)


def launches() -> int:
    return sum(kname.names().values())


def test_disable_stops_naming_and_enable_resumes(app) -> None:
    name = f"step hooks_app.py:{line_of(APP, 'L:step')}"
    app.step()
    kname.disable()
    assert not kname.is_enabled()
    app.step()
    app.step()
    assert kname.names() == {name: 1}
    kname.enable()
    assert kname.is_enabled()
    app.step()
    assert kname.names() == {name: 2}


def test_paused_suspends_naming_then_restores_the_previous_state(app) -> None:
    with kname.paused():
        assert not kname.is_enabled()
        app.step()
    assert kname.is_enabled()
    app.step()
    assert launches() == 1
    kname.disable()
    with kname.paused():
        app.step()
    assert not kname.is_enabled()  # it was off before: it stays off


def test_paused_restores_after_an_exception(app) -> None:
    with pytest.raises(KeyError), kname.paused():
        raise KeyError("x")
    assert kname.is_enabled()


# --------------------------------------------------------------------------
# The wrapper is transparent
# --------------------------------------------------------------------------


def test_the_wrapper_keeps_name_doc_and_return_value(gpu) -> None:
    module = fakegpu()
    original = module.launch
    kname.install(targets=["fakegpu:launch"])
    assert module.launch is not original
    assert module.launch.__name__ == original.__name__ == "launch"
    assert module.launch.__qualname__ == original.__qualname__
    assert module.launch.__doc__ == original.__doc__ == "Launch a fake kernel."
    payload = object()
    assert module.launch(payload, 2)[0] is payload


def test_the_wrapper_lets_the_original_exception_through(gpu) -> None:
    module = fakegpu()
    kname.install(targets=["fakegpu:fail"])
    assert module.fail.__doc__ == "Raise, as a launch that went wrong does."
    with pytest.raises(ValueError, match=r"^bad launch$") as caught:
        module.fail("bad launch")
    assert caught.value is module.last_error
    assert sum(kname.names().values()) == 1


def test_keyword_arguments_pass_through(gpu) -> None:
    module = fakegpu()
    kname.install(targets=["fakegpu:Stream.launch"])
    stream = module.Stream()
    assert module.Stream.launch(self=stream) == ("method", stream)


def test_kname_install_reads_config_problems_once(gpu, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KNAME_DEPTH", "deep")
    kname.install(targets=["fakegpu:launch"])
    kname.uninstall()
    kname.install(targets=["fakegpu:launch"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "KNAME_DEPTH='deep'" in err[0]


def test_install_takes_targets_as_one_comma_separated_string(gpu) -> None:
    module = fakegpu()
    kname.install(targets="fakegpu:launch,fakegpu:Stream.launch")
    assert is_wrapper(module.launch)
    assert is_wrapper(vars(module.Stream)["launch"])


def test_disable_puts_the_originals_back_and_enable_the_wrappers(gpu) -> None:
    module = fakegpu()
    original = module.launch
    kname.install(targets=["fakegpu:launch"])
    wrapper = module.launch
    kname.disable()
    assert module.launch is original
    wrapper(1)  # a reference taken while enabled still works, unnamed
    kname.enable()
    assert module.launch is wrapper
    assert kname.names() == {}


# --------------------------------------------------------------------------
# Installing again: counts kept, old wrappers off for good
# --------------------------------------------------------------------------


def test_uninstall_then_install_keeps_the_counts_so_far(gpu) -> None:
    module = fakegpu()
    kname.install(targets=["fakegpu:launch"])
    for _ in range(3):
        module.launch()  # L:first
    kname.uninstall()
    module.launch()  # not installed: not counted
    kname.install(targets=["fakegpu:launch"])
    for _ in range(2):
        module.launch()  # L:first-again
    module.launch()
    counts = kname.names()
    assert sum(counts.values()) == 6, counts
    assert census.census()["total_launches"] == 6
    assert sorted(counts.values()) == [1, 2, 3]


@pytest.mark.parametrize(
    "after",
    ["enable", "disable-enable", "install", "paused"],
)
def test_a_wrapper_kept_after_uninstall_never_names_again(gpu, after: str) -> None:
    module = fakegpu()
    kname.install(targets=["fakegpu:launch"])
    kept = module.launch  # another tool holds kname's wrapper
    kept()
    kname.uninstall()
    if after == "enable":
        kname.enable()
    elif after == "disable-enable":
        kname.disable()
        kname.enable()
    elif after == "install":
        kname.install(targets=["fakegpu:launch"])
        assert module.launch is not kept
    else:
        with kname.paused():
            pass
    assert kept(7) == (7,)
    assert sum(kname.names().values()) == 1, kname.names()


def test_a_wrapper_kept_after_uninstall_pushes_no_range(gpu, inject_lib, tmp_path) -> None:
    program = tmp_path / "kept.py"
    program.write_text(
        "import fakegpu, kname\n"
        "kname.install(targets=['fakegpu:launch'])\n"
        "kept = fakegpu.launch\n"
        "kept()\n"
        "kname.uninstall()\n"
        "kname.enable()\n"
        "kept()\n"
        "kname.install(targets=['fakegpu:launch'])\n"
        "kept()\n"
        "fakegpu.launch()\n"
        "print(sum(kname.names().values()))\n"
    )
    env = {"PYTHONPATH": f"{gpu}:{REPO}"}
    done, capture = run_captured([sys.executable, str(program)], inject_lib, tmp_path, env=env,
                                 cwd=gpu, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert capture.ranges("kname") == ["<module> kept.py:4", "<module> kept.py:10"]
    assert done.stdout.strip() == "2"


# --------------------------------------------------------------------------
# install(targets) in a program kname has already started (KNAME=1)
# --------------------------------------------------------------------------


def test_install_with_targets_adds_them_to_the_running_install(gpu, monkeypatch) -> None:
    module = fakegpu()
    monkeypatch.setenv("KNAME_TARGETS", "fakegpu:launch_a")
    kname.install()  # as the start-up gate does with KNAME=1
    kept = module.launch_a  # a wrapper the program already holds
    kname.install(targets=["fakegpu:launch_b"])  # was ignored, without a word
    assert is_wrapper(module.launch_a) and is_wrapper(module.launch_b)
    assert lifecycle.current_config().targets == ("fakegpu:launch_a", "fakegpu:launch_b")
    module.launch_a()
    module.launch_b()
    kept()  # still named: the install's switch is the same
    assert sum(kname.names().values()) == 3, kname.names()
    kname.uninstall()
    assert not is_wrapper(module.launch_a) and not is_wrapper(module.launch_b)


def test_targets_added_while_disabled_are_wrapped_at_enable(gpu) -> None:
    module = fakegpu()
    kname.install(targets=["fakegpu:launch_a"])
    kname.disable()
    kname.install(targets=["fakegpu:launch_b"])
    assert not is_wrapper(module.launch_a) and not is_wrapper(module.launch_b)
    kname.enable()
    assert is_wrapper(module.launch_a) and is_wrapper(module.launch_b)


def test_a_target_added_later_says_its_problem_as_given_to_install(gpu, capsys, monkeypatch):
    monkeypatch.setenv("KNAME_TARGETS", "fakegpu:launch_a")
    fakegpu()
    kname.install()
    kname.install(targets=["fakegpu:nope"])
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kname: install(targets=...) entry 'fakegpu:nope' was not found"), line


def test_install_with_targets_after_the_start_up_gate_names_them(gpu, kname_venv) -> None:
    (gpu / "prog.py").write_text(
        "import kname\n"
        "kname.install('fakegpu:launch')\n"
        "import fakegpu\n"
        "fakegpu.launch()\n"
        "print(kname.is_installed(), kname.names())\n"
    )
    env = {"KNAME": "1", "PYTHONPATH": str(gpu)}
    done = kname_venv.python_run("prog.py", env=env, cwd=gpu)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip() == "True {'<module> prog.py:4': 1}"


# --------------------------------------------------------------------------
# Said at exit: a target's module that never came, a KNAME_SKIP prefix that matched none
# --------------------------------------------------------------------------

PROGRAM = """
import kname
kname.install()
import physics.launch
physics.launch.launch_1d()
print(sum(kname.names().values()))
"""


@pytest.fixture
def physics_app(gpu: Path) -> Path:
    """An app directory with a package of its own, `physics` (its launcher wraps fakegpu)."""
    (gpu / "physics").mkdir()
    (gpu / "physics" / "__init__.py").write_text("")
    (gpu / "physics" / "launch.py").write_text(
        "import fakegpu\n\n\ndef launch_1d():\n    fakegpu.launch()\n"
    )
    (gpu / "physics" / "other.py").write_text("def f():\n    pass\n")
    (gpu / "prog.py").write_text(PROGRAM)
    return gpu


def run_app(app: Path, program: str = "prog.py", **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not cleaned(k)}
    environ.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, program], capture_output=True, text=True, env=environ,
                          cwd=app, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("targets", "meant"),
    [
        ("physic.launch:launch_1d", "physics.launch:launch_1d"),
        ("physics.lanch:launch_1d", "physics.launch:launch_1d"),
        ("nosuchmod:f", None),
    ],
)
def test_a_target_module_that_cannot_be_imported_is_said_at_exit(physics_app, targets, meant):
    done = run_app(physics_app, KNAME_TARGETS=f"fakegpu:launch_a,{targets}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    module = targets.split(":")[0]
    hint = f" (did you mean {meant}?)" if meant else ""
    assert done.stderr.splitlines() == [
        f"kname: KNAME_TARGETS entry {targets!r} named nothing: module {module!r} was never "
        f"imported, and no module of that name can be imported here{hint}"
    ]


def test_under_strict_a_target_that_never_came_is_exit_status_2_after_the_census(physics_app):
    report = physics_app / "census.json"
    done = run_app(physics_app, KNAME_TARGETS="physics.launch:launch_1d,nosuchmod:f",
                   KNAME_STRICT="1", KNAME_REPORT=str(report))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == "1"
    (line,) = done.stderr.splitlines()
    assert line.startswith("kname: KNAME_TARGETS entry 'nosuchmod:f' named nothing: ")
    assert line.endswith("can be imported here (KNAME_STRICT is on: exit status 2)")
    assert json.loads(report.read_text())["total_launches"] == 1


def test_a_target_module_that_could_be_imported_but_was_not_is_not_said(physics_app) -> None:
    done = run_app(physics_app, KNAME_TARGETS="physics.launch:launch_1d,physics.other:f",
                   KNAME_STRICT="1")  # fmt: skip
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "1", "")


def test_finding_the_nearest_target_module_imports_none_of_the_users(physics_app) -> None:
    (physics_app / "physics" / "__init__.py").write_text("print('physics was imported')\n")
    (physics_app / "quiet.py").write_text("import kname\nkname.install()\n")
    done = run_app(physics_app, "quiet.py", KNAME_TARGETS="physics.lanch:launch_1d")
    assert done.stdout == ""
    assert done.stderr.endswith("(did you mean physics.launch:launch_1d?)\n"), done.stderr


@pytest.mark.parametrize("variable", ["KNAME_SKIP", "KNAME_USER"])
@pytest.mark.parametrize(
    ("skip", "said"),
    [
        ("physic", " (did you mean 'physics'?)"),
        ("physics.lanch", " (did you mean 'physics.launch'?)"),
        ("nosuchmod", ""),
        ("physics", None),  # imported
        ("physics.launch", None),
        ("physics.other", None),  # importable, not imported: this run's choice
        ("json", None),
    ],
)
def test_a_skip_or_user_prefix_that_matched_no_module_is_said_at_exit(
    physics_app, variable, skip, said
) -> None:
    done = run_app(physics_app, KNAME_TARGETS="physics.launch:launch_1d", **{variable: skip})
    assert done.returncode == 0, done.stderr
    expected = [] if said is None else [
        f"kname: {variable} entry {skip!r} matched no module: none of that name was imported, "
        f"nor can one be imported here{said}"
    ]  # fmt: skip
    assert done.stderr.splitlines() == expected


def test_under_strict_a_skip_prefix_that_matched_no_module_is_exit_status_2(physics_app):
    done = run_app(physics_app, KNAME_TARGETS="physics.launch:launch_1d", KNAME_SKIP="physic",
                   KNAME_STRICT="1")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.endswith("(did you mean 'physics'?) (KNAME_STRICT is on: exit status 2)\n")


def test_the_kname_command_itself_says_nothing_at_exit(kname_venv, tmp_path) -> None:
    # Started by KNAME=1 too, it runs none of the program's code: its exit must not call the
    # program's targets unmet, nor (KNAME_STRICT=1) change its own exit status.
    env = {"KNAME": "1", "KNAME_TARGETS": "nosuchmod:f", "KNAME_STRICT": "1"}
    census = tmp_path / "census.json"
    census.write_text(json.dumps({"schema": 1, "total_launches": 0, "sites": []}))
    done = kname_venv.python_run("-m", "kname", "report", str(census), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""


# --------------------------------------------------------------------------
# A lifecycle call entered again on its own thread (a signal handler's)
# --------------------------------------------------------------------------

# Two targets, one a user's launcher: its watching makes each target's changes with nesting.
NESTED_TARGETS = "fakegpu:launch,fakegpu:Kernel.__call__"
LIFECYCLE_CALLS = {
    "install": lambda: kname.install(NESTED_TARGETS),
    "uninstall": kname.uninstall,
    "enable": kname.enable,
    "disable": kname.disable,
}


def python_calls_of(call) -> int:
    """How many Python functions `call` runs."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        call()
    finally:
        sys.setprofile(None)
    return calls


def run_interrupted(call, at: int, handler) -> None:
    """Run `call`, running `handler` (as a signal handler runs) at its `at`-th Python call."""
    calls = 0

    def interrupt(frame, event, arg):
        nonlocal calls
        calls += event == "call"
        if calls == at:
            handler()  # the profile function runs unprofiled, as a handler runs on the thread

    sys.setprofile(interrupt)
    try:
        call()
    finally:
        sys.setprofile(None)


def assert_consistent(module) -> None:
    """The launch function is wrapped, and counts, exactly when kname is installed and enabled."""
    naming = lifecycle.is_installed() and lifecycle.is_enabled()
    assert is_wrapper(module.launch) == naming
    before = launches()
    module.launch()
    assert launches() == before + naming


@pytest.mark.parametrize("inner", list(LIFECYCLE_CALLS))
@pytest.mark.parametrize("outer", ["install", "uninstall"])
def test_a_lifecycle_call_made_at_any_step_of_another_leaves_kname_whole(gpu, outer, inner):
    """Issue 45 item 11: install()/uninstall()/enable()/disable() called (as from a signal
    handler) at each Python call inside install() or uninstall(): nothing is raised, the state
    after both is consistent, and a final uninstall() puts every original back."""
    module = fakegpu()
    original, original_call = module.launch, vars(module.Kernel)["__call__"]
    kname.install(NESTED_TARGETS)  # every unit imported once: the steps are the same each time
    steps = python_calls_of(LIFECYCLE_CALLS[outer])
    kname.uninstall()
    for at in range(1, steps + 1):
        if outer == "uninstall":
            kname.install(NESTED_TARGETS)
        run_interrupted(LIFECYCLE_CALLS[outer], at, LIFECYCLE_CALLS[inner])
        assert_consistent(module)
        kname.enable()
        kname.uninstall()
        assert module.launch is original and vars(module.Kernel)["__call__"] is original_call
        before = launches()
        module.launch()
        assert launches() == before, f"still counting after uninstall (step {at} of {steps})"


SIGNAL_STORM = """\
import faulthandler
import json
import signal
import sys

import fakegpu
import kname

faulthandler.dump_traceback_later(60, exit=True)  # a deadlock fails the test, with tracebacks
TARGETS = "fakegpu:launch,fakegpu:Kernel.__call__"
original, original_call = fakegpu.launch, vars(fakegpu.Kernel)["__call__"]
calls = {"install": 0, "uninstall": 0}
raised = []


def on_alarm(signum, frame):
    name = "install" if sum(calls.values()) % 2 else "uninstall"
    calls[name] += 1
    try:
        kname.install(TARGETS) if name == "install" else kname.uninstall()
    except BaseException as exc:
        raised.append(f"handler: {exc!r}")


signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
for _ in range(int(sys.argv[1])):
    try:
        kname.install(TARGETS)
        fakegpu.launch()
        kname.uninstall()
    except BaseException as exc:
        raised.append(f"main: {exc!r}")
signal.setitimer(signal.ITIMER_REAL, 0)
kname.uninstall()
counted = sum(kname.names().values())
fakegpu.launch()
fakegpu.Kernel()()
print(json.dumps({
    "raised": raised[:5],
    "calls": calls,
    "restored": fakegpu.launch is original and vars(fakegpu.Kernel)["__call__"] is original_call,
    "counting": sum(kname.names().values()) - counted,
}))
"""


def test_install_and_uninstall_from_a_signal_storm_over_install_and_uninstall(gpu) -> None:
    """Issue 45 item 11 as the trial met it: SIGALRM every 0.2 ms, its handler installing or
    uninstalling, while the main thread installs, launches and uninstalls in a loop."""
    (gpu / "storm.py").write_text(SIGNAL_STORM)
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env["PYTHONPATH"] = f"{gpu}:{REPO}"
    done = subprocess.run([sys.executable, "storm.py", "2000"], capture_output=True, text=True,
                          env=env, cwd=gpu, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    assert out["raised"] == []
    assert out["calls"]["install"] > 0 and out["calls"]["uninstall"] > 0
    assert out["restored"] and out["counting"] == 0


# --------------------------------------------------------------------------
# A subinterpreter
# --------------------------------------------------------------------------

IN_A_SUBINTERPRETER = """\
import json
import os
import shutil
import sys

try:
    import _interpreters as interpreters  # 3.13
except ImportError:
    import _xxsubinterpreters as interpreters  # 3.10 to 3.12 (3.12: its own GIL by default)

SUB = '''
import json, os, sys
import fakegpu, kname
kname.install("fakegpu:launch")
fakegpu.launch()
seen = {
    "installed": kname.is_installed(),
    "wrapped": fakegpu.launch is not fakegpu.launch.__wrapped__
    if hasattr(fakegpu.launch, "__wrapped__") else False,
    "names": kname.names(),
    "imported": sorted(m for m in sys.modules if m.startswith("kname._native") or m == "nvtx"),
}
os.write(1, (json.dumps(seen) + "\\\\n").encode())
'''
interpreters.run_string(interpreters.create(), SUB)
"""


def subinterpreter_pythons() -> list[str]:
    """This Python, and any other CPython 3.10 to 3.13 on PATH (3.12 is the first whose
    subinterpreters have a GIL of their own)."""
    found = [sys.executable]
    for minor in range(10, 14):
        other = shutil.which(f"python3.{minor}")
        if other and minor != sys.version_info[1]:
            works = subprocess.run([other, "-c", "import _thread"], capture_output=True,
                                   check=False, timeout=60)  # fmt: skip
            found += [other] if works.returncode == 0 else []
    return found


@pytest.mark.parametrize("python", subinterpreter_pythons())
def test_install_in_a_subinterpreter_is_one_line_and_kname_stays_off(gpu, python) -> None:
    """Issue 45 item 15: in a subinterpreter install() says one line, wraps nothing, and
    imports neither kname's C extensions (single-phase init) nor the nvtx package."""
    (gpu / "sub.py").write_text(IN_A_SUBINTERPRETER)
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env["PYTHONPATH"] = f"{gpu}:{REPO}"
    done = subprocess.run([python, "sub.py"], capture_output=True, text=True, env=env, cwd=gpu,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "installed": False, "wrapped": False, "names": {}, "imported": [],
    }  # fmt: skip
    assert done.stderr.splitlines() == [f"kname: {lifecycle.SUBINTERPRETER}"]


def test_the_tests_run_in_the_main_interpreter_and_kname_knows_it() -> None:
    assert hotpath.is_main_interpreter()
