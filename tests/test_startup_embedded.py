"""KNAME=1 in a Python embedded without its C API: Nsight Compute's rules interpreter.

ncu runs its rules in a Python of its own, loaded with RTLD_LOCAL, that reads the program's
site-packages with the program's environment: kname.pth sees KNAME=1 there too. No extension
module can load in that interpreter ("undefined symbol: Py..."), so no GPU library can launch
anything from it; on the H100, every `KNAME=1 ncu python3 prog.py` printed "kname: could not
start (ImportError: .../nvtx/_lib/lib...so: undefined symbol: PyExc_SystemError)" from ncu's
process while the program itself was named. The gates now stay quiet there.
tests/support/embedding_host.c embeds this Python's libpython the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support import REPO, Venv, cleaned

from kname import _startup

pytestmark = pytest.mark.slow

HOST_SOURCE = REPO / "tests" / "support" / "embedding_host.c"
NCU_SAID = (  # the ImportError ncu's interpreter gave on the H100 (2026-12-06)
    "/opt/torch/.venv/lib/python3.12/site-packages/nvtx/_lib/lib.cpython-312-x86_64-linux-gnu"
    ".so: undefined symbol: PyExc_SystemError"
)


@pytest.fixture(scope="module")
def embedding_host(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The host program built, and the shared libpython it loads (skipped without either)."""
    library = Path(sysconfig.get_config_var("LIBDIR") or "") / (
        sysconfig.get_config_var("LDLIBRARY") or ""
    )
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not library.is_file():
        pytest.skip("this Python has no shared libpython to embed")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    host = tmp_path_factory.mktemp("host") / "embedding_host"
    built = subprocess.run(
        [compiler, "-Wall", "-Wextra", "-Werror", "-o", str(host), str(HOST_SOURCE), "-ldl"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return host, library


def run_embedded(host: tuple[Path, Path], code: str, cwd: Path, **env: str):
    """`code` run by the embedded interpreter, KNAME=1 and `env` in its environment."""
    environ = {k: v for k, v in os.environ.items() if not cleaned(k)}
    environ.pop("PYTHONPATH", None)
    environ.update(PYTHONHOME=sys.base_prefix, KNAME="1", **env)
    program, library = host
    return subprocess.run(
        [str(program), str(library), code], capture_output=True, text=True, env=environ,
        cwd=cwd, timeout=120,
    )  # fmt: skip


def kname_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kname")]


def test_kname_pth_in_an_interpreter_without_its_c_api_says_nothing(
    embedding_host, kname_venv: Venv, tmp_path: Path
) -> None:
    """The wheel's kname.pth read by the embedded interpreter (as ncu's reads the program's
    site-packages): the gate ran and gave up (sys._kname_started), without a word."""
    code = (
        f"import site, sys; site.addsitedir({str(kname_venv.site_packages)!r}); "
        "print('ran', getattr(sys, '_kname_started', None))"
    )
    result = run_embedded(embedding_host, code, tmp_path)
    assert result.returncode == 0 and result.stdout.split() == ["ran", "True"], result.stderr
    assert kname_lines(result.stderr) == [], result.stderr


def test_the_sitecustomize_gates_in_an_interpreter_without_its_c_api_say_nothing(
    embedding_host,
    venv_without_pth: Venv,
    tmp_path: Path,
) -> None:
    """The same from the sitecustomize example and from the gate `kname run` puts on the path,
    where kname cannot be imported for the same reason."""
    bootstrap = venv_without_pth.site_packages / "kname" / "_bootstrap"
    for gate in (REPO / "sitecustomize_example", bootstrap):
        path = f"{gate}:{venv_without_pth.site_packages}"
        result = run_embedded(embedding_host, "print('ran')", tmp_path, PYTHONPATH=path)
        assert result.returncode == 0 and result.stdout.split() == ["ran"], result.stderr
        assert kname_lines(result.stderr) == [], (gate, result.stderr)


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ImportError(NCU_SAID), False),
        (ImportError("x.so: undefined symbol: _Py_NoneStruct"), False),
        (ImportError("libcuda.so.1: cannot open shared object file"), True),
        (ImportError("x.so: undefined symbol: cuGetProcAddress"), True),
        (RuntimeError("undefined symbol: PyExc_SystemError"), True),
    ],
)
def test_start_is_quiet_only_when_the_interpreter_hides_its_c_api(
    monkeypatch, capsys, failure: Exception, said: bool
) -> None:
    """start() past the import of kname (ncu's case: kname imported, the nvtx package's extension
    did not load): only an ImportError for a symbol of Python's own C API is left unsaid."""
    from kname import _warnings, lifecycle

    def failing_install() -> None:
        raise failure

    monkeypatch.setattr(lifecycle, "install", failing_install)
    monkeypatch.setattr(_warnings, "_said", set())
    monkeypatch.setenv("KNAME", "1")
    _startup.start()
    lines = kname_lines(capsys.readouterr().err)
    assert bool(lines) is said, lines
