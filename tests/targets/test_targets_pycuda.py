"""The PyCUDA target, against a test double of PyCUDA (written into tmp_path).

PyCUDA builds only against a CUDA toolkit and driver library, which this machine lacks, so
these tests use a stand-in package with PyCUDA's layout: `pycuda._driver` (the Boost.Python
extension: classes `Function` and `Module`), `pycuda.driver` (which, like PyCUDA's, imports
`_driver` and then sets `Function.__call__` and the prepared calls while it is imported),
`pycuda.compiler.SourceModule` and a library kernel in `pycuda.elementwise`. The test double
records launches instead of making them. The wrapping is checked against this layout only; a
real PyCUDA run needs a GPU machine with PyCUDA installed.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.launches

FORMAT = "{kernel}|{function}|{line}"
DOUBLE = {
    "pycuda/__init__.py": "",
    "pycuda/_driver.py": '''
        """Stands in for the Boost.Python extension: instances have a __dict__."""

        LAUNCHES = []


        class Function:
            def __getattr__(self, name):  # PyCUDA maps unknown names to driver attributes
                raise AttributeError(f"no attribute {name!r} in Function")

            def _set_block_shape(self, *block):
                pass

            def _launch_kernel(self, grid, block, arg_buf, shared, stream):
                LAUNCHES.append((grid, block))


        class Module:
            def get_function(self, name):
                return Function()
        ''',
    "pycuda/driver.py": """
        from pycuda._driver import *  # noqa: F403
        from pycuda._driver import Function


        def _add_functionality():
            def function_call(func, *args, **kwargs):
                func._launch_kernel(kwargs.get("grid", (1, 1)), kwargs["block"], args, 0, None)

            def function_prepare(func, arg_types, texrefs=None):
                func.arg_format = arg_types
                return func

            def function_prepared_call(func, grid, block, *args, **kwargs):
                func._launch_kernel(grid, block, args, 0, None)

            def function_prepared_timed_call(func, grid, block, *args, **kwargs):
                func._launch_kernel(grid, block, args, 0, None)
                return lambda: 0.0

            def function_prepared_async_call(func, grid, block, stream, *args, **kwargs):
                func._launch_kernel(grid, block, args, 0, stream)

            Function.__call__ = function_call
            Function.prepare = function_prepare
            Function.prepared_call = function_prepared_call
            Function.prepared_timed_call = function_prepared_timed_call
            Function.prepared_async_call = function_prepared_async_call


        _add_functionality()
        """,
    "pycuda/compiler.py": """
        from pycuda.driver import Module


        class SourceModule:
            def __init__(self, source):
                self.module = Module()

            def get_function(self, name):
                return self.module.get_function(name)
        """,
    "pycuda/elementwise.py": """
        from pycuda.compiler import SourceModule


        def axpbyz(x):
            function = SourceModule("...").get_function("axpbyz").prepare("P")
            function.prepared_async_call((1, 1), (32, 1, 1), None, x)
        """,
}
HEADER = """
import kname
"""


def run_app(
    source: str, lib: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[str, str, Capture]:
    """Run `source` as app.py under NVTX capture, with the test double importable."""
    for name, text in DOUBLE.items():
        path = tmp_path / "double" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    source = textwrap.dedent(HEADER) + textwrap.dedent(source)
    (tmp_path / "app.py").write_text(source)
    env = {"PYTHONPATH": f"{REPO}:{tmp_path / 'double'}", "KNAME_FORMAT": FORMAT, **(env or {})}
    args = [sys.executable, str(tmp_path / "app.py")]
    done, capture = run_captured(args, lib, tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert capture.balanced(), capture.stack_errors()
    return source, done.stdout, capture


def test_launch_methods_and_get_function_are_wrapped_and_restored(inject_lib, tmp_path):
    _, out, _ = run_app(
        """
        import pycuda.driver as drv
        names = ("__call__", "prepared_call", "prepared_async_call", "prepared_timed_call")
        originals = {n: vars(drv.Function)[n] for n in names}
        get_function = vars(drv.Module)["get_function"]
        kname.install()
        print(all(getattr(vars(drv.Function)[n], "_kname_wrapper", False) for n in names),
              vars(drv.Module)["get_function"] is not get_function)
        kname.uninstall()
        print(all(vars(drv.Function)[n] is originals[n] for n in names),
              vars(drv.Module)["get_function"] is get_function)
        """,
        inject_lib,
        tmp_path,
    )
    assert out.split() == ["True"] * 4


def test_each_launch_form_is_named_after_its_line_and_kernel(inject_lib, tmp_path):
    source, out, capture = run_app(
        """
        kname.install()
        from pycuda.compiler import SourceModule

        def main():
            saxpy = SourceModule("...").get_function("saxpy")
            saxpy(1, 2, block=(32, 1, 1), grid=(1, 1))  # call-line
            saxpy.prepare("PP")
            saxpy.prepared_call((1, 1), (32, 1, 1), 1, 2)  # prepared-line
            saxpy.prepared_async_call((1, 1), (32, 1, 1), None, 1, 2)  # async-line
            saxpy.prepared_timed_call((1, 1), (32, 1, 1), 1, 2)()  # timed-line

        main()
        import pycuda._driver
        print(len(pycuda._driver.LAUNCHES))
        """,
        inject_lib,
        tmp_path,
    )
    markers = ("call-line", "prepared-line", "async-line", "timed-line")
    assert capture.ranges("kname") == [f"saxpy|main|{line_of(source, m)}" for m in markers]
    assert out.strip() == "4"


def test_pycuda_library_kernels_are_named_after_the_user_line(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        kname.install()
        from pycuda import elementwise
        elementwise.axpbyz(1)  # library-line
        """,
        inject_lib,
        tmp_path,
    )
    assert capture.ranges("kname") == [f"axpbyz|<module>|{line_of(source, 'library-line')}"]


def test_a_function_obtained_before_install_is_named_generically(inject_lib, tmp_path):
    source, _, capture = run_app(
        """
        from pycuda.compiler import SourceModule
        early = SourceModule("...").get_function("early")
        kname.install()
        early(block=(1, 1, 1))  # early-line
        """,
        inject_lib,
        tmp_path,
    )
    assert capture.ranges("kname") == [f"pycuda_function|<module>|{line_of(source, 'early-line')}"]


def test_kernel_name_falls_back_without_an_instance_dict():
    from kname.targets.pycuda import UNNAMED, kernel_name

    assert kernel_name(object()) == UNNAMED

    class Named:
        pass

    named = Named()
    named._kname_name = "k"
    assert kernel_name(named) == "k"
