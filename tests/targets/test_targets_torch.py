"""The torch unit: torch's frames and the code it makes at run time are library code, compile-time
work is named apart, KNAME_USER makes them user code again; CUDA graph replays and backward
passes. Without torch: torch's code objects are made as torch makes them (its module names and
files, Inductor's cache files, FX's and Inductor's code run with bare globals, dynamo's rewritten
user functions), never importing it. With torch installed (not in CI): a real program, eager and
compiled, forward and backward, in a subprocess.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import FAKEGPU, REPO, cleaned, line_of

import kname
from kname import callsite
from kname.census import names
from kname.patching import is_wrapper
from kname.targets import BUILTIN, library
from kname.targets.torch import (
    COMPILE_MODULES,
    backward_scope,
    dynamo_output,
    inductor_output,
)

pytestmark = pytest.mark.launches

SITE_PACKAGES = "/venv/lib/python3.11/site-packages"
KEY = "cab5u7tiw2gcs6ggluapbfvgu3k2uc7bxj5oo2jqfth3eshsy4cw"  # as the table showed it


@pytest.fixture(autouse=True)
def torch_makes_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's and dynamo's modules in sys.modules, as torch has them imported by the time they
    make code (kname asks its generated-code rules only of a library imported): empty
    stand-ins, torch itself is never imported."""
    for name in ("torch._inductor", "torch._dynamo"):
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


def torch_code(source: str, module: str | None, filename: str | None = None) -> dict:
    """The namespace of `source` run as torch runs it: as module `module` (None: bare globals,
    as exec'd generated code), from `filename` (default: the module's file under a
    site-packages torch/). torch itself is never imported."""
    if filename is None:
        assert module is not None
        filename = f"{SITE_PACKAGES}/{module.replace('.', '/')}.py"
    namespace: dict = {} if module is None else {"__name__": module}
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return namespace


def output_file(key: str, cache: str = "/tmp/torchinductor_alice") -> str:
    """Where Inductor writes the module of `key`: `<cache>/<key[1:3]>/<key>.py`."""
    return f"{cache}/{key[1:3]}/{key}.py"


def compiled_model(fakegpu: types.ModuleType) -> tuple[object, object]:
    """A compiled nn.Module's call as torch runs it, down to a launch: dynamo's `_fn`, the user's
    forward as dynamo rewrote it, `__compiled_fn`, FX's `<eval_with_key>` code, Inductor's
    output module (named by its key, as before torch 2.6), its CachingAutotuner and `<string>`
    launcher; and Inductor's benchmarker running that launcher (autotuning)."""
    launcher = torch_code(
        "def launcher(x, stream):\n    grid_0 = 1\n    fakegpu.launch(x)\n", None, "<string>"
    )
    launcher["fakegpu"] = fakegpu  # the launch, looked up at each call (kname wraps it)
    heuristics = torch_code(
        """
        class CachingAutotuner:
            def run(self, x):
                return self.launcher(x, None)

            def benchmark_all_configs(self, x):
                return benchmark_gpu(self.launcher, x)
        """,
        "torch._inductor.runtime.triton_heuristics",
    )
    autotuner = heuristics["CachingAutotuner"]()
    autotuner.launcher = launcher["launcher"]
    output = torch_code("def call(args):\n    return kernel.run(args)\n", KEY, output_file(KEY))
    output["kernel"] = autotuner
    fx = torch_code(
        "def forward(self, x):\n    return call(x)\n",
        None,
        "<eval_with_key>.3 from /home/alice/app.py:7 in forward",
    )
    fx["call"] = output["call"]
    rewritten = torch_code(
        "def forward(self, x):\n    return __compiled_fn_1_0dd1e519(self, x)\n",
        "app",
        "/home/alice/app.py",
    )
    rewritten["__compiled_fn_1_0dd1e519"] = fx["forward"]
    eval_frame = torch_code(
        "def _fn(*args):\n    return forward(None, *args)\n", "torch._dynamo.eval_frame"
    )
    eval_frame["forward"] = rewritten["forward"]
    benchmark = "def benchmark_gpu(fn, x):\n    return fn(x, None)\n"
    benchmarking = torch_code(benchmark, "torch._inductor.runtime.benchmarking")
    heuristics["benchmark_gpu"] = benchmarking["benchmark_gpu"]
    return eval_frame["_fn"], autotuner.benchmark_all_configs


APP = """
def run(compiled, x):
    return compiled(x)  # L:run


def autotune(benchmark, x):
    return benchmark(x)  # L:autotune
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """The user's app and the stand-in GPU library, importable, and torch's code around them."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    (tmp_path / "app_main.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakegpu", "app_main"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import app_main
    import fakegpu

    compiled, autotune = compiled_model(fakegpu)
    yield types.SimpleNamespace(app=app_main, compiled=compiled, autotune=autotune)
    for name in ("fakegpu", "app_main"):
        sys.modules.pop(name, None)


def at(marker: str, function: str) -> str:
    return f"{function} app_main.py:{line_of(APP, marker)}"


# --------------------------------------------------------------------------
# torch's frames and the code it makes
# --------------------------------------------------------------------------


def test_torch_is_a_built_in_unit_whose_packages_are_library_code() -> None:
    unit = library("torch")
    assert "torch" in BUILTIN and unit.packages[0] == "torch"
    assert "torch._dynamo.convert_frame" in unit.compile_modules
    imported = "torch" in sys.modules
    kname.install(targets=["fakegpu:launch"])  # not a target chosen: still library code
    assert "torch" in callsite._rules.library_modules
    assert ("torch" in sys.modules) == imported  # the unit imports no torch


def test_a_compiled_models_kernels_are_named_after_the_line_calling_it(app) -> None:
    kname.install(targets=["fakegpu:launch"])
    app.app.run(app.compiled, 1)
    assert names() == {at("L:run", "run"): 1}


def test_every_frame_torch_runs_and_makes_is_passed_over(app) -> None:
    """Each frame between the user's line and the launch is judged library code."""
    kname.install(targets=["fakegpu:launch"])
    app.app.run(app.compiled, 1)
    judged = {
        code.co_name: kind
        for code_id, kind in callsite._kinds.items()
        if (code := callsite._codes[code_id]()) is not None  # a weak reference to the code
        and code.co_filename != app.app.__file__
    }
    for function in ("_fn", "forward", "call", "run", "launcher"):
        assert judged[function] == callsite.LIBRARY, function


def test_autotuning_at_a_first_run_is_named_apart_as_compile_time_work(app) -> None:
    kname.install(targets=["fakegpu:launch"])
    app.app.autotune(app.autotune, 1)
    app.app.run(app.compiled, 1)
    app.app.autotune(app.autotune, 2)
    marked = at("L:autotune", "autotune") + callsite.COMPILE_MARK
    assert names() == {marked: 2, at("L:run", "run"): 1}


def test_compile_marks_only_what_runs_beneath_torchs_compile_modules() -> None:
    kname.install(targets=["fakegpu:launch"])
    for module in COMPILE_MODULES:
        code = torch_code("def f():\n    pass\n", module)["f"].__code__
        assert callsite.kind_of(code, module) == callsite.COMPILE, module
    plain = torch_code("def f():\n    pass\n", "torch._inductor.runtime.triton_heuristics")["f"]
    assert callsite.kind_of(plain.__code__, plain.__module__) == callsite.LIBRARY


AUTOTUNER_RUN = "CachingAutotuner.run torch/_inductor/runtime/triton_heuristics.py:4"


@pytest.mark.parametrize(
    ("user", "skip", "expected"),
    [
        ("torch", "", AUTOTUNER_RUN),
        ("torch._inductor", "", AUTOTUNER_RUN),
        ("torch", "torch._inductor.runtime", f"call {KEY[1:3]}/{KEY}.py:2"),
        ("torch._dynamo", "", "forward alice/app.py:2"),
        ("torch.fx", "", at("L:run", "run")),  # FX's generated code has no module: library
    ],
)  # fmt: skip
def test_kname_user_makes_a_librarys_frames_and_the_code_it_makes_user_code(
    app, monkeypatch, user, skip, expected
) -> None:
    """KNAME_USER names a part of torch as user code, with the code that part makes (Inductor's
    output module, dynamo's rewritten function); KNAME_SKIP still wins over it."""
    monkeypatch.setenv("KNAME_USER", user)
    monkeypatch.setenv("KNAME_SKIP", skip)
    kname.install(targets=["fakegpu:launch"])
    app.app.run(app.compiled, 1)
    assert list(names()) == [expected]


def test_kname_user_leaves_knames_own_frames_and_the_standard_library_passed_over() -> None:
    import functools
    import threading

    callsite.configure(user=("kname", "functools", "threading"))
    for function in (callsite.configure, functools.wraps, threading.current_thread):
        assert callsite.kind_of(function.__code__, function.__module__) == callsite.PLUMBING


def test_a_users_own_function_in_a_module_dynamo_rewrote_stays_user_code() -> None:
    kname.install(targets=["fakegpu:launch"])
    namespace = torch_code(
        "def forward(self, x):\n    return __compiled_fn_2_ab(x)\n\n"
        "def helper(x):\n    return x\n\n"
        "def torch_dynamo_resume_in_forward_at_12(x):\n    return x\n",
        "app",
        "/home/alice/app.py",
    )
    functions = {name: f for name, f in namespace.items() if isinstance(f, types.FunctionType)}
    kinds = {name: callsite.kind_of(f.__code__, "app") for name, f in functions.items()}
    assert kinds == {
        "forward": callsite.LIBRARY,
        "helper": callsite.USER,
        "torch_dynamo_resume_in_forward_at_12": callsite.LIBRARY,
    }


def test_code_run_with_bare_globals_from_a_pseudo_file_is_library_code() -> None:
    """Inductor's `<string>` launchers and FX's `<eval_with_key>` code have no module and no
    source to show: passed over, whatever the library; a file of the user's with no module
    name is still the user's."""
    kname.install(targets=["fakegpu:launch"])
    for filename in ("<string>", "<eval_with_key>.12 from app.py:3 in forward", "<generated>"):
        code = torch_code("def f():\n    pass\n", None, filename)["f"].__code__
        assert callsite.kind_of(code, None) == callsite.LIBRARY, filename
    users = torch_code("def f():\n    pass\n", None, "/home/alice/script.py")["f"].__code__
    assert callsite.kind_of(users, None) == callsite.USER


# --------------------------------------------------------------------------
# Inductor's output files: the path rule
# --------------------------------------------------------------------------

BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
keys = st.binary(min_size=1, max_size=64).map(
    lambda data: "c" + base64.b32encode(hashlib.sha256(data).digest())[:51].decode().lower()
)
directories = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz_0123456789.-", min_size=1, max_size=12),
    min_size=1,
    max_size=4,
).map(lambda parts: "/" + "/".join(parts))


def code_at(filename: str) -> types.CodeType:
    return compile("pass", filename, "exec")


@settings(max_examples=300)
@given(keys, directories)
def test_a_module_inductor_wrote_is_its_output_in_any_cache_directory(key, directory) -> None:
    assert inductor_output(code_at(output_file(key, directory)), key)
    assert inductor_output(code_at(output_file(key, directory)), None)


@settings(max_examples=300)
@given(keys, directories, st.data())
def test_a_file_not_named_as_inductor_names_its_output_is_not_its_output(
    key, directory, data
) -> None:
    """Outside Inductor's cache directories: a key in the wrong directory, one character too
    many or too few, or one outside base32, is the user's."""
    assert "torchinductor_" not in directory
    wrong = data.draw(
        st.sampled_from(
            [
                f"{directory}/{key[2:4]}/{key}.py" if key[1:3] != key[2:4] else "/a/b.py",
                f"{directory}/{key[1:3]}/{key}a.py",
                f"{directory}/{key[1:3]}/{key[:-1]}.py",
                f"{directory}/{key[1:3]}/{key[:-1]}{data.draw(st.sampled_from('01890A_'))}.py",
                f"{directory}/{key[1:3]}/{key}.pyc",
                f"{directory}/{key[1:3]}/{key}.py/x.py",
            ]
        )
    )
    assert not inductor_output(code_at(wrong), None)


@given(directories, st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8))
def test_any_python_file_in_inductors_cache_directory_is_its_output(directory, name) -> None:
    assert inductor_output(code_at(f"{directory}/torchinductor_{name}/xy/kernel.py"), None)
    assert inductor_output(code_at(f"/tmp/torchinductor_{name}{directory}/k.py"), None)


def test_the_cache_directory_torchinductor_cache_dir_names_is_inductors(monkeypatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/scratch/cache")
    assert inductor_output(code_at("/scratch/cache/ab/anything.py"), None)
    assert not inductor_output(code_at("/scratch/cached/ab/anything.py"), None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")
    assert not inductor_output(code_at("/scratch/cache/ab/anything.py"), None)


def test_dynamo_output_is_told_by_the_names_dynamo_adds() -> None:
    def named(source: str) -> types.CodeType:
        return torch_code(source, "app", "/home/alice/app.py")["f"].__code__

    assert dynamo_output(named("def f(x):\n    return __compiled_fn_3_ab(x)\n"), "app")
    assert dynamo_output(named("def f(x):\n    return __resume_at_20_4(x)\n"), "app")
    assert not dynamo_output(named("def f(x):\n    return compiled_fn(x)\n"), "app")


# --------------------------------------------------------------------------
# CUDA graph replays and backward passes, on torch's module layout
# --------------------------------------------------------------------------

GRAPHS_APP = """
def replay(graph):
    graph.replay()  # L:replay
"""


def stand_in_torch(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """`torch.cuda.graphs` and `torch.autograd` as modules with torch's layout, in sys.modules
    (the real torch is not imported): CUDAGraph.replay, autograd.backward and grad."""
    replays: list[object] = []

    class CUDAGraph:
        def replay(self) -> None:
            replays.append(self)

    graphs = types.ModuleType("torch.cuda.graphs")
    graphs.CUDAGraph = CUDAGraph
    autograd = types.ModuleType("torch.autograd")
    autograd.backward = lambda tensors: ("backward", tensors)
    autograd.grad = lambda outputs, inputs: ("grad", outputs, inputs)
    modules = {
        "torch": types.ModuleType("torch"),
        "torch.cuda": types.ModuleType("torch.cuda"),
        "torch.cuda.graphs": graphs,
        "torch.autograd": autograd,
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(graphs=graphs, autograd=autograd, replays=replays)


def test_a_cuda_graph_replay_is_a_launch_named_after_the_line_replaying_it(
    tmp_path, monkeypatch
) -> None:
    torch = stand_in_torch(monkeypatch)
    (tmp_path / "graphs_app.py").write_text(textwrap.dedent(GRAPHS_APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    import graphs_app

    kname.install(targets=["torch"])
    graph = torch.graphs.CUDAGraph()
    graphs_app.replay(graph)
    graphs_app.replay(graph)
    assert torch.replays == [graph, graph]
    assert names() == {f"replay graphs_app.py:{line_of(GRAPHS_APP, 'L:replay')}": 2}
    kname.uninstall()
    assert not is_wrapper(vars(torch.graphs.CUDAGraph)["replay"])
    sys.modules.pop("graphs_app", None)


def test_backward_and_grad_are_wrapped_and_given_back(monkeypatch) -> None:
    torch = stand_in_torch(monkeypatch)
    originals = (torch.autograd.backward, torch.autograd.grad)
    kname.install(targets=["torch"])
    assert is_wrapper(torch.autograd.backward) and is_wrapper(torch.autograd.grad)
    assert torch.autograd.backward("loss") == ("backward", "loss")  # no profile: as before
    assert torch.autograd.grad("y", "x") == ("grad", "y", "x")
    kname.disable()
    assert (torch.autograd.backward, torch.autograd.grad) == originals
    kname.enable()
    kname.uninstall()
    assert (torch.autograd.backward, torch.autograd.grad) == originals


def test_a_backward_pass_that_raises_closes_its_scope() -> None:
    from kname.profiling import backward

    def failing(*args):
        raise RuntimeError("autograd failed")

    backward.collect(lambda frame: "train app.py:3")
    try:
        with pytest.raises(RuntimeError, match="autograd failed"):
            backward_scope(failing)()
        assert backward.frameless_name() is None
    finally:
        backward.collect(None)


# --------------------------------------------------------------------------
# With torch (not in CI): a real program, eager and compiled, forward and backward
# --------------------------------------------------------------------------

PROBE = """
import sys

import torch

import kname

NAMES = []


@torch.library.custom_op("kname_probe::mark", mutates_args=())
def mark(x: torch.Tensor) -> torch.Tensor:
    NAMES.append(kname.site_name())  # named as a launch from here would be
    return x.clone()


@mark.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("kname_probe::mark_grad", mutates_args=())
def mark_grad(x: torch.Tensor) -> torch.Tensor:
    NAMES.append(kname.site_name())
    return x.clone()


@mark_grad.register_fake
def _(x):
    return torch.empty_like(x)


mark.register_autograd(lambda ctx, grad: mark_grad(grad))


def benchmarked(x):
    from torch._inductor.runtime.benchmarking import benchmarker

    benchmarker.benchmark_cpu(lambda: mark(x), warmup=0, rep=1)  # Inductor's benchmarker
"""

TORCH_APP = """
import json

import torch
from torch import nn

import kname_probe


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)

    def forward(self, x):
        h = self.fc1(x)
        print("a graph break")
        return kname_probe.mark(h).sum()  # L:forward


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(4, 8)
loss = net(x)  # L:eager
loss.backward()  # L:eager-backward
opt.step()
compiled = torch.compile(net)
for _ in range(2):
    loss = compiled(x)  # L:compiled-call
    torch.autograd.backward(loss)  # L:compiled-backward
kname_probe.benchmarked(x)  # L:benchmarked
print(json.dumps(kname_probe.NAMES))
"""


def test_a_real_torch_program_is_named_after_its_own_lines(tmp_path, hot_path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "kname_probe.py").write_text(textwrap.dedent(PROBE))
    (tmp_path / "torch_app.py").write_text(textwrap.dedent(TORCH_APP))
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.update(
        KNAME="1", KNAME_SKIP="kname_probe", PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "torch_app.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    def line(marker: str) -> str:
        return f"<module> torch_app.py:{line_of(TORCH_APP, marker)}"

    forward = f"Net.forward torch_app.py:{line_of(TORCH_APP, 'L:forward')}"
    compiled = [line("L:compiled-call"), line("L:compiled-backward")]
    expected = [forward, line("L:eager-backward"), *compiled, *compiled]
    named = json.loads(done.stdout.splitlines()[-1])
    assert named[:6] == expected
    assert set(named[6:]) == {line("L:benchmarked") + callsite.COMPILE_MARK}  # run several times


# --------------------------------------------------------------------------
# Collectives (issue 30): NCCL's kernels are launched inside the collective call
# --------------------------------------------------------------------------

COLLECTIVES = """
def all_reduce(tensor, op=None, group=None, async_op=False):
    work = _launch(tensor)  # ProcessGroupNCCL::allreduce, in C++: NCCL launches here
    return work if async_op else None
"""
LOGGER = """
import functools

def _exception_logger(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper
"""
TRAIN = """
def step(dist, grad):
    dist.all_reduce(grad)  # L:blocking
    work = dist.all_reduce(grad, async_op=True)  # L:async
    return work
"""


def test_an_nccl_kernel_is_named_after_the_line_that_called_the_collective() -> None:
    """ProcessGroupNCCL makes the kernel's launch API call on the calling thread, inside the
    collective, even for async_op=True (the kernel then runs on NCCL's stream): CUPTI's callback
    sees the collective's frames above it, torch's, all library code, then the user's line."""
    from kname.profiling.capture import site_of_frame

    kname.install(targets=[])
    seen: list[str] = []
    c10d = torch_code(COLLECTIVES, "torch.distributed.distributed_c10d")
    c10d["_launch"] = lambda tensor: seen.append(site_of_frame(sys._getframe(1)))
    logger = torch_code(LOGGER, "torch.distributed.c10d_logger")
    dist = types.SimpleNamespace(all_reduce=logger["_exception_logger"](c10d["all_reduce"]))
    train = torch_code(TRAIN, "train", "/home/alice/train.py")
    train["step"](dist, object())
    lines = [line_of(TRAIN, marker) for marker in ("L:blocking", "L:async")]
    assert seen == [f"step alice/train.py:{line}" for line in lines]


def test_backward_per_forward_line_puts_nothing_in_place_unless_asked(monkeypatch) -> None:
    """Its TorchFunctionMode costs every torch call of a profiled run: without
    KNAME_PROFILE_BACKWARD the unit leaves torch and the profile's collection alone."""
    from kname.profiling import backward
    from kname.targets.torch import forward_line_changes

    followed = []
    monkeypatch.setattr(backward, "follow_collection", followed.append)
    stand_in = types.SimpleNamespace(  # torch's parts the unit reads (torch is not installed here)
        _C=types.SimpleNamespace(_current_autograd_node=lambda: None),
        overrides=types.SimpleNamespace(TorchFunctionMode=object),
    )
    monkeypatch.delenv("KNAME_PROFILE_BACKWARD", raising=False)
    assert forward_line_changes(stand_in, None) == [] and followed == []
    monkeypatch.setenv("KNAME_PROFILE_BACKWARD", "1")
    assert forward_line_changes(stand_in, None) == [] and len(followed) == 1
