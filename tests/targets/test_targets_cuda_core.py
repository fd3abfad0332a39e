"""The cuda.core target, with the real cuda-core package and numba-cuda's real dispatcher module.

No GPU here: cuda.core's own `launch` rejects the test's arguments inside kname's range, which
is enough to see the range a profiler would. numba-cuda's launches cannot run without a GPU,
so nesting is checked with a stand-in library (`fakenumba`, written into tmp_path, a library by
KNAME_SKIP) whose kname-wrapped launch calls the real, kname-wrapped cuda.core `launch`; the
real numba-cuda path is run by tests/gpu/libraries_demo.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.launches

pytest.importorskip("cuda.core", reason="cuda-core is not installed")

FORMAT = "{kernel}|{function}|{line}"
HEADER = """
import contextlib
import sys
import kname
"""
FAKENUMBA = '''
"""A stand-in for numba-cuda's dispatcher: its launch calls cuda.core's `launch` by name."""

from cuda.core import launch


class Configuration:
    def __call__(self, kernel):
        return self.dispatch(kernel)

    def dispatch(self, kernel):
        return launch(None, None, kernel)
'''


def run_app(
    source: str, lib: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[str, str, Capture]:
    """Run `source` as app.py under NVTX capture; return (source, stdout, capture)."""
    source = textwrap.dedent(HEADER) + textwrap.dedent(source)
    (tmp_path / "app.py").write_text(source)
    (tmp_path / "fakenumba.py").write_text(FAKENUMBA)
    env = {
        "PYTHONPATH": f"{REPO}:{tmp_path}",
        "KNAME_FORMAT": FORMAT,
        "NUMBA_ENABLE_CUDASIM": "0",
        **(env or {}),
    }
    args = [sys.executable, str(tmp_path / "app.py")]
    done, capture = run_captured(args, lib, tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert capture.balanced(), capture.stack_errors()
    return source, done.stdout, capture


IDENTITIES = """
def state():
    launcher = sys.modules["cuda.core._launcher"]
    wrapped = getattr(launcher.launch, "_kname_wrapper", False)
    original = launcher.launch.__wrapped__ if wrapped else launcher.launch
    dispatcher = sys.modules.get("numba.cuda.dispatcher")
    return " ".join(str(x) for x in (
        wrapped,
        cuda.core.launch is launcher.launch,
        dispatcher.launch is original if dispatcher else None,
        original is ORIGINAL,
    ))
"""


@pytest.mark.parametrize("order", ["install-first", "import-first"])
def test_launch_is_wrapped_in_cuda_core_and_numba_keeps_the_original(inject_lib, tmp_path, order):
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    install, imports = "kname.install()\n", "import cuda.core\nimport numba.cuda.dispatcher\n"
    _, out, _ = run_app(
        (install + imports if order == "install-first" else imports + install)
        + "ORIGINAL = sys.modules['cuda.core._launcher'].launch\n"
        + "ORIGINAL = getattr(ORIGINAL, '__wrapped__', ORIGINAL)\n"
        + IDENTITIES
        + textwrap.dedent(
            """
            print(state())
            kname.uninstall()
            print(state())
            kname.install()
            print(state())
            """
        ),
        inject_lib,
        tmp_path,
    )
    # wrapped, re-exported wrapper, numba's dispatcher calls the original, original unchanged
    assert out.split("\n")[:3] == [
        "True True True True",
        "False True True True",
        "True True True True",
    ]


def test_without_the_numba_target_numba_calls_the_wrapper(inject_lib, tmp_path):
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    _, out, _ = run_app(
        """
        kname.install(targets=["cuda_core"])
        import numba.cuda.dispatcher as dispatcher
        import cuda.core
        print(dispatcher.launch is cuda.core.launch, dispatcher.launch._kname_wrapper)
        kname.uninstall()
        print(dispatcher.launch is cuda.core.launch, hasattr(dispatcher.launch, "_kname_wrapper"))
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True", "True", "True", "False"]


def test_a_direct_launch_is_named_after_its_line(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        from cuda.core import launch

        def step():
            with contextlib.suppress(TypeError):  # no GPU, no config: rejected in the range
                launch(None, None, "not-a-kernel")  # direct-line

        step()
        step()
        print(kname.names())
        """,
        inject_lib,
        tmp_path,
    )
    line = line_of(source, "direct-line")
    assert capture.ranges("kname") == [f"kernel|step|{line}"] * 2
    assert out.strip() == f"{{'kernel|step|{line}': 2}}"


def test_a_launch_inside_another_kname_launch_gets_no_range_of_its_own(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        import fakenumba
        import cuda.core
        print(getattr(fakenumba.launch, "_kname_wrapper", False))
        configure = fakenumba.Configuration()
        for _ in range(2):
            with contextlib.suppress(TypeError):
                configure("kernel-object")  # outer-line
        print(kname.names())
        """,
        inject_lib,
        tmp_path,
        env={
            "KNAME_TARGETS": "cuda_core,fakenumba:Configuration.__call__",
            "KNAME_SKIP": "fakenumba",
        },
    )
    line = line_of(source, "outer-line")
    assert out.split("\n")[0] == "True"  # the inner call does go through kname's wrapper
    assert capture.ranges("kname") == [f"Configuration.__call__|<module>|{line}"] * 2
    assert capture.max_depth("kname") == 1
    assert out.split("\n")[1] == f"{{'Configuration.__call__|<module>|{line}': 2}}"


def test_kernel_name_is_asked_of_the_driver_once_per_kernel(monkeypatch):
    from kname.targets import cuda_core

    asked = []

    def driver_name(kernel):
        asked.append(kernel)
        return f"k{len(asked)}"

    monkeypatch.setattr(cuda_core, "_driver_name", driver_name)
    monkeypatch.setattr(cuda_core, "_names", {})
    first, second = object(), object()
    names = [cuda_core.kernel_name(k) for k in (first, second, first, second)]
    assert names == ["k1", "k2", "k1", "k2"]
    assert asked == [first, second]
    assert cuda_core.kernel_name([]) == "list"  # unhashable: not a cuda.core Kernel


# cuda-core before 0.6 (cuda.core.experimental._graph, cuda.core._graph): a Python Graph class.
# That release is not installed here (cuda-core 1.x maps cuda.core's submodules to its own): a
# stand-in of its shape, run as cuda.core._graph, which kname's finder catches up with at the
# next import it sees, as with any module imported past it.
OLD_GRAPH_MODULE = '''
"""A stand-in for cuda-core 0.x's cuda.core._graph: Graph.launch(self, stream) in Python."""

LAUNCHED = []


class Graph:
    def launch(self, stream):
        LAUNCHED.append(stream)
'''


def test_a_graph_replay_is_named_where_cuda_cores_graph_is_a_python_class(inject_lib, tmp_path):
    (tmp_path / "old_graph.py").write_text(OLD_GRAPH_MODULE)
    source, out, capture = run_app(
        f"""
        import importlib.util
        kname.install()
        spec = importlib.util.spec_from_file_location(
            "cuda.core._graph", {str(tmp_path / "old_graph.py")!r}
        )
        _graph = sys.modules["cuda.core._graph"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_graph)
        import fakenumba  # any import: kname's finder catches up with cuda.core._graph

        def replay(graph):
            graph.launch("s")  # replay-line

        replay(_graph.Graph())
        print(_graph.LAUNCHED, vars(_graph.Graph)["launch"]._kname_wrapper)
        kname.uninstall()
        replay(_graph.Graph())  # cuda-core's own again: no range
        print(_graph.LAUNCHED, hasattr(vars(_graph.Graph)["launch"], "_kname_wrapper"))
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split("\n")[:2] == ["['s'] True", "['s', 's'] False"], out
    assert capture.ranges("kname") == [f"cuda graph|replay|{line_of(source, 'replay-line')}"]


def test_cuda_cores_cython_graph_is_left_as_it_is_without_a_word(inject_lib, tmp_path):
    """cuda-core 1.x's Graph refuses attribute assignment: kname does not touch it, and says
    nothing (kname profile still names the replayed kernels by their capture lines)."""
    _, out, _ = run_app(
        """
        import io
        kname.install()
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            from cuda.core.graph import _graph_builder
        print(type(_graph_builder.Graph.__dict__["launch"]).__name__, repr(said.getvalue()))
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split("\n")[0] == "cython_function_or_method ''", out
