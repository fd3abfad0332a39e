"""The CUPTI collector where no GPU is: its one-line failures, and its use of the real binding.

Without the binding installed, start() must say how to get it. With cupti-python installed (it
imports without a GPU; every call then raises NotSupportedError), the launch APIs are chosen
from its real callback-id enums, and start() fails in one line and leaves the program running.
What needs a GPU is checked by tests/gpu/profile_demo.py.
"""

from __future__ import annotations

import ctypes
import sys
from types import SimpleNamespace

import pytest

from kname import _warnings, hotpath
from kname.profiling.capture import LaunchCapture
from kname.profiling.cupti_collector import CuptiCollector, binding_versions
from kname.profiling.join import Join
from kname.profiling.native_callback import NativeCallbacks
from kname.profiling.python_callback import PythonCallbacks


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees its messages, however often an earlier test said them."""
    monkeypatch.setattr(_warnings, "_said", set())


def collector() -> CuptiCollector:
    join = Join()
    return CuptiCollector(LaunchCapture(join), join)


def real_cupti():
    pytest.importorskip("cupti", reason="cupti-python is not installed")
    from cupti import cupti

    return cupti


def test_without_the_binding_start_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupti", None)  # makes `import cupti` fail
    made = collector()
    assert made.start() is False and not made.started
    made.stop()  # nothing to stop: no error
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert "the CUPTI binding cannot be imported (ModuleNotFoundError: " in lines[0]
    assert "pip install 'kname[profile]'" in lines[0]
    assert lines[0].endswith("GPU times are not collected in this run; launches are still named")


def test_versions_of_the_binding_are_reported_even_when_absent():
    versions = binding_versions()
    assert set(versions) == {"cupti-python", "nvidia-cuda-cupti"}
    assert all(isinstance(v, str) and v for v in versions.values())


def test_the_launch_apis_are_chosen_from_the_bindings_enums():
    cupti = real_cupti()
    from kname.profiling.capture import select_launch_apis

    driver = {
        name for name, _ in select_launch_apis(cupti.driver_api_trace_cbid.__members__).values()
    }
    runtime = select_launch_apis(cupti.runtime_api_trace_cbid.__members__)
    runtime_names = {name for name, _ in runtime.values()}
    assert {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel_ptsz", "cuGraphLaunch",
            "cuMemcpyHtoDAsync_v2", "cuMemsetD32Async"} <= driver  # fmt: skip
    assert {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch", "cudaMemcpyAsync",
            "cudaMemsetAsync", "cudaMemcpy"} <= runtime_names  # fmt: skip
    assert not {n for n in driver | runtime_names if "HostFunc" in n or "Node" in n}
    graphs = {name for name, graph in runtime.values() if graph}
    assert graphs == {"cudaGraphLaunch", "cudaGraphLaunch_ptsz"}
    cbid = int(cupti.runtime_api_trace_cbid.cudaLaunchKernel_v7000)
    assert runtime[cbid] == ("cudaLaunchKernel", False)


@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_without_a_driver_start_fails_in_one_line_and_the_program_runs_on(
    capsys, monkeypatch, callbacks
):
    real_cupti()
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("a CUDA driver is present here: start() would succeed")
    monkeypatch.setenv("KNAME_NATIVE", "1" if callbacks == "native" else "0")
    native, why = hotpath.choose(True).cupti()
    if callbacks == "native" and native is None:
        pytest.skip(f"no native CUPTI callback here: {why}")
    made = collector()
    assert made.start() is False and not made.started
    expected = NativeCallbacks if callbacks == "native" else PythonCallbacks
    assert type(made._callbacks) is expected
    made.stop()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    # The binding's own words for what is wrong (13.0 and 13.4: NotSupportedError, "CUDA driver
    # is not found"), not a UnicodeDecodeError from reading a field CUPTI never filled.
    assert lines[0].startswith("kname: profile: CUPTI could not be started (")
    assert "driver" in lines[0] and "UnicodeDecodeError" not in lines[0], lines[0]
    assert "GPU times are not collected in this run" in lines[0]


def test_a_taken_subscriber_names_the_profiler_that_holds_it(capsys):
    cupti = real_cupti()
    made = collector()
    made._holder = "nsys"
    status = int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    made._say_not_started(cupti, cupti.cuptiError(status))
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kname: profile: CUPTI is already in use by 'nsys' (Nsight Systems")
    assert "Run without that profiler to get kname's GPU times" in line


def test_another_cupti_error_is_named(capsys):
    cupti = real_cupti()
    status = int(cupti.Result.ERROR_INSUFFICIENT_PRIVILEGES)
    collector()._say_not_started(cupti, cupti.cuptiError(status))
    (line,) = capsys.readouterr().err.splitlines()
    assert "CUPTI could not be started (ERROR_INSUFFICIENT_PRIVILEGES: cuptiError" in line


def test_wrapped_launches_are_tagged_through_the_bindings_external_correlation_calls():
    cupti = real_cupti()
    join = Join()
    assert CuptiCollector(LaunchCapture(join), join).external_calls() is None  # by default
    made = CuptiCollector(LaunchCapture(join), join, external_correlation=True)
    made._cupti = cupti
    push, pop = made.external_calls()
    kind = int(cupti.ExternalCorrelationKind.CUSTOM0)
    assert (push.func, push.args) == (cupti.activity_push_external_correlation_id, (kind,))
    assert (pop.func, pop.args) == (cupti.activity_pop_external_correlation_id, (kind,))


class GraphBinding:
    """cupti-python's callback and graph API, which need a GPU (a stand-in: the handles are
    their own ids; `data` of a resource callback points at a GraphData by its key here)."""

    ApiCallbackSite = SimpleNamespace(API_ENTER=0, API_EXIT=1)
    CallbackDomain = SimpleNamespace(DRIVER_API=1, RUNTIME_API=2, RESOURCE=3)

    def __init__(self) -> None:
        self.enabled: list[tuple[int, int]] = []
        self.graph_data: dict[int, SimpleNamespace] = {}
        self.GraphData = SimpleNamespace(from_ptr=lambda ptr, readonly: self.graph_data[ptr])

    def subscribe(self, callback, userdata) -> int:
        return 1

    def enable_callback(self, enable, subscriber, domain, cbid) -> None:
        self.enabled.append((domain, cbid))

    def get_timestamp(self) -> int:
        return 0

    get_graph_node_id = get_graph_id = get_graph_exec_id = staticmethod(int)


def test_the_python_callbacks_name_a_node_after_the_launch_it_was_captured_in_or_its_line():
    from kname.profiling.capture import select_graph_callbacks
    from kname.profiling.python_callback import PythonCallbacks
    from kname.profiling.records import StreamLog

    join, log = Join(), StreamLog()
    binding = GraphBinding()
    callbacks = PythonCallbacks(LaunchCapture(join, log), "a test")
    graphs = select_graph_callbacks({"GRAPHNODE_CREATED": 13, "GRAPHNODE_CLONED": 20})
    callbacks.subscribe(binding, {1: {307: ("cuLaunchKernel", False)}}, graphs)
    assert (3, 13) in binding.enabled and (3, 20) in binding.enabled
    binding.graph_data[1] = SimpleNamespace(node=40, graph=3, graph_exec=0, original_node=0)
    binding.graph_data[2] = SimpleNamespace(node=41, graph=3, graph_exec=8, original_node=40)
    binding.graph_data[3] = SimpleNamespace(node=50, graph=4, graph_exec=0, original_node=0)
    enter = SimpleNamespace(callback_site=0, correlation_id=7)
    callbacks._on_api(None, 1, 307, enter)  # a launch call, captured into a graph...
    callbacks._on_api(None, 3, 13, SimpleNamespace(resource_descriptor=1))  # ...makes a node
    callbacks._on_api(None, 1, 307, SimpleNamespace(callback_site=1, correlation_id=7))
    callbacks._on_api(None, 3, 20, SimpleNamespace(resource_descriptor=2))  # instantiated
    here = this_line(+1)
    callbacks._on_api(None, 3, 13, SimpleNamespace(resource_descriptor=3))  # added by hand
    made, cloned, added = log.graph_nodes
    captured_at = log.launches[0].site
    assert (made.node, made.graph, made.site, made.correlation_id) == (40, 3, captured_at, 7)
    assert (cloned.event, cloned.node, cloned.original, cloned.graph_exec) == ("cloned", 41, 40, 8)
    assert added.site == here and join.nodes.site_of(41, 8) == captured_at


def this_line(offset: int = 0) -> str:
    """The call-site name kname gives the caller's line (+ offset)."""
    import sys

    frame = sys._getframe(1)
    return f"{frame.f_code.co_name} test_profiling_cupti_collector.py:{frame.f_lineno + offset}"
