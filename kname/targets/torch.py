"""PyTorch: library code, with the code it makes at run time; CUDA graph replays; backward passes.

torch launches its kernels from C++, where kname wraps nothing: `kname profile` names them from
CUPTI's callback, by the Python frames above the launch. So what this unit is, above all, is the
rule that torch's frames are library code: a launch is named after the user's line that caused
it (`h = self.fc1(x)`, `loss.backward()`, `opt.step()`), never after `Linear.forward
torch/nn/modules/linear.py` or `OpOverload.__call__ torch/_ops.py`. That covers torch.nn,
torch.autograd, torch.optim, dynamo and Inductor, and the code torch makes at run time:

- Inductor's output modules (`torch._inductor.runtime.compile_tasks.<key>`; before torch 2.6 the
  module was named by the key alone), under its cache directory (TORCHINDUCTOR_CACHE_DIR,
  default `<tmp>/torchinductor_<user>`), as `<key[1:3]>/<key>.py`, where the key is `c` and 51
  characters of base32: `inductor_output`;
- Inductor's `<string>` launchers and FX's `<eval_with_key>.N` code, run with bare globals: a
  pseudo-file with no module is library code by callsite's own rule;
- dynamo's frames: its own modules, and the user's function as dynamo rewrote it (same file,
  same module, but calling `__compiled_fn_*` and `__resume_at_*`; resume functions named
  `torch_dynamo_resume_in_*`): `dynamo_output`. So the kernels of a compiled function are named
  after the line that called it, and eager work at a graph break too.

Compile-time work is named apart, marked callsite.COMPILE_MARK: a launch beneath dynamo's
compile of a frame, Inductor's compile, its benchmarker (the autotuning of a kernel's configs at
its first run) or its algorithm selection. `(compile)` after the line that called the compiled
function: where the time went, without mixing it into the lines that run every step.

KNAME_USER=torch (or a part, torch._inductor) makes those frames, and the code they make, user
code again: for people debugging torch itself.

`torch.cuda.CUDAGraph.replay` is a launch target, so that Nsight shows a range named after the
line replaying a graph. `torch.autograd.backward` and `torch.autograd.grad` open a backward
scope while kname profile collects (kname.profiling.backward): the kernels autograd launches on
its own threads are named after the line that started the pass.
"""

from __future__ import annotations

import os
import re
import sys
from types import CodeType, ModuleType
from typing import Any

from kname.launch import LaunchSpec
from kname.patching import Change, Patch, is_wrapper
from kname.targets import Library, Options, Target, wraps

LIB = "torch"
REPLAY = "CUDAGraph.replay"

# Build-time work: compiling a frame (dynamo), compiling a graph (Inductor, in this process or
# in a subprocess), benchmarking configs and algorithms (Inductor's autotuning).
COMPILE_MODULES = (
    "torch._dynamo.convert_frame",
    "torch._inductor.compile_fx",
    "torch._inductor.compile_fx_ext",
    "torch._inductor.compile_fx_subproc",
    "torch._inductor.compile_fx_async",
    "torch._inductor.runtime.benchmarking",
    "torch._inductor.runtime.coordinate_descent_tuner",
    "torch._inductor.select_algorithm",
    "torch._inductor.autotune_process",
)

# torch.compile(mode="reduce-overhead"): CUDA graphs over the compiled code. Their warm-up run and
# their recording (with the replay that ends it) are build-time work; the steady state replays,
# through the same modules, are the line's run (issue 40). Judged function by function.
CUDAGRAPH_TREES = "torch._inductor.cudagraph_trees"
CUDAGRAPH_BUILD = frozenset(
    {
        "CUDAWarmupNode.run",  # the warm-up: the compiled code run eagerly
        "CUDAGraphNode.__init__",  # recording, then its first replay
        "CUDAGraphNode._record",
        "CUDAGraphTreeManager.run_eager",
        "CUDAGraphTreeManager.record_function",
    }
)
COMPILE_FX = "torch._inductor.compile_fx"
# compile_fx's closures that run a compiled graph every call (cudagraph trees', the plain
# cudagraphify's replay), in a module otherwise doing build-time work.
COMPILE_FX_RUN = frozenset({"cudagraphify.<locals>.run", "cudagraphify_impl.<locals>.run"})


def cudagraph_trees_phase(code: CodeType) -> bool | None:
    """Build time for cudagraph trees' warm-up and recording; None (library code) else."""
    return True if _qualname(code) in CUDAGRAPH_BUILD else None


def compile_fx_phase(code: CodeType) -> bool | None:
    """Run time for compile_fx's closures that run a compiled graph; None (build time) else."""
    return False if _qualname(code) in COMPILE_FX_RUN else None


def _qualname(code: CodeType) -> str:
    # Python 3.10 has no co_qualname: the bare name matches none of the above (module's kind).
    return getattr(code, "co_qualname", code.co_name)


# `<dir>/<xy>/c<xy><49 more>.py`: the key is "c" and 51 base32 characters, its directory the
# key's second and third characters.
_OUTPUT_FILE = re.compile(r"[/\\]([a-z2-7]{2})[/\\]c\1[a-z2-7]{49}\.py\Z")
_DEFAULT_CACHE = re.compile(r"[/\\]torchinductor_[^/\\]+[/\\]")
CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"

# Names dynamo gives what it adds to a function it rewrites.
_DYNAMO_NAMES = ("__compiled_fn_", "__resume_at_")
_RESUME_PREFIX = "torch_dynamo_resume_in_"


def inductor_output(code: CodeType, module: str | None) -> bool:
    """Whether `code` is of a module Inductor wrote: in its cache directory, or named as it
    names its output files."""
    filename = code.co_filename
    if _OUTPUT_FILE.search(filename) or _DEFAULT_CACHE.search(filename):
        return True
    cache = os.environ.get(CACHE_VARIABLE)  # set by Inductor when it first writes there
    return bool(cache) and filename.startswith(os.path.join(os.path.abspath(cache), ""))


def dynamo_output(code: CodeType, module: str | None) -> bool:
    """Whether `code` is a function as dynamo rewrote it, or a resume function it made."""
    if code.co_name.startswith(_RESUME_PREFIX):
        return True
    return any(name.startswith(_DYNAMO_NAMES) for name in code.co_names)


# --- backward passes -------------------------------------------------------------------------


def backward_scope(entry: Any) -> Any:
    """`entry` (torch.autograd.backward or grad), opening a backward scope while it runs when a
    profile collects (kname.profiling.backward); one module read when none does."""
    from kname.profiling import backward

    return backward.scoped(entry, "naming a backward pass for kname profile", autograd=True)


def autograd_changes(module: ModuleType, options: Options) -> list[Change]:
    """Backward scopes around torch.autograd.backward and grad; and autograd's threads told."""
    from kname.profiling import backward

    torch_c = getattr(sys.modules.get("torch"), "_C", None)
    current_node = getattr(torch_c, "_current_autograd_node", None)
    if current_node is not None:
        backward.recognise_autograd_threads(_autograd_thread_test(current_node))
        from kname.profiling import torch_forward

        backward.know_forward_lines(torch_forward.forward_line_reader(current_node))
    changes: list[Change] = []
    for name in ("backward", "grad"):
        entry = getattr(module, name, None)
        if callable(entry) and not is_wrapper(entry):
            changes.append(Patch(module, name, backward_scope(entry)))
    return changes


def _autograd_thread_test(current_node: Any) -> Any:
    def running_autograd() -> bool:
        try:
            return current_node() is not None
        except Exception:
            return False

    return running_autograd


def forward_line_changes(module: ModuleType, options: Options) -> list[Change]:
    """Backward per forward line (kname.profiling.torch_forward): once torch's import is done,
    its mode follows the profile's collection. Nothing to patch."""
    from kname.config import backward_lines_wanted
    from kname.profiling import backward, torch_forward

    if not backward_lines_wanted():  # KNAME_PROFILE_BACKWARD: its mode costs every torch call
        return []
    current_node = getattr(getattr(module, "_C", None), "_current_autograd_node", None)
    if current_node is None or not hasattr(getattr(module, "overrides", None), "TorchFunctionMode"):
        return []  # a torch too old for it: backward stays on the pass's line
    test = _autograd_thread_test(current_node)
    backward.follow_collection(lambda namer: torch_forward.follow(module, namer, test))
    return []


REPLAY_LAUNCH = LaunchSpec(LIB, lambda _replay: REPLAY)

LIBRARY = Library(
    name="torch",
    packages=("torch", "functorch"),
    distributions=("torch",),
    targets=(
        Target("torch", "torch.cuda.graphs", REPLAY, wraps(REPLAY, REPLAY_LAUNCH)),
        # Not launch naming alone: the backward scopes a profile names autograd's threads by.
        Target("torch", "torch.autograd", "backward, grad", autograd_changes, False),
        Target("torch", "torch", "backward per forward line", forward_line_changes, False),
    ),
    compile_modules=COMPILE_MODULES,
    generated=(("torch._inductor", inductor_output), ("torch._dynamo", dynamo_output)),
    compile_phases=((CUDAGRAPH_TREES, cudagraph_trees_phase), (COMPILE_FX, compile_fx_phase)),
)
