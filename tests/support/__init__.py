"""Building kname's wheel and installing it, for real, into fresh virtual environments.

A test venv is made without pip (fast) and sees the test environment's packages (numba, wrapt,
nvtx) through a .pth that adds the parent's site-packages; kname itself comes from the wheel.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent.parent
# A stand-in GPU library's source, for tests that write it into their tmp_path.
FAKEGPU = (Path(__file__).with_name("fakegpu.py")).read_text()
PARENT_SITE = sysconfig.get_paths()["purelib"]
PARENT_PTH = "_kname_tests_parent.pth"
# Adds the test environment's site-packages and runs its .pth files, except a kname.pth of its
# own: where the test environment has kname installed, its gate must not start kname here.
PARENT_PTH_LINE = (
    "import os, site, sys; p = {parent!r}; sys.path.append(p); "
    "names = [n for n in sorted(os.listdir(p)) if n.endswith('.pth') and n != 'kname.pth']; "
    "list(map(site.addpackage, [p] * len(names), names, [set()] * len(names)))\n"
)


# The hot path (per-launch wrapper) a test runs under, set by tests/conftest.py: a test that
# cleans KNAME_* variables out of an environment keeps this one, so its children run it too.
HOT_PATH_VARIABLE = "KNAME_NATIVE"


@functools.cache
def kname_setup(root: Path = REPO) -> ModuleType:
    """kname's setup.py as a module (not run as __main__: setup() is not called), for what it
    says of the build: the C extensions with their sources and headers, the NVTX headers found.
    Raises ImportError where setuptools, which setup.py imports, is not installed."""
    spec = importlib.util.spec_from_file_location("kname_setup", root / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extension_inputs(root: Path = REPO) -> dict[str, list[Path]]:
    """Each C extension built on this platform, by module name: the files it is built from,
    its sources and then its headers, as setup.py lists them."""
    return {
        ext.name: [root / name for name in (*ext.sources, *ext.depends)]
        for ext in kname_setup(root).extensions(None)
    }


def cleaned(name: str, prefixes: tuple[str, ...] = ("KNAME", "NVTX_")) -> bool:
    """Whether variable `name` goes from a clean environment (KNAME_NATIVE stays)."""
    return name.startswith(prefixes) and name != HOT_PATH_VARIABLE


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command with text output captured; fail with its output if it fails."""
    result = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold the lock file `lock_path` (made if missing): one process at a time gets past it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        yield


def made_once(folder: Path, make: Callable[[Path], Path]) -> Path:
    """`make(folder)`'s answer, made by the first process to ask and handed to the others.

    pytest-xdist's workers of one run share a temporary root: the first to ask for a wheel (or a
    venv) builds it in `folder` while the others wait on the lock; they then take the same path.
    A build that failed leaves no answer, so the next to ask tries again.
    """
    answer = folder.with_name(f"{folder.name}.made")
    with exclusive(folder.with_name(f"{folder.name}.lock")):
        if answer.exists():
            return Path(answer.read_text())
        shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
        folder.mkdir()
        made = make(folder)
        answer.write_text(str(made))
        return made


def checkout_files(root: Path = REPO) -> list[str]:
    """The files a clone of `root` would hold, with the changes not yet committed: what git
    tracks or would track. Never a virtual environment, a build or an extension built in place
    (copying a venv with torch and triton filled CI's disk)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):  # no git, or a copy without .git
        return _files_outside_ignored_folders(root)
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


def _files_outside_ignored_folders(root: Path) -> list[str]:
    skipped = {".git", ".venv", "build", "dist", "__pycache__", ".hypothesis", "results"}
    names = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [
            s for s in subfolders if s not in skipped and not s.endswith(("cache", ".egg-info"))
        ]
        relative = Path(folder).relative_to(root)
        names += [str(relative / f) for f in files if not f.endswith((".so", ".pyc"))]
    return names


def copy_checkout(dest: Path, root: Path = REPO) -> Path:
    """Copy the checkout's files (see `checkout_files`) to a new folder `dest`."""
    for name in checkout_files(root):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return dest


def build_wheel(out_dir: Path) -> Path:
    """Build kname's wheel from a copy of the checkout (no network, no build isolation)."""
    return build_wheel_of(copy_checkout(out_dir / "source"), out_dir)


def build_wheel_of(source: Path, out_dir: Path) -> Path:
    """Build the wheel of the project in `source` with the test environment's setuptools."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("*.whl"))
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out_dir), str(source)],
    )  # fmt: skip
    built = sorted(set(out_dir.glob("*.whl")) - before) or sorted(out_dir.glob("*.whl"))
    assert built, f"no wheel was built in {out_dir}"
    return built[-1]


def build_extensions_in_place(root: Path = REPO) -> str:
    """Build kname's C extensions into the checkout `root`, which the tests and benchmarks
    import kname from (`pip install` builds them into site-packages, not there); up to date,
    this costs a look at file times. Returns what went wrong, in words ("" when nothing)."""
    if importlib.util.find_spec("setuptools") is None:
        return f"setuptools is not installed for {sys.executable}: pip install setuptools"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    inputs = extension_inputs(root)  # setup.py's own lists: no second copy kept here
    built = [root / f"{name.replace('.', '/')}{suffix}" for name in inputs]
    sources = [path for paths in inputs.values() for path in paths]
    newest = max(path.stat().st_mtime for path in [*sources, root / "setup.py"])
    if all(path.exists() and newest <= path.stat().st_mtime for path in built):
        return ""
    # A failed build leaves no extension (as at install, with a warning): the native half of
    # the tests then skips, and test_native says why the extension is not in use. --force:
    # setuptools compares the sources' times only, not setup.py's.
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force"], cwd=root,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    said = [
        line for line in done.stderr.splitlines() if line.startswith(("WARNING: kname", "kname:"))
    ]
    if done.returncode != 0:
        return "\n".join([*said, *(done.stdout + done.stderr).strip().splitlines()[-1:]])
    return "\n".join(said)


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        found = sorted(self.root.glob("lib/python*/site-packages"))
        assert found, f"no site-packages in {self.root}"
        return found[0]

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        """The test environment's pip, acting on this venv alone.

        The parent-packages .pth is hidden meanwhile: pip must not see (and skip, or uninstall)
        a kname installed in the test environment itself.
        """
        parent_pth = self.site_packages / PARENT_PTH
        hidden = parent_pth.with_suffix(".hidden")
        if parent_pth.exists():
            parent_pth.rename(hidden)
        try:
            return run([sys.executable, "-m", "pip", "--python", str(self.python), *args])
        finally:
            if hidden.exists():
                hidden.rename(parent_pth)

    def install(self, *requirements: str) -> None:
        """Install wheels, or source folders (built into wheels here first), without deps."""
        wheels = [
            str(build_wheel_of(Path(r), Path(r).parent / "dist")) if Path(r).is_dir() else r
            for r in requirements
        ]
        self.pip("install", "-q", "--no-deps", "--no-index", *wheels)

    def python_run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
        """Run this venv's python with a clean KNAME environment plus `env`."""
        environ = {k: v for k, v in os.environ.items() if not cleaned(k)}
        environ.pop("PYTHONPATH", None)
        environ.update(env or {})
        # Never the checkout as working directory: `python -c` would import kname from it.
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=environ,
            cwd=cwd or self.root,
        )  # fmt: skip


def make_venv(root: Path) -> Venv:
    """A venv that sees the test environment's packages but not this checkout."""
    venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(root)
    made = Venv(root)
    # Sorted before kname.pth, so dependencies are importable when kname's gate runs.
    (made.site_packages / PARENT_PTH).write_text(PARENT_PTH_LINE.format(parent=PARENT_SITE))
    return made


def write_package(root: Path, name: str, files: dict[str, str]) -> Path:
    """Write a minimal installable package `name` with `files` (module path -> source)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=64']\nbuild-backend = 'setuptools.build_meta'\n"
        f"[project]\nname = '{name}'\nversion = '1.0'\n"
        f"[tool.setuptools]\npackages = ['{name}']\n"
    )
    package = root / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").touch()
    for relative, source in files.items():
        (package / relative).write_text(source)
    return root


def line_of(source: str, marker: str) -> int:
    """The 1-based line number of the only line of `source` containing `marker`."""
    lines = [n for n, text in enumerate(source.splitlines(), 1) if marker in text]
    assert len(lines) == 1, f"marker {marker!r} found on lines {lines}"
    return lines[0]


def ended_by_sigterm(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run `command` until it prints `ready`, then send it SIGTERM: (its exit status, stderr)."""
    import signal

    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as program:
        assert program.stdout.readline() == "ready\n", program.stderr.read()
        program.send_signal(signal.SIGTERM)
        _, stderr = program.communicate(timeout=60)
    return program.returncode, stderr


def gpu_missing_reason() -> str | None:
    """Why the GPU tests cannot run here (no CUDA driver, no ncu), or None."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1)"
    if shutil.which("ncu") is None:
        return "ncu (Nsight Compute) is not on PATH"
    return None


def profile_missing_reason() -> str | None:
    """Why the GPU tests of kname profile cannot run here (no CUDA driver, no cupti-python), or
    None."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1)"
    if importlib.util.find_spec("cupti") is None:
        return "cupti-python is not installed"
    return None


@functools.cache
def torch_profile_missing_reason() -> str | None:
    """Why the torch GPU tests of kname profile cannot run here, or None; torch is probed in a
    child once per run (importing it here would slow every test module's collection)."""
    missing = profile_missing_reason()
    if missing is not None:
        return missing
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    probe = [sys.executable, "-c", "import torch; assert torch.cuda.is_available()"]
    if subprocess.run(probe, capture_output=True, timeout=300, check=False).returncode:
        return "torch has no CUDA device here"
    return None


def run_profile_demo(
    demo: Path, callbacks: str, *args: str, timeout: int
) -> subprocess.CompletedProcess:
    """A tests/gpu demo of kname profile run from the checkout, with kname's native CUPTI
    callback (`callbacks` "native") or the Python one (KNAME_NATIVE=0); skipped where the native
    one is asked for and is not built."""
    import pytest

    from kname import hotpath

    native, why = hotpath.choose(True).cupti()
    if callbacks == "native" and native is None:
        pytest.skip(f"no native CUPTI callback: {why}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    env["KNAME_NATIVE"] = "1" if callbacks == "native" else "0"
    return subprocess.run(
        [sys.executable, str(demo), *args], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def check_rename_demo_under_ncu(demo: Path, cwd: Path, passed: str, sites: int, *ncu: str) -> None:
    """Run a rename demo (kname from this checkout) under `ncu --print-summary per-kernel`.

    The demo must end with `passed` and print `sites` lines `SITE marker line entry ...`; each
    entry must end with its line and appear in ncu's kernel summary too.
    """
    reason = gpu_missing_reason()
    if reason:
        import pytest

        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME", "NUMBA_"))}
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(PYTHONPATH=pythonpath, KNAME_MODE="rename")
    done = subprocess.run(
        ["ncu", *ncu, "--print-summary", "per-kernel", sys.executable, str(demo)],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert passed in output, output[-4000:]
    site_lines = [line.split() for line in output.splitlines() if line.startswith("SITE ")]
    assert len(site_lines) == sites, output[-4000:]
    for _, marker, line, entry, *_ in site_lines:
        assert entry.endswith(f"_L{line}"), (marker, entry)
        # The demo prints each name once; ncu's summary must list it as a kernel too.
        assert output.count(entry) >= 2, f"{entry} not in ncu's summary:\n{output[-4000:]}"
