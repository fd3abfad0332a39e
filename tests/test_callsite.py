"""Call-site detection: which line each launch is named after, and what a profiler sees.

In-process tests launch through a user-named target (`fakegpu:launch`, a module written into
tmp_path); the numba simulator and NVTX capture run in subprocesses (NVTX picks its tool at a
process's first NVTX call): numba's launches are in test_targets_numba.py, the ranges a profiler
sees in test_ranges.py.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import FAKEGPU, REPO, cleaned, line_of

import kname
from kname import callsite

pytestmark = pytest.mark.launches


class Sandbox:
    """Modules written into tmp_path, importable, and kname installed on them in-process."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.sources: dict[str, str] = {}
        self.write("fakegpu", FAKEGPU)

    def write(self, name: str, source: str) -> Path:
        source = textwrap.dedent(source)
        self.sources[name] = source
        path = self.root / f"{name}.py"
        path.write_text(source)
        return path

    def install(self, *targets: str, **env: str):
        """Set KNAME_<KEY> variables from `env`, then kname.install(targets)."""
        for key, value in env.items():
            self.monkeypatch.setenv(f"KNAME_{key.upper()}", value)
        kname.install(targets=list(targets) or ["fakegpu:launch"])

    def load(self, name: str):
        return importlib.import_module(name)

    def name(self, module: str, marker: str, function: str) -> str:
        """The default-format name of the line holding `marker` in `module`."""
        return f"{function} {module}.py:{line_of(self.sources[module], marker)}"

    def line(self, module: str, marker: str) -> int:
        return line_of(self.sources[module], marker)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield Sandbox(tmp_path, monkeypatch)
    for name in set(sys.modules) - before:
        if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(tmp_path)):
            del sys.modules[name]


# --------------------------------------------------------------------------
# In-process: which line is the call site
# --------------------------------------------------------------------------

USER = """
import functools
import threading

import fakegpu


def direct():
    return fakegpu.launch(1)  # L:direct


run_lambda = lambda: fakegpu.launch(2)  # L:lambda


def listcomp():
    return [fakegpu.launch(i) for i in range(3)]  # L:listcomp


def generator():
    for i in range(4):
        yield fakegpu.launch(i)  # L:generator


def consume():
    return list(generator())


class Model:
    def step(self):
        return fakegpu.launch(self)  # L:method


def traced(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


@traced
def decorated():
    return fakegpu.launch(5)  # L:decorated


def partial():
    launch_one = functools.partial(fakegpu.launch, 1)
    return launch_one()  # L:partial


def worker_a():
    fakegpu.launch("a")  # L:thread-a


def worker_b():
    fakegpu.launch("b")  # L:thread-b


def threads():
    barrier = threading.Barrier(2)

    def both(work):
        barrier.wait()
        work()

    running = [threading.Thread(target=both, args=(w,)) for w in (worker_a, worker_b)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()


def five():
    for _ in range(5):
        fakegpu.launch()  # L:five


def two_lines():
    fakegpu.launch()  # L:first
    fakegpu.launch()  # L:second


def two_kernels():
    for launch in (fakegpu.launch_a, fakegpu.launch_b, fakegpu.launch_a):
        launch()  # L:two-kernels


def inner():
    return fakegpu.launch()  # L:inner


def outer():
    return inner()  # L:outer


def custom_launcher():
    return kname.site_name()  # L:site-name
"""


@pytest.fixture
def user(sandbox: Sandbox):
    """The USER module, importable as `user_mod`."""
    sandbox.write("user_mod", "import kname\n" + textwrap.dedent(USER))
    return sandbox


def test_a_direct_call_is_named_after_its_line(user: Sandbox) -> None:
    user.install()
    module = user.load("user_mod")
    assert module.direct() == (1,)
    assert kname.names() == {user.name("user_mod", "L:direct", "direct"): 1}


@pytest.mark.parametrize(
    ("call", "marker", "function", "launches"),
    [
        ("run_lambda", "L:lambda", "<lambda>", 1),
        ("consume", "L:generator", "generator", 4),
        ("decorated", "L:decorated", "decorated", 1),
        ("partial", "L:partial", "partial", 1),
    ],
)
def test_the_launching_line_is_found_through_layers(user, call, marker, function, launches):
    user.install()
    getattr(user.load("user_mod"), call)()
    assert kname.names() == {user.name("user_mod", marker, function): launches}


def test_a_list_comprehension_is_named_after_its_line(user: Sandbox) -> None:
    user.install()
    user.load("user_mod").listcomp()
    [(name, launches)] = kname.names().items()
    assert name.endswith(f" user_mod.py:{user.line('user_mod', 'L:listcomp')}")
    assert name.split()[0].startswith("listcomp")
    assert launches == 3


def test_a_method_is_named_by_its_qualified_name(user: Sandbox) -> None:
    user.install()
    user.load("user_mod").Model().step()
    assert kname.names() == {user.name("user_mod", "L:method", "Model.step"): 1}


def test_each_thread_is_named_after_its_own_line(user: Sandbox) -> None:
    user.install()
    module = user.load("user_mod")
    for _ in range(3):
        module.threads()
    assert kname.names() == {
        user.name("user_mod", "L:thread-a", "worker_a"): 3,
        user.name("user_mod", "L:thread-b", "worker_b"): 3,
    }


def test_the_same_line_launching_five_times_is_one_site_with_count_5(user: Sandbox) -> None:
    user.install()
    user.load("user_mod").five()
    assert kname.names() == {user.name("user_mod", "L:five", "five"): 5}
    assert len(callsite.sites) == 1


def test_two_lines_launching_the_same_function_get_two_names(user: Sandbox) -> None:
    user.install()
    module = user.load("user_mod")
    module.two_lines()
    module.two_lines()
    assert kname.names() == {
        user.name("user_mod", "L:first", "two_lines"): 2,
        user.name("user_mod", "L:second", "two_lines"): 2,
    }


def test_one_line_launching_two_kernels_keeps_their_names_apart(user: Sandbox) -> None:
    user.install("fakegpu:launch_a", "fakegpu:launch_b", format="{kernel} @ {function}:{line}")
    user.load("user_mod").two_kernels()
    line = user.line("user_mod", "L:two-kernels")
    assert kname.names() == {
        f"launch_a @ two_kernels:{line}": 2,
        f"launch_b @ two_kernels:{line}": 1,
    }


def test_depth_2_names_the_caller_too(user: Sandbox) -> None:
    user.install(depth="2")
    user.load("user_mod").outer()
    assert kname.names() == {
        f"{user.name('user_mod', 'L:inner', 'inner')}"
        f" < {user.name('user_mod', 'L:outer', 'outer')}": 1
    }


def test_depth_2_callers_follow_kname_format_too(user: Sandbox) -> None:
    user.install(depth="2", format="{function}:{line}")
    user.load("user_mod").outer()
    inner, outer = user.line("user_mod", "L:inner"), user.line("user_mod", "L:outer")
    assert kname.names() == {f"inner:{inner} < outer:{outer}": 1}


def test_depth_2_does_not_reuse_a_site_seen_with_fewer_callers(user: Sandbox) -> None:
    user.install(depth="2")
    module = user.load("user_mod")
    # From a bare thread, `inner` has no user caller: the name has one frame.
    import threading

    thread = threading.Thread(target=module.inner)
    thread.start()
    thread.join()
    module.outer()
    inner = user.name("user_mod", "L:inner", "inner")
    assert kname.names() == {inner: 1, f"{inner} < {user.name('user_mod', 'L:outer', 'outer')}": 1}


def test_site_name_names_the_line_that_asks(user: Sandbox) -> None:
    user.install()
    name = user.load("user_mod").custom_launcher()
    assert name == user.name("user_mod", "L:site-name", "custom_launcher")
    assert kname.names() == {}  # asking for a name is not a launch


def test_site_name_works_without_install(user: Sandbox) -> None:
    name = user.load("user_mod").custom_launcher()
    assert name == user.name("user_mod", "L:site-name", "custom_launcher")


def test_a_helper_in_a_kname_skip_module_names_its_caller(sandbox: Sandbox) -> None:
    sandbox.write("launchers", "import fakegpu\n\ndef go():\n    return fakegpu.launch()\n")
    sandbox.write(
        "app",
        """
        import launchers

        def run():
            launchers.go()  # L:via-helper
        """,
    )
    sandbox.install(skip="launchers")
    sandbox.load("app").run()
    assert kname.names() == {sandbox.name("app", "L:via-helper", "run"): 1}


def test_without_kname_skip_the_helper_is_the_call_site(sandbox: Sandbox) -> None:
    sandbox.write("launchers", "import fakegpu\n\ndef go():\n    return fakegpu.launch()  # L:go\n")
    sandbox.write("app", "import launchers\n\ndef run():\n    launchers.go()\n")
    sandbox.install()
    sandbox.load("app").run()
    assert kname.names() == {sandbox.name("launchers", "L:go", "go"): 1}


def test_module_level_code_of_a_large_module_is_named(sandbox: Sandbox) -> None:
    functions = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(300))
    sandbox.write(
        "big",
        f"import fakegpu\n\n{functions}\n"
        "for i in range(7):\n"
        "    fakegpu.launch(f1(i))  # L:big-loop\n"
        "fakegpu.launch(f299(0))  # L:big-last\n",
    )
    sandbox.install()
    sandbox.load("big")
    assert kname.names() == {
        sandbox.name("big", "L:big-loop", "<module>"): 7,
        sandbox.name("big", "L:big-last", "<module>"): 1,
    }


def test_names_are_counted_in_first_seen_order(user: Sandbox) -> None:
    user.install()
    module = user.load("user_mod")
    module.five()
    module.direct()
    module.five()
    assert list(kname.names()) == [
        user.name("user_mod", "L:five", "five"),
        user.name("user_mod", "L:direct", "direct"),
    ]


# --------------------------------------------------------------------------
# Subprocesses: install prefixes (numba's simulator: test_targets_numba.py; NVTX: test_ranges.py)
# --------------------------------------------------------------------------


def clean_env(**extra: str | None) -> dict[str, str | None]:
    """No KNAME_* or NVTX variables from the outside; kname importable from the checkout."""
    env: dict[str, str | None] = {k: None for k in os.environ if cleaned(k)}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_python(script: Path, env: dict[str, str | None], cwd: Path) -> dict[str, int]:
    """Run `script`, which prints kname.names() as JSON on its last line; return that."""
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=full, cwd=cwd,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


MYPKG = """
import fakegpu


def run():
    for _ in range(2):
        fakegpu.launch()  # L:mypkg
"""

DRIVER = """
import json

import kname

kname.install(targets=["fakegpu:launch"])
import mypkg.m

mypkg.m.run()
print(json.dumps(kname.names()))
"""


def test_the_same_file_under_two_install_prefixes_gets_the_same_name(tmp_path) -> None:
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "fakegpu.py").write_text(FAKEGPU)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    results = []
    for prefix in ("a/lib/python3.11/site-packages", "b/deep/venv/lib/python3.11/site-packages"):
        site = tmp_path / prefix
        (site / "mypkg").mkdir(parents=True)
        (site / "mypkg" / "__init__.py").touch()
        (site / "mypkg" / "m.py").write_text(textwrap.dedent(MYPKG))
        pythonpath = os.pathsep.join([str(site), str(tmp_path / "libs"), str(REPO)])
        results.append(run_python(driver, clean_env(PYTHONPATH=pythonpath), cwd=site))
    assert results[0] == results[1] == {f"run mypkg/m.py:{line_of(MYPKG, 'L:mypkg')}": 2}


# --------------------------------------------------------------------------
# In-process: the standard library's frames are never the call site
# --------------------------------------------------------------------------

STDLIB_USER = """
import asyncio
import concurrent.futures
import threading

import fakegpu
import launchers


def work():
    fakegpu.launch(1)  # L:work


def in_executor():
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(work).result()


def in_thread(target, *args):
    thread = threading.Thread(target=target, args=args)
    thread.start()
    thread.join()


def as_executor_task():
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(fakegpu.launch, 3).result()


async def soon():
    asyncio.get_running_loop().call_soon(fakegpu.launch, 4)
    await asyncio.sleep(0)


def in_event_loop():
    asyncio.run(soon())  # L:asyncio-run


def through_helper():
    launchers.go()  # L:through-helper
"""


@pytest.fixture
def stdlib_user(sandbox: Sandbox):
    sandbox.write("launchers", "import fakegpu\n\ndef go():\n    return fakegpu.launch()  # L:go\n")
    sandbox.write("stdlib_app", STDLIB_USER)
    return sandbox


def test_an_executor_task_is_named_without_the_executors_frames(stdlib_user: Sandbox) -> None:
    stdlib_user.install(depth="2")
    stdlib_user.load("stdlib_app").in_executor()
    # The worker thread's only user frame is `work`: no `_WorkItem.run` as its caller.
    assert kname.names() == {stdlib_user.name("stdlib_app", "L:work", "work"): 1}


def test_a_launch_called_back_by_the_event_loop_is_named_after_the_users_line(
    stdlib_user: Sandbox,
) -> None:
    stdlib_user.install()
    stdlib_user.load("stdlib_app").in_event_loop()
    assert kname.names() == {stdlib_user.name("stdlib_app", "L:asyncio-run", "in_event_loop"): 1}


def test_a_launch_with_no_user_frame_is_named_by_its_kernel_alone(stdlib_user: Sandbox) -> None:
    stdlib_user.install()
    app = stdlib_user.load("stdlib_app")
    app.in_thread(app.fakegpu.launch, 2)
    app.as_executor_task()
    assert kname.names() == {"launch <no user frame>": 2}


def test_a_helper_named_when_no_user_frame_called_it_does_not_name_a_users_call(
    stdlib_user: Sandbox,
) -> None:
    stdlib_user.install(skip="launchers")
    app = stdlib_user.load("stdlib_app")
    app.in_thread(app.launchers.go)  # only the helper and the thread's frames: named by it
    app.through_helper()  # the same helper line, called from the user's line
    assert kname.names() == {
        stdlib_user.name("launchers", "L:go", "go"): 1,
        stdlib_user.name("stdlib_app", "L:through-helper", "through_helper"): 1,
    }


def test_site_name_of_a_kernel_object_uses_the_kernels_name(user: Sandbox, capsys) -> None:
    user.install(format="{kernel} {function}:{line}")
    module = user.load("user_mod")
    line = user.line("user_mod", "L:site-name")

    def my_kernel():
        pass

    assert module.custom_launcher() == f" custom_launcher:{line}"  # kernel="" by default
    cases = {"axpy": "axpy", my_kernel: my_kernel.__qualname__, module.fakegpu.Kernel(): "Kernel"}
    for kernel, expected in cases.items():
        name = kname.site_name(kernel=kernel)
        assert name.split()[0] == expected
    assert capsys.readouterr().err == ""


SITE_NAME_OF_A_KERNEL = """
import json

import kname

kname.install()
from numba import cuda


@cuda.jit
def axpy(out):
    pass


def custom_launcher():
    return kname.site_name(kernel=axpy)  # L:site-name


print(json.dumps(custom_launcher()))
"""


def test_site_name_of_a_simulator_kernel_is_named_by_its_function(tmp_path) -> None:
    script = tmp_path / "site_name_app.py"
    script.write_text(textwrap.dedent(SITE_NAME_OF_A_KERNEL))
    env = clean_env(NUMBA_ENABLE_CUDASIM="1", KNAME_FORMAT="{kernel} {function}:{line}")
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=full, cwd=tmp_path,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    line = line_of(SITE_NAME_OF_A_KERNEL, "L:site-name")
    assert json.loads(done.stdout) == f"axpy custom_launcher:{line}"


def test_new_rules_replace_the_old_whole_and_sites_stay_handed_to_a_profile() -> None:
    """configure() makes one new frozen Rules and keeps use_site_calls' factory;
    use_site_calls() changes the factory alone."""

    def factory(site):
        return site.push, site.pop

    callsite.use_site_calls(factory)
    try:
        before = callsite._rules
        callsite.configure(("mylib",), "{kernel}", 2, False, ("gpulib",))
        rules = callsite._rules
        assert rules is not before and rules.site_calls is factory
        assert (rules.skip, rules.template, rules.depth, rules.emit_nvtx) == (
            ("mylib",), "{kernel}", 2, False,
        )  # fmt: skip
        assert rules.library_modules == (*callsite.CORE_LIBRARY_MODULES, "gpulib")
        assert rules.library_path.search("/lib/site-packages/gpulib/launch.py")
        with pytest.raises(AttributeError):
            rules.depth = 3  # type: ignore[misc]
        callsite.use_site_calls(None)
        assert callsite._rules == rules.replace(site_calls=None)
        assert callsite._rules != rules
    finally:
        callsite.use_site_calls(None)
