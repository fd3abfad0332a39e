"""The CuPy target, with the real CuPy package (skipped where it does not import).

No GPU here: a launch reaches CuPy's own `__call__` inside kname's range and fails there
(no CUDA driver), which is enough to see the range a profiler would. Each test runs a small
program in a subprocess, under NVTX capture. What needs a GPU (RawModule.get_function compiles
and loads a module; fused kernels of real arrays) is checked by tests/gpu/libraries_demo.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.launches

pytest.importorskip("cupy", reason="CuPy is not installed")

FORMAT = "{kernel}|{function}|{line}"
HEADER = """
import contextlib
import kname
"""


def run_app(
    source: str, lib: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[str, str, Capture]:
    """Run `source` as app.py under NVTX capture; return (source, stdout, capture)."""
    source = textwrap.dedent(HEADER) + textwrap.dedent(source)
    app = tmp_path / "app.py"
    app.write_text(source)
    env = {"PYTHONPATH": str(REPO), "KNAME_FORMAT": FORMAT, **(env or {})}
    done, capture = run_captured([sys.executable, str(app)], lib, tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert capture.balanced(), capture.stack_errors()
    return source, done.stdout, capture


def test_kernel_classes_are_named_subclasses_bound_everywhere_and_restored(inject_lib, tmp_path):
    _, out, _ = run_app(
        """
        kname.install()
        import cupy
        from cupy._core import _kernel, _reduction, raw
        import cupy._core as core
        for name, home in (("RawKernel", raw), ("RawModule", raw),
                           ("ElementwiseKernel", _kernel), ("ReductionKernel", _reduction)):
            cls = getattr(home, name)
            base = cls.__mro__[1]
            print(name, getattr(cupy, name) is cls, getattr(core, name) is cls,
                  base.__module__ == home.__name__, cls.__name__ == name,
                  cls.__module__ == base.__module__)
            kname.uninstall()
            print(name, getattr(cupy, name) is base, getattr(core, name) is base,
                  getattr(home, name) is base)
            kname.install()
        """,
        inject_lib,
        tmp_path,
    )
    lines = out.split("\n")
    assert [line.split()[1:] for line in lines[0:8:2]] == [["True"] * 5] * 4, out
    assert [line.split()[1:] for line in lines[1:8:2]] == [["True"] * 3] * 4, out


def test_install_after_import_rebinds_reexports_and_uninstall_puts_originals_back(
    inject_lib, tmp_path
):
    _, out, _ = run_app(
        """
        import cupy
        originals = [cupy.RawKernel, cupy.RawModule, cupy.ElementwiseKernel, cupy.ReductionKernel]
        kname.install()
        print(all(getattr(cupy, c.__name__).__mro__[1] is c for c in originals))
        print(all(getattr(cupy._core, c.__name__).__mro__[1] is c for c in originals))
        kname.uninstall()
        print(all(getattr(cupy, c.__name__) is c for c in originals))
        print(all(getattr(cupy._core, c.__name__) is c for c in originals))
        print(cupy._core.raw.RawKernel is originals[0])
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True"] * 5


def test_launches_are_named_after_their_line_with_the_kernel_name(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        kname.install()
        import cupy

        def main():
            raw = cupy.RawKernel('extern "C" __global__ void f() {}', "my_raw")
            elementwise = cupy.ElementwiseKernel("T x", "T y", "y = x", "my_copy")
            reduction = cupy.ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "my_sum")
            for launch in (
                lambda: raw((1,), (1,), ()),  # raw-line
                lambda: elementwise(1.0),  # elementwise-line
                lambda: reduction(1.0),  # reduction-line
            ):
                with contextlib.suppress(Exception):  # no GPU: CuPy fails inside the range
                    launch()

        main()
        """,
        inject_lib,
        tmp_path,
    )
    assert capture.ranges("kname") == [
        f"my_raw|main.<locals>.<lambda>|{line_of(source, 'raw-line')}",
        f"my_copy|main.<locals>.<lambda>|{line_of(source, 'elementwise-line')}",
        f"my_sum|main.<locals>.<lambda>|{line_of(source, 'reduction-line')}",
    ]
    assert capture.max_depth("kname") == 1


def test_one_kernel_from_two_lines_gets_two_names(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        import cupy
        raw = cupy.RawKernel('extern "C" __global__ void f() {}', "twice")
        for _ in range(3):
            with contextlib.suppress(Exception):
                raw((1,), (1,), ())  # first
            with contextlib.suppress(Exception):
                raw((1,), (1,), ())  # second
        print(sorted(kname.names().values()))
        """,
        inject_lib,
        tmp_path,
    )
    first, second = line_of(source, "# first"), line_of(source, "# second")
    assert capture.ranges("kname") == [f"twice|<module>|{first}", f"twice|<module>|{second}"] * 3
    assert out.split("\n")[0] == "[3, 3]"


def test_fuse_is_named_only_when_it_launches(inject_lib, tmp_path):
    """Fusion.__call__ (a plain class) is wrapped in place; without a cupy.ndarray argument it
    runs the Python function on the CPU and is not a launch. There is no GPU to make an ndarray
    here, so the test tells the target that `Marker` is the array type."""
    source, out, capture = run_app(
        """
        kname.install()
        import cupy
        from cupy._core import fusion
        from kname.targets import cupy as target

        class Marker:
            pass

        @cupy.fuse(kernel_name="fused_axpb")
        def axpb(a, b):
            return a * 2 + b

        print(getattr(fusion.Fusion.__call__, "_kname_wrapper", False))
        print(axpb(1.0, 2.0))  # cpu-line
        target._ndarray = Marker
        with contextlib.suppress(TypeError):  # Fusion rejects the marker after naming
            axpb(Marker(), 2.0)  # gpu-line
        kname.uninstall()
        print(getattr(fusion.Fusion.__call__, "_kname_wrapper", False))
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True", "4.0", "False"]
    assert capture.ranges("kname") == [f"fused_axpb|<module>|{line_of(source, 'gpu-line')}"]


def test_cupyx_jit_rawkernel_is_named(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        kname.install()
        from cupyx import jit

        @jit.rawkernel()
        def jit_kernel(x):
            x[0] = 1

        with contextlib.suppress(Exception):
            jit_kernel((1,), (1,), (1.0,))  # jit-line
        """,
        inject_lib,
        tmp_path,
    )
    assert capture.ranges("kname") == [f"jit_kernel|<module>|{line_of(source, 'jit-line')}"]


def test_kernels_made_while_installed_launch_unnamed_after_uninstall(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        import cupy
        raw = cupy.RawKernel('extern "C" __global__ void f() {}', "kept")
        with contextlib.suppress(Exception):
            raw((1,), (1,), ())  # while-installed
        kname.uninstall()
        with contextlib.suppress(Exception):
            raw((1,), (1,), ())  # after-uninstall
        print(isinstance(raw, cupy.RawKernel), "__call__" in vars(type(raw)))
        """,
        inject_lib,
        tmp_path,
    )
    assert capture.ranges("kname") == [f"kept|<module>|{line_of(source, 'while-installed')}"]
    assert out.split() == ["True", "False"]


def test_kernels_made_while_installed_pickle_with_and_without_kname(inject_lib, tmp_path):
    _, out, _ = run_app(
        """
        import pickle
        kname.install()
        import cupy
        raw = cupy.RawKernel('extern "C" __global__ void f() {}', "pickled")
        while_installed = pickle.loads(pickle.dumps(raw))
        print(type(while_installed) is cupy.RawKernel, while_installed.name)
        kname.uninstall()
        after = pickle.loads(pickle.dumps(raw))
        print(type(after) is cupy.RawKernel, type(after) is cupy._core.raw.RawKernel, after.name)
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True", "pickled", "True", "True", "pickled"]


def test_raw_module_get_function_is_replaced_and_restored(inject_lib, tmp_path):
    """Its result (a named RawKernel) needs a GPU to load; tests/gpu/libraries_demo.py runs it."""
    _, out, _ = run_app(
        """
        kname.install()
        import cupy
        module_class = cupy.RawModule
        print("get_function" in vars(module_class), module_class.__mro__[1].__name__)
        kname.uninstall()
        print("get_function" in vars(module_class), cupy.RawModule is module_class.__mro__[1])
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True", "RawModule", "False", "True"]


def test_kernels_made_before_install_are_still_instances_of_the_public_class(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        import cupy
        early = cupy.ElementwiseKernel("T x", "T y", "y = x", "early")
        kname.install()
        late = cupy.ElementwiseKernel("T x", "T y", "y = x", "late")
        print(isinstance(early, cupy.ElementwiseKernel), isinstance(late, cupy.ElementwiseKernel))
        print(issubclass(type(early), cupy.ElementwiseKernel), isinstance(1, cupy.RawKernel))
        for kernel in (early, late):
            with contextlib.suppress(Exception):
                kernel(1.0)  # launch-line
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True", "True", "True", "False"]
    assert capture.ranges("kname") == [f"late|<module>|{line_of(source, 'launch-line')}"]


@pytest.mark.parametrize("mode", ["nvtx", "rename"])
def test_disable_gives_cupy_back_all_its_own_and_enable_names_again(
    inject_lib, tmp_path, mode, hot_path
):
    """disable() binds CuPy's classes back everywhere and takes every kname method away, so a
    kernel made while enabled launches exactly as CuPy's own; enable() puts it all back, the C
    __call__ slot of the native hot path included."""
    source, out, capture = run_app(
        """
        import importlib
        from kname import hotpath
        kname.install()
        native = None if hotpath.current().why_python else importlib.import_module(hotpath.NATIVE)
        import cupy
        import cupy._core as core
        from cupy._core import _kernel, _reduction, fusion, raw
        from cupyx.jit import _interface

        homes = {"RawKernel": raw, "RawModule": raw, "ElementwiseKernel": _kernel,
                 "ReductionKernel": _reduction}
        named = {name: getattr(home, name) for name, home in homes.items()}
        cupys = {name: cls.__mro__[1] for name, cls in named.items()}
        in_place = {"Fusion": fusion.Fusion, "_JitRawKernel": _interface._JitRawKernel}
        wrapped = {name: vars(cls)["__call__"] for name, cls in in_place.items()}
        raw_kernel = cupy.RawKernel('extern "C" __global__ void f() {}', "made_enabled")
        elementwise = cupy.ElementwiseKernel("T x", "T y", "y = x", "made_enabled_too")

        def launch_both():
            with contextlib.suppress(Exception):  # no GPU: CuPy fails inside the range
                raw_kernel((1,), (1,), ())  # raw-line
            with contextlib.suppress(Exception):
                elementwise(1.0)  # elementwise-line

        def state():
            return [
                all(getattr(m, n) is cupys[n] for n in homes for m in (cupy, core, homes[n])),
                all(getattr(m, n) is named[n] for n in homes for m in (cupy, core, homes[n])),
                sorted(a for cls in named.values() for a in vars(cls)
                       if a in ("__call__", "__init__", "get_function")),
                [vars(cls)["__call__"] is wrapped[n] for n, cls in in_place.items()],
                type(raw_kernel).__call__ is cupys["RawKernel"].__call__,
                native and [native.has_direct_call(named[n]) for n in homes if n != "RawModule"],
            ]

        print(*state())
        kname.disable()
        print(*state())
        launch_both()
        kname.enable()
        print(*state())
        launch_both()
        """,
        inject_lib,
        tmp_path,
        env={"KNAME_MODE": mode},
    )
    extra = ["'__init__',"] * 2 if mode == "rename" else []
    methods = " ".join(["['__call__',", "'__call__',", "'__call__',", *extra, "'get_function']"])
    lines = out.split("\n")
    slots = "[True, True, True]" if hot_path == "native" else "None"
    assert lines[0] == f"False True {methods} [True, True] False {slots}"
    assert lines[1] == f"True False [] [False, False] True {slots.replace('True', 'False')}"
    assert lines[2] == lines[0]
    assert capture.ranges("kname") == [
        f"made_enabled|launch_both|{line_of(source, 'raw-line')}",
        f"made_enabled_too|launch_both|{line_of(source, 'elementwise-line')}",
    ]


def test_a_graph_replay_is_named_after_the_line_that_launches_it(inject_lib, tmp_path):
    """CuPy's Graph needs a GPU to exist (only stream capture makes one): here a stand-in
    graph, with CuPy's `launch(stream=None)`, goes through the real end_capture wrapper on
    cupy.cuda.Stream (its CuPy end_capture replaced by one that hands the stand-in back)."""
    source, out, capture = run_app(
        """
        kname.install()
        import cupy
        from cupy.cuda import stream as cupy_stream
        from kname.targets.cupy.graph import named_end_capture

        class StandInGraph:  # what CuPy's end_capture makes, with a GPU
            launched = []

            def launch(self, stream=None):
                self.launched.append(stream)

            def upload(self, stream=None):
                return "uploaded"

        wrapped = vars(cupy_stream.Stream)["end_capture"]
        print(wrapped._kname_wrapper, vars(cupy_stream.ExternalStream)["end_capture"] is not None)
        print(wrapped.__wrapped__ is cupy_stream._BaseStream.end_capture)
        end_capture = named_end_capture(lambda stream: StandInGraph())  # CuPy's, stood in for

        def replay(graph):
            graph.launch()  # first-replay
            graph.launch(stream="s")  # second-replay

        graph = end_capture(None)
        replay(graph)
        print(StandInGraph.launched, graph.upload(), isinstance(graph, StandInGraph))
        kname.disable()
        graph.launch()  # CuPy's own: no range
        print(StandInGraph.launched[-1], "end_capture" in vars(cupy_stream.Stream))
        kname.enable()
        kname.uninstall()
        print(*("end_capture" in vars(c) for c in (cupy_stream.Stream, cupy_stream.ExternalStream)))
        """,
        inject_lib,
        tmp_path,
    )
    lines = out.split("\n")
    assert lines[:5] == [
        "True True",
        "True",
        "[None, 's'] uploaded True",
        "None False",
        "False False",
    ], out
    assert capture.ranges("kname") == [
        f"cuda graph|replay|{line_of(source, 'first-replay')}",
        f"cuda graph|replay|{line_of(source, 'second-replay')}",
    ]
