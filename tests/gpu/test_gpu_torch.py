"""On a GPU: a PyTorch training program under `kname profile` with no settings names only the
program's own lines (tests/gpu/torch_demo.py, the program of issue 33).

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch. Runs
`kname profile --json profile.json -- python torch_demo.py` from kname's checkout, once per
launch callback (native, Python), each with a fresh Inductor cache (TORCHINDUCTOR_CACHE_DIR, a
setting of torch's, not kname's), so that the first compiled call compiles and autotunes.
"""

from __future__ import annotations

import pytest
from support import REPO, torch_profile_missing_reason
from support.gpu_programs import SITE, marked_lines, profiled_run

from kname.callsite import COMPILE_MARK

DEMO = REPO / "tests" / "gpu" / "torch_demo.py"
MARKED = marked_lines(DEMO)
LINE = {marker: number for number, marker in MARKED.items()}
STEPS, COMPILED_CALLS, COMPILED_STEPS = 10, 10, 3  # as torch_demo.py has them

pytestmark = pytest.mark.gpu
MISSING = torch_profile_missing_reason()


def name_of(marker: str, compiling: bool = False) -> str:
    return f"main torch_demo.py:{LINE[marker]}" + (COMPILE_MARK if compiling else "")


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_a_torch_program_is_named_after_its_own_lines_only(tmp_path, callbacks) -> None:
    document, _ = profiled_run(
        DEMO,
        tmp_path,
        callbacks,
        "TORCH DEMO DONE",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    sites = {site["name"]: site for site in document["sites"]}
    # Every site is one of the program's own lines, or one marked compile-time work.
    for name in sites:
        match = SITE.fullmatch(name)
        assert match and match["path"] == "torch_demo.py", name
        assert int(match["line"]) in MARKED, name
    assert document["unattributed"]["launches"] == 0
    # The backward passes' kernels, launched on autograd's threads, under the backward() line.
    assert sites[name_of("backward")]["launches"] >= 3 * STEPS
    assert sites[name_of("compiled-backward")]["launches"] >= COMPILED_STEPS
    # The compiled call's kernels (Inductor's Triton kernels) under the line calling it.
    compiled = sites[name_of("compiled")]
    assert compiled["launches"] >= COMPILED_CALLS
    assert any(kernel.startswith("triton_") for kernel in compiled["kernels"]), compiled
    # Compile-time work (autotuning at the first call, compiling the backward) marked apart.
    assert any(name.endswith(COMPILE_MARK) for name in sites), sorted(sites)
    # No helper process (Inductor's compile workers) left a file of its own.
    assert sorted(p.name for p in tmp_path.glob("profile*")) == ["profile.json"]
