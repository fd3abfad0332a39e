"""KNAME_MODE=rename: per-call-site entry names, and numba-cuda kernels compiled under them.

The numba tests compile for real with numba-cuda's compiler (NVVM, through `cuda-toolkit[nvvm]`)
and check the PTX; they are skipped where NVVM is missing. This machine has no GPU, so the three
driver calls on the way are stand-ins (see `no_gpu`): the device query (compute capability 9.0),
loading the module, and the launch itself, which records the kernel it was given. Whether the
renamed kernels run, give the same results and show up in Nsight Compute is checked on a GPU by
tests/gpu/rename_demo.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, check_rename_demo_under_ncu, cleaned, line_of
from support.kernels import program
from support.nvtx_capture import run_captured

import kname
from kname import _warnings, callsite, naming, rename
from kname.naming import MAX_IDENTIFIER, FrameFacts, identifier_name
from kname.targets.numba import rename as numba_rename

pytestmark = pytest.mark.launches

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROPERTY = settings(max_examples=300, deadline=None)
CC = (9, 0)

# --------------------------------------------------------------------------
# Entry names
# --------------------------------------------------------------------------


def holder(kernel: str, path: str, line: int) -> tuple[str, str]:
    return kernel, f"step {path}:{line}"


def test_a_site_keeps_its_identifier_when_no_other_site_has_it() -> None:
    taken: dict = {}
    identifier = identifier_name("axpy", FrameFacts("step", "mymodel/solver.py", "m", "s", 42))
    name = rename.entry_name(identifier, holder("axpy", "mymodel/solver.py", 42), taken)
    assert name == "axpy__mymodel_solver_py_L42"


def test_the_second_site_with_the_same_identifier_gets_a_digest_of_its_own_name() -> None:
    taken: dict = {}
    first = rename.entry_name("axpy__a_b_py_L1", holder("axpy", "a/b.py", 1), taken)
    second = rename.entry_name("axpy__a_b_py_L1", holder("axpy", "a_b.py", 1), taken)
    digest = hashlib.sha1(b"axpy\0step a_b.py:1").hexdigest()[:8]
    assert first == "axpy__a_b_py_L1"
    assert second == f"axpy__a_b_py_L1_{digest}"
    # Asked again, each site gets its own name back.
    assert rename.entry_name("axpy__a_b_py_L1", holder("axpy", "a_b.py", 1), taken) == second
    assert rename.entry_name("axpy__a_b_py_L1", holder("axpy", "a/b.py", 1), taken) == first


def test_a_suffix_on_a_name_at_the_limit_keeps_it_at_the_limit() -> None:
    taken: dict = {}
    long = "k" * MAX_IDENTIFIER
    rename.entry_name(long, ("k", "one"), taken)
    second = rename.entry_name(long, ("k", "two"), taken)
    assert len(second) == MAX_IDENTIFIER
    assert re.fullmatch(r"k+_[0-9a-f]{8}", second)


# Paths and kernels from characters that naming folds together (/ . - _ and non-ASCII all
# become _), so that many different sites share an identifier; some long enough to be cut.
FOLDED = "ab/._-é"
kernels = st.sampled_from(["axpy", "ax_py", "ax.py", "pkg.axpy", "ä", "k" * 250])
paths = st.one_of(
    st.text(alphabet=FOLDED, min_size=1, max_size=12),
    st.text(alphabet=FOLDED, min_size=190, max_size=260),
)
lines = st.integers(0, 3)
site_lists = st.lists(st.tuples(kernels, paths, lines), min_size=2, max_size=40, unique=True)


def entry_names(sites: list[tuple[str, str, int]], taken: dict) -> list[str]:
    names = []
    for kernel, path, line in sites:
        identifier = identifier_name(kernel, FrameFacts("step", path, "m", "f", line))
        names.append(rename.entry_name(identifier, holder(kernel, path, line), taken))
    return names


@PROPERTY
@given(site_lists)
def test_different_sites_never_share_an_entry_name(sites) -> None:
    names = entry_names(sites, {})
    assert len(set(names)) == len(sites)


@PROPERTY
@given(site_lists)
def test_entry_names_are_short_identifiers(sites) -> None:
    for name in entry_names(sites, {}):
        assert IDENTIFIER.match(name), name
        assert len(name) <= MAX_IDENTIFIER


@PROPERTY
@given(site_lists)
def test_entry_names_are_the_same_in_every_run_and_on_every_ask(sites) -> None:
    taken: dict = {}
    names = entry_names(sites, taken)
    assert entry_names(sites, {}) == names  # another run, launching in the same order
    assert entry_names(list(reversed(sites)), taken) == list(reversed(names))


# --------------------------------------------------------------------------
# numba-cuda, compiled for real (no GPU: see no_gpu)
# --------------------------------------------------------------------------


def _empty() -> None:
    pass


@pytest.fixture(scope="module")
def numba_cuda():
    """numba-cuda's real numba.cuda, able to compile PTX here; skips otherwise."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        pytest.skip("NUMBA_ENABLE_CUDASIM is set: numba.cuda is the simulator")
    cuda = pytest.importorskip("numba.cuda")
    if cuda.config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda is the simulator")
    try:
        cuda.compile_ptx(_empty, (), cc=CC)
    except Exception as exc:
        pytest.skip(
            f"numba-cuda cannot compile PTX here ({type(exc).__name__}: {exc}); where NVVM or "
            "NVRTC is missing, pip install 'cuda-toolkit[nvvm,nvrtc]==13.*' provides them"
        )
    return cuda


DEVICE = types.SimpleNamespace(compute_capability=CC, id=0)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch, numba_cuda) -> list:
    """Stand-ins for the three driver calls (no GPU here); returns the launches, in order.

    Everything else, the dispatcher, type dispatch, the compiler and its caches, is numba-cuda's.
    """
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv import devices

    launched: list = []

    def record_launch(kernel, args, griddim, blockdim, stream=0, sharedmem=0):
        launched.append(kernel)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: DEVICE)
    monkeypatch.setattr(
        devices, "get_context", lambda *a, **k: types.SimpleNamespace(device=DEVICE)
    )
    monkeypatch.setattr(dispatcher._Kernel, "bind", lambda kernel: None)
    monkeypatch.setattr(dispatcher._Kernel, "launch", record_launch)
    return launched


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, no_gpu):
    """install(mode) for the numba target; everything put back after the test."""
    for variable in [v for v in os.environ if cleaned(v, ("KNAME_",))]:
        monkeypatch.delenv(variable)
    monkeypatch.setattr(naming, "_roots", None)
    monkeypatch.setattr(_warnings, "_said", set())
    monkeypatch.setattr(rename, "_holders", {})

    def install(mode: str = "rename") -> list:
        monkeypatch.setenv("KNAME_MODE", mode)
        kname.install(["numba"])
        return no_gpu

    yield install


def site_of(marker: str, kernel: str) -> callsite.Site:
    """The site of the launch on this file's line marked `marker`."""
    line = line_of(Path(__file__).read_text(), f"# {marker}")
    sites = list(callsite.sites.values())
    found = [s for s in sites if s.kernel.endswith(f".{kernel}") and s.name.endswith(f":{line}")]
    assert len(found) == 1, [s.name for s in sites]
    return found[0]


def kernels():
    """Kernels made fresh for each test: nothing compiled, nothing cached in memory."""
    from numba import cuda

    @cuda.jit(device=True)
    def inverse(v):
        return 1 / v

    @cuda.jit(fastmath=True, lineinfo=True, max_registers=40)
    def divide(out, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] / y[i]

    @cuda.jit
    def scale(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] * inverse(x[i])

    return types.SimpleNamespace(divide=divide, scale=scale, inverse=inverse)


def arrays(dtype=np.float32):
    return np.ones(64, dtype), np.full(64, 2, dtype), np.full(64, 4, dtype)


def plain_ptx(kernel, name: str) -> str:
    """PTX of `kernel` with `name` for its entry, and numba's per-compile environment id out."""
    ptx = kernel.inspect_asm(CC).replace(kernel.entry_name, name)
    return re.sub(r"_ZN08NumbaEnv\w+", "NumbaEnv", ptx)


def test_a_renamed_launch_runs_a_kernel_whose_ptx_entry_is_the_call_site_name(installed) -> None:
    launched = installed("rename")
    k = kernels()
    k.divide[128, 32](*arrays())  # L:entry
    site = site_of("L:entry", "divide")
    assert re.fullmatch(r"divide__\w*test_rename_py_L\d+", site.identifier)
    [kernel] = launched
    assert kernel.entry_name == site.identifier
    ptx = kernel.inspect_asm(CC)
    assert re.findall(r"\.entry\s+(\w+)\(", ptx) == [site.identifier]
    assert not k.divide.overloads  # the user's own dispatcher never compiled


def test_the_renamed_kernel_is_the_plain_kernel_under_another_name(installed) -> None:
    launched = installed("rename")
    k = kernels()
    k.divide[128, 32](*arrays())
    [renamed] = launched
    plain = k.divide.compile(renamed.argument_types)
    assert plain.entry_name.startswith("_Z")  # numba's mangled name
    assert plain_ptx(renamed, "K") == plain_ptx(plain, "K")


def test_the_renamed_kernel_keeps_the_kernels_options(installed) -> None:
    launched = installed("rename")
    k = kernels()
    k.divide[128, 32](*arrays())  # L:options
    [renamed] = launched
    ptx = renamed.inspect_asm(CC)
    assert re.search(r"div\.(approx|full)\.ftz\.f32", ptx)  # fastmath
    assert ".loc" in ptx  # lineinfo
    assert renamed._codelibrary._max_registers == 40
    copy = site_of("L:options", "divide").launch.dispatcher
    assert copy.targetoptions == k.divide.targetoptions


def test_each_call_site_compiles_its_copy_once(installed) -> None:
    launched = installed("rename")
    k = kernels()
    for _ in range(3):
        k.divide[128, 32](*arrays())  # L:loop
    k.divide[128, 32](*arrays())  # L:after
    loop, after = site_of("L:loop", "divide"), site_of("L:after", "divide")
    names = [kernel.entry_name for kernel in launched]
    assert names == [loop.identifier] * 3 + [after.identifier]
    for site in (loop, after):
        assert sum(site.launch.dispatcher.stats.cache_misses.values()) == 1  # one compile


def test_a_call_site_compiles_once_for_each_argument_types(installed) -> None:
    launched = installed("rename")
    k = kernels()
    for dtype in (np.float32, np.float64, np.float32):
        k.divide[128, 32](*arrays(dtype))  # L:types
    site = site_of("L:types", "divide")
    assert len(site.launch.dispatcher.overloads) == 2
    assert {kernel.entry_name for kernel in launched} == {site.identifier}
    assert launched[0] is launched[2]


def test_device_functions_the_kernel_calls_keep_their_own_names(installed) -> None:
    launched = installed("rename")
    k = kernels()
    k.scale[128, 32](*arrays()[:2])  # L:device
    site = site_of("L:device", "scale")
    [kernel] = launched
    assert kernel.entry_name == site.identifier
    [device_function] = k.inverse.overloads.values()
    assert device_function.fndesc.mangled_name.startswith("_Z")


def test_a_users_compile_error_is_raised_as_without_kname(installed) -> None:
    from numba import cuda
    from numba.cuda.core.errors import TypingError

    installed("rename")

    @cuda.jit
    def broken(out):
        out[0] = undefined_name  # noqa: F821

    with pytest.raises(TypingError, match="undefined_name") as renamed:
        broken[128, 32](np.zeros(4))
    with kname.paused(), pytest.raises(TypingError) as plain:
        broken[128, 32](np.zeros(4))
    assert str(renamed.value) == str(plain.value)


def test_a_kernel_that_cannot_be_renamed_launches_under_its_own_name(installed, monkeypatch, capfd):
    def fail(shim, *args, **kwargs):
        raise RuntimeError("no abi_info today")

    monkeypatch.setattr(numba_rename._NamedKernelCompile, "__call__", fail)
    launched = installed("rename")
    k = kernels()
    for _ in range(2):
        k.divide[128, 32](*arrays())
    assert [kernel.entry_name[:2] for kernel in launched] == ["_Z", "_Z"]
    assert launched[0] is launched[1]  # the fallback is kept: compiled once
    err = capfd.readouterr().err
    assert err.count("kname:") == 1
    assert "could not be compiled as divide__" in err and "no abi_info today" in err


def test_nvtx_mode_launches_the_users_own_kernel(installed) -> None:
    launched = installed("nvtx")
    k = kernels()
    k.divide[128, 32](*arrays())  # L:nvtx
    assert site_of("L:nvtx", "divide").launch is None
    assert [kernel.entry_name[:2] for kernel in launched] == ["_Z"]


def test_an_unsupported_numba_cuda_is_named_by_nvtx_only_with_one_warning(
    installed, monkeypatch, capfd
) -> None:
    monkeypatch.setattr(numba_rename, "installed_version", lambda *args: "0.29.1")
    numba_rename._numba_support.cache_clear()
    try:
        launched = installed("rename")
        k = kernels()
        k.divide[128, 32](*arrays())  # L:old-1
        k.divide[128, 32](*arrays())  # L:old-2
    finally:
        numba_rename._numba_support.cache_clear()
    assert site_of("L:old-1", "divide").launch is None
    assert [kernel.entry_name[:2] for kernel in launched] == ["_Z", "_Z"]
    err = capfd.readouterr().err
    assert err.count("kname:") == 1
    assert "needs numba-cuda >= 0.30.0 (this is 0.29.1)" in err
    assert "named by NVTX ranges only" in err


def test_a_kernel_whose_code_depends_on_the_launch_configuration_stays_renamed(installed):
    from numba import cuda
    from numba.cuda import launchconfig
    from numba.cuda.core.rewrites import Rewrite, register_rewrite

    configs = []

    @register_rewrite("after-inference")
    class MarksLaunchConfigSensitive(Rewrite):  # as numba-cuda's own tests of the feature do
        def match(self, func_ir, block, typemap, calltypes):
            self.block = block
            return func_ir.func_id.func_name == "kname_config_sensitive" and not configs

        def apply(self):
            config = launchconfig.ensure_current_launch_config()
            configs.append(config.blockdim)
            config.dispatcher.mark_launch_config_sensitive()
            return self.block

    @cuda.jit
    def kname_config_sensitive(x):
        x[0] = 1

    launched = installed("rename")
    for blockdim in (32, 64, 32):
        configs.clear()
        kname_config_sensitive[128, blockdim](np.zeros(4))  # L:lcs
    site = site_of("L:lcs", "kname_config_sensitive")
    assert [kernel.entry_name for kernel in launched] == [site.identifier] * 3
    assert launched[0] is launched[2] and launched[0] is not launched[1]
    assert not kname_config_sensitive.overloads


# --------------------------------------------------------------------------
# In other processes: the disk cache, and the simulator
# --------------------------------------------------------------------------


def pythonpath() -> str:
    """The checkout first (kname from it), then whatever PYTHONPATH this test run has."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


CACHED_KERNEL = """\
from numba import cuda


@cuda.jit(cache=True, fastmath=True)
def divide(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] / y[i]
"""

CACHE_APP = """\
import json
import types

import numpy as np

import kname

kname.install(["numba"])

from numba.cuda import dispatcher
from numba.cuda.cudadrv import devices

# No GPU here: the device query, module load and launch are stand-ins (as in test_rename.py).
device = types.SimpleNamespace(compute_capability=(9, 0), id=0)
dispatcher.get_current_device = lambda: device
devices.get_context = lambda *a, **k: types.SimpleNamespace(device=device)
dispatcher._Kernel.bind = lambda kernel: None
launched = []
dispatcher._Kernel.launch = lambda kernel, *args: launched.append(kernel.entry_name)

import cached_kernel

x = np.ones(64, np.float32)
cached_kernel.divide[128, 32](x, x, x)
copies = [s.launch.dispatcher for s in kname.callsite.sites.values() if s.launch]
used = copies[0] if copies else cached_kernel.divide
print(json.dumps({
    "entry": launched[0],
    "hits": sum(used.stats.cache_hits.values()),
    "misses": sum(used.stats.cache_misses.values()),
}))
"""


def test_the_disk_cache_never_serves_the_plain_kernel_as_the_renamed_one_or_back(
    numba_cuda, tmp_path: Path
) -> None:
    (tmp_path / "cached_kernel.py").write_text(CACHED_KERNEL)
    (tmp_path / "app.py").write_text(CACHE_APP)
    env = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME", "NVTX_", "NUMBA_"))}
    env.update(PYTHONPATH=pythonpath(), NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run(mode: str) -> dict:
        done = subprocess.run(
            [sys.executable, "app.py"], env={**env, "KNAME_MODE": mode}, cwd=tmp_path,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    plain, renamed, renamed_again, plain_again = map(run, ["nvtx", "rename", "rename", "nvtx"])
    assert plain["entry"].startswith("_Z") and plain["misses"] == 1
    # The renamed copy finds the plain kernel in the cache's index, and compiles its own.
    assert renamed["entry"].startswith("divide__") and renamed["misses"] == 1
    # Each is then served from the cache, under its own name.
    assert renamed_again == {**renamed, "hits": 1, "misses": 0}
    assert plain_again == {**plain, "hits": 1, "misses": 0}


# kname installed before numba is imported.
SIMULATED = 'import kname\n\nkname.install(["numba"])\n\n' + program("""\
def step(out, x):
    axpy[1, 8](out, 2.0, x)  # L:sim-a
    axpy[1, 8](out, 2.0, x)  # L:sim-b


out, x = np.zeros(8), np.arange(8.0)
for _ in range(2):
    step(out, x)
print(out.tolist(), sorted(kname.names().items()))
""")


@pytest.mark.slow
def test_rename_mode_under_the_simulator_is_nvtx_mode_and_says_nothing(
    inject_lib: Path, tmp_path: Path
) -> None:
    (tmp_path / "sim_app.py").write_text(SIMULATED)
    env = {k: None for k in os.environ if cleaned(k)}
    env.update(PYTHONPATH=pythonpath(), NUMBA_ENABLE_CUDASIM="1")
    runs = {}
    for mode in ("nvtx", "rename"):
        done, capture = run_captured(
            [sys.executable, "sim_app.py"], inject_lib, tmp_path, {**env, "KNAME_MODE": mode},
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "kname" not in done.stderr
        runs[mode] = (done.stdout, capture.ranges("kname"))
    stdout, ranges = runs["rename"]
    assert runs["nvtx"] == runs["rename"]
    lines = [line_of(SIMULATED, "L:sim-a"), line_of(SIMULATED, "L:sim-b")]
    assert ranges == [f"step sim_app.py:{n}" for n in lines] * 2
    assert stdout.startswith(str([8.0 * v for v in range(8)]))


def test_the_kname_package_imports_no_gpu_library_for_rename_mode() -> None:
    code = "import sys, kname.rename, kname.targets.numba; print('numba' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": pythonpath()},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "False"


# --------------------------------------------------------------------------
# On a GPU: tests/gpu/rename_demo.py under Nsight Compute (skipped elsewhere)
# --------------------------------------------------------------------------

DEMO = REPO / "tests" / "gpu" / "rename_demo.py"


@pytest.mark.gpu
def test_on_a_gpu_ncu_lists_each_kernel_under_its_call_site_name(tmp_path: Path) -> None:
    check_rename_demo_under_ncu(
        DEMO, tmp_path, "rename demo: all checks passed", 6,
        "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
    )  # fmt: skip
