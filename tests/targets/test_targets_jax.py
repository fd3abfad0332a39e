"""The jax unit: jax's frames, and those of the libraries around it, are library code; compile
time work is named apart; KNAME_USER makes them user code again; XLA's work on its own threads
takes the line of the compile or run that caused it. Without jax (CI cannot import it): jax's
code objects are made as jax makes them (its module names and files under site-packages), and
its compiler and pxla modules are stand-ins with jax's layout, in sys.modules.
"""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support import FAKEGPU, line_of

import kname
from kname import callsite
from kname.census import names
from kname.patching import is_wrapper
from kname.profiling import backward
from kname.profiling.capture import NO_PYTHON_FRAME, site_of_frame
from kname.targets import BUILTIN, library
from kname.targets.jax import COMPILE_MODULES, PACKAGES

pytestmark = pytest.mark.launches

SITE_PACKAGES = "/venv/lib/python3.12/site-packages"


def jax_code(source: str, module: str | None, filename: str | None = None) -> dict:
    """The namespace of `source` run as jax runs it: as module `module` (None: bare globals),
    from `filename` (default: the module's file under site-packages). jax is never imported."""
    if filename is None:
        assert module is not None
        filename = f"{SITE_PACKAGES}/{module.replace('.', '/')}.py"
    namespace: dict = {} if module is None else {"__name__": module}
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return namespace


def jitted_step(fakegpu: types.ModuleType) -> tuple[object, object]:
    """A jitted training step as jax runs it, down to a launch: optax's update calling a jitted
    function (traceback_util's filter, pjit's cache_miss, pxla's ExecuteReplicated); and the
    same call compiling first (compiler.backend_compile_and_load, XLA autotuning)."""
    pxla = jax_code(
        """
        class ExecuteReplicated:
            def __call__(self, *args):
                return fakegpu.launch(*args)
        """,
        "jax._src.interpreters.pxla",
    )
    compiler = jax_code(
        "def backend_compile_and_load(x):\n    return fakegpu.launch(x)\n", "jax._src.compiler"
    )
    # The launch looked up at each call (kname wraps it).
    pxla["fakegpu"] = compiler["fakegpu"] = fakegpu
    pjit = jax_code(
        """
        def cache_miss(x):
            return execute(x)

        def compile_then_run(x):
            backend_compile_and_load(x)
            return execute(x)
        """,
        "jax._src.pjit",
    )
    pjit.update(
        execute=pxla["ExecuteReplicated"](),
        backend_compile_and_load=compiler["backend_compile_and_load"],
    )
    traceback_util = jax_code(
        "def reraise_with_filtered_traceback(f, x):\n    return f(x)\n", "jax._src.traceback_util"
    )
    optax = jax_code(
        "def update(filtered, f, x):\n    return filtered(f, x)\n", "optax._src.transform"
    )
    # The jitted function's call (jax's C++ PjitFunction falls back to Python on a miss).
    api = jax_code(
        """
        def run(x):
            return update(filtered, cache_miss, x)

        def compile_and_run(x):
            return update(filtered, compile_then_run, x)
        """,
        "jax._src.api",
    )
    api.update(update=optax["update"], filtered=traceback_util["reraise_with_filtered_traceback"])
    api.update(cache_miss=pjit["cache_miss"], compile_then_run=pjit["compile_then_run"])
    run, compile_and_run = api["run"], api["compile_and_run"]
    return run, compile_and_run


APP = """
def step(jitted, x):
    return jitted(x)  # L:step
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """The user's app and the stand-in GPU library, importable, and jax's code around them."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    (tmp_path / "jax_app.py").write_text(textwrap.dedent(APP))  # named as the program
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakegpu", "jax_app"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import fakegpu
    import jax_app

    run, compile_and_run = jitted_step(fakegpu)
    yield types.SimpleNamespace(app=jax_app, run=run, compile_and_run=compile_and_run)
    for name in ("fakegpu", "jax_app"):
        sys.modules.pop(name, None)


STEP = f"step jax_app.py:{line_of(APP, 'L:step')}"


# --------------------------------------------------------------------------
# jax's frames, and those of the libraries around it
# --------------------------------------------------------------------------


def test_jax_is_a_built_in_unit_whose_packages_are_library_code() -> None:
    unit = library("jax")
    assert "jax" in BUILTIN and unit.packages[:2] == ("jax", "jaxlib")
    assert {"flax", "optax", "equinox", "orbax", "chex"} <= set(unit.packages)
    assert "jax._src.compiler" in unit.compile_modules
    imported = "jax" in sys.modules
    kname.install(targets=["fakegpu:launch"])  # not a target chosen: still library code
    assert {"jax", "jaxlib", "optax"} <= set(callsite._rules.library_modules)
    assert ("jax" in sys.modules) == imported  # the unit imports no jax


def test_a_jitted_calls_kernels_are_named_after_the_line_calling_it(app) -> None:
    kname.install(targets=["fakegpu:launch"])
    app.app.step(app.run, 1)
    app.app.step(app.run, 2)
    assert names() == {STEP: 2}


def test_compile_time_work_is_named_apart_on_the_line_that_caused_the_compile(app) -> None:
    kname.install(targets=["fakegpu:launch"])
    app.app.step(app.compile_and_run, 1)  # autotuning's launch, then the run's
    app.app.step(app.run, 2)
    assert names() == {STEP + callsite.COMPILE_MARK: 1, STEP: 2}


def test_compile_marks_only_what_runs_beneath_jaxs_compile_modules() -> None:
    kname.install(targets=["fakegpu:launch"])
    for module in COMPILE_MODULES:
        code = jax_code("def f():\n    pass\n", module)["f"].__code__
        assert callsite.kind_of(code, module) == callsite.COMPILE, module
    for module in ("jax._src.pjit", "jax._src.interpreters.pxla", "jax._src.dispatch"):
        code = jax_code("def f():\n    pass\n", module)["f"].__code__
        assert callsite.kind_of(code, module) == callsite.LIBRARY, module


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("jax", "ExecuteReplicated.__call__ jax/_src/interpreters/pxla.py:4"),
        ("jax._src.pjit", "cache_miss jax/_src/pjit.py:3"),
        ("optax", "update optax/_src/transform.py:2"),
        ("flax", STEP),  # no frame of flax's here
    ],
)
def test_kname_user_makes_jaxs_frames_user_code_again(app, monkeypatch, user, expected) -> None:
    monkeypatch.setenv("KNAME_USER", user)
    kname.install(targets=["fakegpu:launch"])
    app.app.step(app.run, 1)
    assert list(names()) == [expected]


# --------------------------------------------------------------------------
# The path rules: which module names and files are jax's
# --------------------------------------------------------------------------

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
submodules = st.lists(identifiers, min_size=0, max_size=4)


@settings(max_examples=200)
@given(st.sampled_from(PACKAGES), submodules)
def test_every_module_of_jax_and_the_libraries_around_it_is_library_code(package, parts) -> None:
    module = ".".join([package, *parts])
    callsite.configure(library_modules=PACKAGES)
    code = jax_code("def f():\n    pass\n", module)["f"].__code__
    assert callsite.kind_of(code, module) == callsite.LIBRARY


@settings(max_examples=200)
@given(
    st.sampled_from(PACKAGES),
    identifiers | st.sampled_from(["lib", "_plugins", "_app"]),
    submodules,
)
def test_a_users_module_whose_name_only_begins_as_jaxs_is_the_users(package, tail, parts) -> None:
    """`jax_app`, `jaxlib2`, `optaxx.train`: a prefix of a package's name is not its package
    (jax + lib is one: `jaxlib`)."""
    assume(package + tail not in PACKAGES)
    module = ".".join([package + tail, *parts])
    callsite.configure(library_modules=PACKAGES)
    filename = f"/home/alice/{module.replace('.', '/')}.py"
    code = jax_code("def f():\n    pass\n", module, filename)["f"].__code__
    assert callsite.kind_of(code, module) == callsite.USER


@settings(max_examples=200)
@given(
    st.sampled_from(PACKAGES),
    submodules,
    st.sampled_from(
        [SITE_PACKAGES, "/usr/lib/python3/dist-packages", "C:\\py\\Lib\\site-packages"]
    ),
)
def test_code_with_no_module_in_a_jax_package_under_site_packages_is_library_code(
    package, parts, site
) -> None:
    """Code jax runs with bare globals from one of its files is judged by the file."""
    separator = "\\" if "\\" in site else "/"
    filename = separator.join([site, package, *parts, "impl.py"])
    callsite.configure(library_modules=PACKAGES)
    code = jax_code("def f():\n    pass\n", None, filename)["f"].__code__
    assert callsite.kind_of(code, None) == callsite.LIBRARY


# --------------------------------------------------------------------------
# XLA's own threads: the compile scope and the run scope
# --------------------------------------------------------------------------

SCOPES_APP = """
def compile_step(compiler, x):
    return compiler.backend_compile_and_load(x)  # L:compile


def run_step(executable, x):
    return executable(x)  # L:run


def eager_op(dispatch, x):
    return dispatch.apply_primitive("sin", x)  # L:eager


def read(array):
    return array._value  # L:read (as float(array), np.asarray(array) read it)
"""


def stand_in_jax(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """`jax._src.compiler` and `jax._src.interpreters.pxla` with jax's layout, in sys.modules
    (the real jax is not imported). Each entry point says what a launch with no Python frame
    (on one of XLA's threads) would be named while it runs."""
    compiler = types.ModuleType("jax._src.compiler")
    compiler.backend_compile_and_load = lambda x: site_of_frame(None)
    compiler.compile_or_get_cached = lambda x: compiler.backend_compile_and_load(x)
    pxla = types.ModuleType("jax._src.interpreters.pxla")

    class ExecuteReplicated:
        def __call__(self, x):
            return site_of_frame(None)

    pxla.ExecuteReplicated = ExecuteReplicated
    dispatch = types.ModuleType("jax._src.dispatch")
    # An eager op, as jax's own code: its first call compiles inside it; its host operand's
    # copy is launched on PJRT's transfer thread (no Python frame) while it runs.
    eager = jax_code(
        """
        def apply_primitive(primitive, x):
            compiled = compiler.backend_compile_and_load(x) if x == "first" else None
            return compiled, site_of_frame(None)
        """,
        "jax._src.dispatch",
    )
    eager.update(compiler=compiler, site_of_frame=site_of_frame)
    dispatch.apply_primitive = eager["apply_primitive"]
    array = types.ModuleType("jax._src.array")
    # An array read on the host: its copy comes from PJRT's transfer thread while it waits.
    array.ArrayImpl = jax_code(
        """
        class ArrayImpl:
            @property
            def _value(self):
                return site_of_frame(None)
        """,
        "jax._src.array",
    )["ArrayImpl"]
    array.ArrayImpl._value.fget.__globals__["site_of_frame"] = site_of_frame
    modules = {
        "jax": types.ModuleType("jax"),
        "jax._src": types.ModuleType("jax._src"),
        "jax._src.compiler": compiler,
        "jax._src.interpreters": types.ModuleType("jax._src.interpreters"),
        "jax._src.interpreters.pxla": pxla,
        "jax._src.dispatch": dispatch,
        "jax._src.array": array,
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(compiler=compiler, pxla=pxla, dispatch=dispatch, array=array)


@pytest.fixture
def scopes_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    (tmp_path / "scopes_app.py").write_text(textwrap.dedent(SCOPES_APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scopes_app", raising=False)
    import scopes_app

    yield scopes_app
    sys.modules.pop("scopes_app", None)
    backward.collect(None)


def test_xlas_frameless_work_takes_the_line_of_the_compile_or_run_causing_it(
    monkeypatch, scopes_app
) -> None:
    jax = stand_in_jax(monkeypatch)
    kname.install(targets=["jax"])
    backward.collect(site_of_frame)  # as a collecting profile session does
    compiled = scopes_app.compile_step(jax.compiler, 1)
    ran = scopes_app.run_step(jax.pxla.ExecuteReplicated(), 1)
    assert compiled == f"compile_step scopes_app.py:{line_of(SCOPES_APP, 'L:compile')} (compile)"
    assert ran == f"run_step scopes_app.py:{line_of(SCOPES_APP, 'L:run')}"
    assert backward.frameless_name() is None  # every scope closed with its call
    assert site_of_frame(None) == NO_PYTHON_FRAME


def test_an_eager_ops_host_copies_take_its_line_and_its_first_compile_is_marked_alone(
    monkeypatch, scopes_app
) -> None:
    """The copy PJRT launches from its transfer thread while an eager op runs is the op's line;
    the compile nested in the op's first call is `(compile)`, not two concurrent scopes."""
    jax = stand_in_jax(monkeypatch)
    kname.install(targets=["jax"])
    backward.collect(site_of_frame)
    line = f"eager_op scopes_app.py:{line_of(SCOPES_APP, 'L:eager')}"
    assert scopes_app.eager_op(jax.dispatch, "first") == (line + " (compile)", line)
    assert scopes_app.eager_op(jax.dispatch, 2) == (None, line)
    assert backward.frameless_name() is None


def test_an_arrays_host_read_takes_the_reading_line(monkeypatch, scopes_app) -> None:
    jax = stand_in_jax(monkeypatch)
    kname.install(targets=["jax"])
    backward.collect(site_of_frame)
    line = f"read scopes_app.py:{line_of(SCOPES_APP, 'L:read')}"
    assert scopes_app.read(jax.array.ArrayImpl()) == line
    assert backward.frameless_name() is None


def test_no_scope_is_opened_while_no_profile_collects(monkeypatch, scopes_app) -> None:
    jax = stand_in_jax(monkeypatch)
    kname.install(targets=["jax"])
    assert scopes_app.compile_step(jax.compiler, 1) == NO_PYTHON_FRAME
    assert scopes_app.run_step(jax.pxla.ExecuteReplicated(), 1) == NO_PYTHON_FRAME


def test_a_compile_that_raises_closes_its_scope(monkeypatch, scopes_app) -> None:
    jax = stand_in_jax(monkeypatch)

    def failing(x):
        raise RuntimeError("XLA failed")

    jax.compiler.backend_compile_and_load = failing
    kname.install(targets=["jax"])
    backward.collect(site_of_frame)
    with pytest.raises(RuntimeError, match="XLA failed"):
        scopes_app.compile_step(jax.compiler, 1)
    assert backward.frameless_name() is None


def test_the_entry_points_are_wrapped_and_given_back(monkeypatch) -> None:
    jax = stand_in_jax(monkeypatch)
    originals = (
        jax.compiler.backend_compile_and_load,
        jax.compiler.compile_or_get_cached,
        vars(jax.pxla.ExecuteReplicated)["__call__"],
    )
    kname.install(targets=["jax"])
    assert is_wrapper(jax.compiler.backend_compile_and_load)
    assert is_wrapper(jax.compiler.compile_or_get_cached)
    assert is_wrapper(vars(jax.pxla.ExecuteReplicated)["__call__"])
    kname.disable()
    current = (
        jax.compiler.backend_compile_and_load,
        jax.compiler.compile_or_get_cached,
        vars(jax.pxla.ExecuteReplicated)["__call__"],
    )
    assert current == originals
    kname.enable()
    kname.uninstall()
    assert not is_wrapper(jax.compiler.backend_compile_and_load)
