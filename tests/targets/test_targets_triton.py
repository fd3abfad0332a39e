"""The Triton target, with the real Triton package (skipped where it does not import).

No GPU here, so no kernel launches: Triton's C launcher, which calls
`knobs.runtime.launch_enter_hook(metadata)`, launches, then calls `launch_exit_hook(metadata)`,
is stood in for by `fakelauncher.run` (written into tmp_path, a library by KNAME_SKIP), which
calls Triton's real hook chains with real launch metadata (`LazyDict`). The fallback for Triton
without hook chains (wrapping `JITFunction.run`) is checked on a test double of that class.
Real launches are run by tests/gpu/libraries_demo.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.launches

pytest.importorskip("triton.knobs", reason="Triton 3.4+ is not installed")

FORMAT = "{kernel}|{function}|{line}"
HEADER = """
import contextlib
import kname
"""
FAKELAUNCHER = '''
"""Stands in for Triton's C launcher: enter hooks, the launch, exit hooks (not after a failure)."""

from triton import knobs
from triton.compiler.compiler import LazyDict


def run(name, fail=False):
    metadata = LazyDict({"name": name, "function": 0, "stream": 0})
    knobs.runtime.launch_enter_hook(metadata)
    if fail:
        raise RuntimeError("the launch failed")
    knobs.runtime.launch_exit_hook(metadata)


def outer(name):
    """A launcher of the user's own (a KNAME_TARGETS entry) that launches a Triton kernel."""
    run(name)


def jit_run(self, *args, grid, warmup, **kwargs):
    """Stands in for JITFunction.run (no GPU here): its launch, hooks and all."""
    run(self.fn.__name__)
    return ("ran", args, grid, warmup, kwargs)
'''


def run_app(
    source: str, lib: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[str, str, Capture]:
    """Run `source` as app.py under NVTX capture; return (source, stdout, capture)."""
    source = textwrap.dedent(HEADER) + textwrap.dedent(source)
    (tmp_path / "app.py").write_text(source)
    (tmp_path / "fakelauncher.py").write_text(FAKELAUNCHER)
    env = {
        "PYTHONPATH": f"{REPO}:{tmp_path}",
        "KNAME_FORMAT": FORMAT,
        "KNAME_SKIP": "fakelauncher",
        **(env or {}),
    }
    args = [sys.executable, str(tmp_path / "app.py")]
    done, capture = run_captured(args, lib, tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert capture.balanced(), capture.stack_errors()
    return source, done.stdout, capture


def test_hooks_join_the_chains_beside_others_and_leave_only_their_own(inject_lib, tmp_path):
    _, out, _ = run_app(
        """
        from triton import knobs
        from triton.runtime.jit import JITFunction
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        run = JITFunction.run
        def other_enter(metadata): pass
        def other_exit(metadata): pass
        enter.add(other_enter)
        exit_.add(other_exit)
        kname.install()
        print(len(enter.calls), enter.calls[0] is other_enter, len(exit_.calls))
        print(knobs.runtime.launch_enter_hook is enter, JITFunction.run is run)
        kname.uninstall()
        print(enter.calls == [other_enter], exit_.calls == [other_exit])
        kname.install()
        kname.install()
        print(len(enter.calls), len(exit_.calls))
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split("\n")[:4] == ["2 True 2", "True True", "True True", "2 2"]


def test_launches_are_named_after_their_line_with_the_kernel_name(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        import fakelauncher

        def step():
            fakelauncher.run("add_kernel")  # first
            fakelauncher.run("add_kernel")  # second
            fakelauncher.run("mul_kernel")  # third

        step()
        step()
        print(sorted(kname.names().values()))
        """,
        inject_lib,
        tmp_path,
    )
    first, second, third = (line_of(source, f"# {n}") for n in ("first", "second", "third"))
    expected = [f"add_kernel|step|{first}", f"add_kernel|step|{second}", f"mul_kernel|step|{third}"]
    assert capture.ranges("kname") == expected * 2
    assert capture.max_depth("kname") == 1
    assert out.strip() == "[2, 2, 2]"


def test_a_range_left_open_by_a_failed_launch_is_closed_at_the_next(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        kname.install()
        import fakelauncher
        with contextlib.suppress(RuntimeError):
            fakelauncher.run("bad_kernel", fail=True)  # failing
        fakelauncher.run("good_kernel")  # next
        """,
        inject_lib,
        tmp_path,
    )
    failing, following = line_of(source, "# failing"), line_of(source, "# next")
    assert capture.ranges("kname") == [
        f"bad_kernel|<module>|{failing}",
        f"good_kernel|<module>|{following}",
    ]
    assert capture.max_depth("kname") == 1  # the stale range was popped before the next push


def test_no_range_while_disabled_and_none_inside_another_kname_launch(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        kname.install()
        import fakelauncher
        with kname.paused():
            fakelauncher.run("paused_kernel")
        fakelauncher.outer("inner_kernel")  # outer-line
        """,
        inject_lib,
        tmp_path,
        env={"KNAME_TARGETS": "triton,fakelauncher:outer"},
    )
    assert capture.ranges("kname") == [f"outer|<module>|{line_of(source, 'outer-line')}"]


@pytest.mark.parametrize("mode", ["nvtx", "rename"])
def test_disable_takes_kname_out_of_triton_and_enable_puts_it_back(inject_lib, tmp_path, mode):
    """Disabled, Triton's hook chains hold only what others put there and JITFunction.run is
    Triton's own (in rename mode too), so a launch costs nothing of kname's."""
    source, out, capture = run_app(
        """
        from triton import knobs
        from triton.runtime.jit import JITFunction
        import fakelauncher
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        run = JITFunction.run
        def other_enter(metadata): pass
        enter.add(other_enter)

        def state():
            return [enter.calls == [other_enter], exit_.calls == [], JITFunction.run is run]

        kname.install()
        print(*state())
        kname.disable()
        print(*state())
        fakelauncher.run("while_disabled")
        with kname.paused():
            print(*state())
        kname.enable()
        print(*state(), len(enter.calls), len(exit_.calls))
        fakelauncher.run("enabled_again")  # enabled-line
        """,
        inject_lib,
        tmp_path,
        env={"KNAME_MODE": mode},
    )
    run_is_triton_own = "False" if mode == "rename" else "True"
    assert out.split("\n")[:4] == [
        f"False False {run_is_triton_own}",
        "True True True",
        "True True True",
        f"False False {run_is_triton_own} 2 1",
    ]
    assert capture.ranges("kname") == [f"enabled_again|<module>|{line_of(source, 'enabled-line')}"]


def test_a_triton_kernel_inside_a_user_named_launcher_is_in_its_range_only(inject_lib, tmp_path):
    """The launcher is the user's own code (not KNAME_SKIP): its range names the launch."""
    (tmp_path / "mylauncher.py").write_text(
        "import fakelauncher\n\n\ndef launch(name):\n    fakelauncher.run(name)\n"
    )
    source, out, capture = run_app(
        """
        kname.install()
        import mylauncher
        for _ in range(3):
            mylauncher.launch("inner_kernel")  # outer-line
        print(sum(kname.names().values()))
        """,
        inject_lib,
        tmp_path,
        env={"KNAME_TARGETS": "triton,mylauncher:launch"},
    )
    assert capture.ranges("kname") == [f"launch|<module>|{line_of(source, 'outer-line')}"] * 3
    assert out.strip() == "3"


def test_metadata_name_reads_the_metadata_without_evaluating_it():
    from triton.compiler.compiler import LazyDict

    from kname.targets.triton import UNNAMED, metadata_name

    lazy = LazyDict({"name": "k"})
    lazy.add(lambda: pytest.fail("evaluated"), ())
    assert metadata_name(lazy) == "k"
    assert metadata_name({"name": "plain"}) == "plain"
    assert metadata_name(None) == UNNAMED
    assert metadata_name(LazyDict({})) == UNNAMED


def test_fallback_wraps_jit_function_run_except_warmup(inject_lib, tmp_path):
    """Triton without hook chains: a test double with JITFunction.run's signature."""
    source, out, capture = run_app(
        """
        import types
        from kname.launch import Switch
        from kname.targets import Options
        from kname.targets import triton as target

        kname.install(targets=[])  # reads KNAME_FORMAT, wraps nothing
        target.has_hook_chains = lambda knobs: False  # as on Triton before 3.4
        options = Options(Switch(), renaming=False, chosen=frozenset({"triton"}))

        class JITFunction:
            def __init__(self, fn):
                self.fn = fn

            def run(self, *args, grid, warmup, **kwargs):
                return ("ran", warmup)

        fake = types.ModuleType("fake_triton_jit")
        fake.JITFunction = JITFunction
        original = JITFunction.run
        changes = target.run_changes(fake, options)
        for change in changes:
            change.apply()
        print(target.run_changes(fake, options) == [], JITFunction.run is not original)

        def my_kernel():
            pass

        kernel = JITFunction(my_kernel)
        print(kernel.run(1, grid=(1,), warmup=True))  # warmup-line
        print(kernel.run(1, grid=(1,), warmup=False))  # launch-line
        for change in changes:
            change.restore()
        print(JITFunction.run is original)
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split("\n")[:4] == ["True True", "('ran', True)", "('ran', False)", "True"]
    assert capture.ranges("kname") == [f"my_kernel|<module>|{line_of(source, 'launch-line')}"]


def test_kernel_grid_launches_are_named_by_the_wrapper_alone(inject_lib, tmp_path):
    """`kernel[grid](...)`: named after its line by kname's launch wrapper, once per launch (the
    hooks beneath it add nothing); Triton's own launch runs as without kname, errors and all."""
    source, out, capture = run_app(
        """
        import triton
        from triton.runtime.jit import JITFunction, KernelInterface
        import fakelauncher

        getitem = KernelInterface.__getitem__
        kname.install()
        print(KernelInterface.__getitem__ is not getitem)

        @triton.jit
        def add_kernel(x):
            pass

        try:  # without a GPU Triton's launch raises: the range is closed all the same
            add_kernel[(1,)](1)  # real-line
        except Exception as exc:
            print("raised", type(exc).__name__)

        JITFunction.run = fakelauncher.jit_run  # its launch calls the hooks, as Triton's does

        def step():
            return add_kernel[(2, 1)](7, key=3)  # grid-line

        print(step())
        step()
        kname.uninstall()
        print(KernelInterface.__getitem__ is getitem)
        print(kname.names())
        """,
        inject_lib,
        tmp_path,
    )
    lines = out.splitlines()
    assert lines[0] == "True" and lines[-2] == "True"
    assert lines[2] == "('ran', (7,), (2, 1), False, {'key': 3})"
    real, grid = line_of(source, "real-line"), line_of(source, "grid-line")
    assert (
        capture.ranges("kname") == [f"add_kernel|<module>|{real}"] + [f"add_kernel|step|{grid}"] * 2
    )
    assert capture.max_depth("kname") == 1


def recording_kernel():
    """A Triton kernel class whose `run` returns what it was called with (no GPU here)."""
    from triton.runtime.jit import KernelInterface

    class Kernel(KernelInterface):
        fn = None

        def run(self, *args, grid, warmup, **kwargs):
            return args, grid, warmup, kwargs

    return Kernel()


def test_kernel_grid_calls_run_as_triton_does_on_every_call_shape(hot_path):
    """kname's `__getitem__` (C or Python) calls `kernel.run` exactly as Triton's lambda does:
    positional and keyword arguments in order, `grid=` and `warmup=False`, whatever their
    number; `grid=` given again fails alike; `k.__getitem__(g)` binds; uninstall restores."""
    import gc

    from triton.runtime.jit import KernelInterface

    import kname

    class Kernel(KernelInterface):
        fn = None

        def run(self, *args, grid, warmup, **kwargs):
            return args, grid, warmup, kwargs

    kernel = Kernel()
    calls = [
        lambda k: k[(1,)](),
        lambda k: k[(2, 3)](1, 2, BLOCK=32),
        lambda k: k[lambda meta: (4,)](*range(20), **{f"k{i}": i for i in range(20)}),
        lambda k: k.__getitem__((5,))(x=1),
        lambda k: KernelInterface.__getitem__(k, (6,))(9),
        # Keyword names made anew at each call (from a dict), 40 of them: past any cache.
        *[(lambda k, i=i: k[(i,)](i, **{f"a{i}": i})) for i in range(40)],
    ]

    def outcome(call, k):
        args, grid, warmup, kwargs = call(k)
        return args, grid({}) if callable(grid) else grid, warmup, kwargs  # a new lambda each

    bare = [outcome(call, kernel) for call in calls]
    assert bare[1] == ((1, 2), (2, 3), False, {"BLOCK": 32})
    with pytest.raises(TypeError) as bare_error:
        kernel[(1,)](grid=(2,))
    getitem = KernelInterface.__getitem__
    kname.install(targets=["triton"])
    made = type(vars(KernelInterface)["__getitem__"]).__name__
    assert made == {"native": "SubscriptLaunch", "python": "function"}[hot_path]
    for _ in range(3):  # again: remembered keyword names give the same calls
        assert [outcome(call, kernel) for call in calls] == bare
    with pytest.raises(TypeError) as error:
        kernel[(1,)](grid=(2,))
    assert type(error.value) is type(bare_error.value)
    launched = kernel[(7,)]
    del kernel
    gc.collect()
    assert launched(1) == ((1,), (7,), False, {})  # obj[key] keeps the kernel alive
    kname.uninstall()
    assert KernelInterface.__getitem__ is getitem
    assert sum(kname.names().values()) == 3 * len(calls) + 2  # the failed call is counted too


def test_kernel_grid_launches_keep_no_reference(hot_path):
    import gc

    import kname

    kernel, grid, arg = recording_kernel(), (1,), object()
    kname.install(targets=["triton"])

    def launch(n):
        for _ in range(n):
            kernel[grid](arg, BLOCK=arg)
            kernel[grid](**{"x": arg})  # keyword names made anew each call
            with pytest.raises(TypeError):
                kernel[grid](grid=arg)

    launch(50)
    gc.collect()
    watched = [kernel, grid, arg, type(kernel).run]
    before, blocks = [sys.getrefcount(o) for o in watched], sys.getallocatedblocks()
    launch(20_000)
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == before
    assert sys.getallocatedblocks() - blocks < 50
