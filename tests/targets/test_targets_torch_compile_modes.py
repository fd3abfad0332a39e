"""torch.compile(mode="reduce-overhead") in the torch unit: cudagraph trees' warm-up and recording
are compile-time work, their steady-state replays the calling line's run (issue 40).

Without torch: the call as torch 2.11 runs it, down to a launch, from code objects made as torch
makes them (torch._inductor.compile_fx's `cudagraphify.<locals>.run` closure, every call;
torch._inductor.cudagraph_trees' manager, its warm-up node's run, its graph node's recording in
`__init__` and replays in `run`), never importing torch. The launches are the stand-in GPU
library's (tests/support: FAKEGPU), counted by the census.
"""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest
from support import FAKEGPU, line_of

import kname
from kname import callsite
from kname.census import names
from kname.targets.torch import COMPILE_FX, CUDAGRAPH_TREES

pytestmark = pytest.mark.launches

SITE_PACKAGES = "/venv/lib/python3.11/site-packages"

# torch._inductor.cudagraph_trees, cut down to the calls a reduce-overhead function makes: the
# first call warms up, the second records (and replays once), the later ones replay.
TREES = """
class CUDAWarmupNode:
    def run(self, x):
        return self.model(x)


class CUDAGraphNode:
    def __init__(self, model, x):
        self.model = model
        self._record(model, x)
        self.run_graph()  # the recording ends with a replay

    def _record(self, model, x):
        return model(x)  # captured: in the real thing, inside torch.cuda.graph

    def run(self, x):
        return self.run_graph()

    def run_graph(self):
        return self.model("replay")


class CUDAGraphTreeManager:
    def __init__(self, model):
        self.model = model
        self.calls = 0
        self.node = None

    def run(self, x):
        self.calls += 1
        if self.calls == 1:
            return self.run_eager(x)
        if self.node is None:
            return self.record_function(x)
        return self.node.run(x)

    def run_eager(self, x):
        node = CUDAWarmupNode()
        node.model = self.model
        return node.run(x)

    def record_function(self, x):
        self.node = CUDAGraphNode(self.model, x)
        return None
"""

COMPILE_FX_SOURCE = """
def cudagraphify(manager):
    def run(new_inputs):
        return manager.run(new_inputs)

    return run
"""

APP = """
def infer(compiled, x):
    return compiled(x)  # L:infer
"""


def torch_code(source: str, module: str) -> dict:
    """The namespace of `source` run as module `module` from its file in site-packages."""
    namespace: dict = {"__name__": module}
    filename = f"{SITE_PACKAGES}/{module.replace('.', '/')}.py"
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return namespace


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """The user's line calling a reduce-overhead function, whose compiled code launches."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    (tmp_path / "app_ro.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakegpu", "app_ro"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import app_ro
    import fakegpu

    trees = torch_code(TREES, CUDAGRAPH_TREES)
    compile_fx = torch_code(COMPILE_FX_SOURCE, COMPILE_FX)
    launcher = torch_code("def kernel(x):\n    fakegpu.launch(x)\n", "torch._inductor.runtime.x")
    launcher["fakegpu"] = fakegpu
    compiled = compile_fx["cudagraphify"](trees["CUDAGraphTreeManager"](launcher["kernel"]))
    yield types.SimpleNamespace(app=app_ro, compiled=compiled)
    for name in ("fakegpu", "app_ro"):
        sys.modules.pop(name, None)


def test_warm_up_and_recording_are_compile_time_and_steady_replays_the_lines_run(app) -> None:
    kname.install(targets=["fakegpu:launch"])
    for _ in range(12):
        app.app.infer(app.compiled, 1)
    line = f"infer app_ro.py:{line_of(APP, 'L:infer')}"
    # The warm-up's launch (call 1), the recording's capture and replay (call 2); ten replays.
    assert names() == {line + callsite.COMPILE_MARK: 3, line: 10}


def test_only_the_warm_up_and_recording_functions_are_compile_time_work() -> None:
    kname.install(targets=["fakegpu:launch"])
    trees = torch_code(TREES, CUDAGRAPH_TREES)
    kinds = {
        qualname: callsite.kind_of(function.__code__, CUDAGRAPH_TREES)
        for qualname, function in (
            ("CUDAWarmupNode.run", trees["CUDAWarmupNode"].run),
            ("CUDAGraphNode.__init__", trees["CUDAGraphNode"].__init__),
            ("CUDAGraphNode._record", trees["CUDAGraphNode"]._record),
            ("CUDAGraphNode.run", trees["CUDAGraphNode"].run),
            ("CUDAGraphNode.run_graph", trees["CUDAGraphNode"].run_graph),
            ("CUDAGraphTreeManager.run", trees["CUDAGraphTreeManager"].run),
        )
    }
    compile_time = {name for name, kind in kinds.items() if kind == callsite.COMPILE}
    assert compile_time == {"CUDAWarmupNode.run", "CUDAGraphNode.__init__", "CUDAGraphNode._record"}
    assert {kinds[n] for n in kinds.keys() - compile_time} == {callsite.LIBRARY}
    compile_fx = torch_code(COMPILE_FX_SOURCE + "\ndef compile_fx():\n    pass\n", COMPILE_FX)
    run = compile_fx["cudagraphify"](None)
    assert callsite.kind_of(run.__code__, COMPILE_FX) == callsite.LIBRARY  # every call's
    assert callsite.kind_of(compile_fx["compile_fx"].__code__, COMPILE_FX) == callsite.COMPILE


def test_kname_user_torch_makes_cudagraph_trees_user_code_again(monkeypatch) -> None:
    monkeypatch.setenv("KNAME_USER", "torch")
    kname.install(targets=["fakegpu:launch"])
    trees = torch_code(TREES, CUDAGRAPH_TREES)
    code = trees["CUDAWarmupNode"].run.__code__
    assert callsite.kind_of(code, CUDAGRAPH_TREES) == callsite.USER
