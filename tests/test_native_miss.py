"""The first launch from a new line named in C (kname/_native_c/miss.c, named_in_c): the
name C makes is the one Python makes, byte for byte, and a fault of C's own is said once, the
launch named by Python, and every miss after it too, until the rules are set again.

C reads only what Python's rules decided (kname.callsite.NativeMiss): each file's `{path}`, the
module's kind, the template's parts. Generated programs run under both (C, then Python alone:
NativeMiss.in_c off) and their names are compared.
"""

from __future__ import annotations

import keyword
import os
import sys
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_callsite import Sandbox
from test_callsite import sandbox as sandbox
from test_miss_path import new_lines

import kname
from kname import callsite
from kname.config import DEFAULT_FORMAT

pytestmark = pytest.mark.launches

# A segment of a file's path: plain, with a marker's letters, not ASCII, an undecodable byte.
SEGMENT = st.text(alphabet="abz_09-.é\udcff", min_size=1, max_size=6).filter(
    lambda part: part not in (".", "..")
)
MARKER = st.sampled_from(["site-packages", "dist-packages", "src", "SRC", "pkg.zip", "a.egg"])
DIRECTORIES = st.lists(st.one_of(SEGMENT, SEGMENT, SEGMENT, MARKER), max_size=5)
# Under the working directory (a path root: rule 6 of kname.paths), anchored or relative.
PREFIX = st.sampled_from(["/", "", os.getcwd() + "/", "C:\\", "\\\\server\\share\\"])
FILENAMES = st.builds(
    lambda prefix, parts, stem: prefix + "/".join([*parts, stem + ".py"]),
    PREFIX,
    DIRECTORIES,
    SEGMENT,
)
# User modules, and names Python's rules make another kind: kname's own, the standard library's.
USER_MODULES = ["app", "solver.step", "__main__", "train_2", "modèle"]
MODULES = st.sampled_from([*USER_MODULES, "kname.fake", "json", "code"])
IDENTIFIERS = st.from_regex(r"[a-z_][a-z0-9_]{0,7}|ñame", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name != "fakegpu"
)
FIELD = st.sampled_from(
    ["{kernel}", "{function}", "{path}", "{module}", "{file}", "{line}", "{lib}"]
)
# Fields C does not render (a format spec, a conversion), and literal text (braces escaped).
OTHER = st.sampled_from(["{line:>5}", "{path!r}", "{{", "}}", " < ", ":", "é"])
EVERY_FIELD = "{path}:{line} {function} ({module}, {file}) {lib} {kernel}"
TEMPLATES = st.one_of(
    st.sampled_from([DEFAULT_FORMAT, EVERY_FIELD]),
    st.lists(st.one_of(FIELD, FIELD, OTHER, st.text(alphabet="ab -", max_size=3)),
             min_size=1, max_size=6).map("".join),
)  # fmt: skip
SHAPES = ["module", "function", "method", "multiline", "nested", "lambda"]


def program(shape: str, name: str, pad: int) -> tuple[str, Callable[[dict], object]]:
    """Source launching once from a line `pad` lines down, in code of `shape` named `name`, and
    how to run that launch in the globals the source ran in."""
    head = "\n" * pad
    if shape == "module":
        return head + "fakegpu.launch(1)\n", lambda g: None
    if shape == "function":
        return head + f"def {name}():\n    return fakegpu.launch(1)\n", lambda g: g[name]()
    if shape == "multiline":  # the call's line: the line of its current instruction
        source = f"def {name}():\n    return fakegpu.launch(\n        1,\n    )\n"
        return head + source, lambda g: g[name]()
    if shape == "method":
        source = f"class {name}:\n    def run(self):\n        return fakegpu.launch(1)\n"
        return head + source, lambda g: g[name]().run()
    if shape == "nested":
        source = f"def {name}():\n    def inner():\n        return fakegpu.launch(1)\n"
        return head + source + "    return inner()\n", lambda g: g[name]()
    return head + f"{name} = lambda: fakegpu.launch(1)\n", lambda g: g[name]()


def launch_name(source: str, filename: str, module: str, run, in_c: bool) -> list[str]:
    """The names of the sites the launch of `source` (compiled as `filename`, run as `module`)
    makes, named with C (`in_c`) or by Python alone."""
    import fakegpu

    callsite.clear()
    callsite.NativeMiss.in_c = in_c
    code = compile(source, filename, "exec")
    namespace = {"__name__": module, "fakegpu": fakegpu}
    exec(code, namespace)
    run(namespace)
    return sorted(site.name for site in callsite.sites.values())


def with_template(template: str) -> None:
    """The rules of the moment, with `template` as KNAME_FORMAT."""
    rules = callsite._rules
    core = len(callsite.CORE_LIBRARY_MODULES)
    callsite.configure(
        rules.skip, template, rules.depth, rules.emit_nvtx, rules.library_modules[core:],
        rules.user, rules.compile_modules, rules.generated, rules.compile_phases,
    )  # fmt: skip


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    shape=st.sampled_from(SHAPES),
    name=IDENTIFIERS,
    pad=st.integers(0, 40),
    filename=FILENAMES,
    module=MODULES,
    template=TEMPLATES,
)
def test_a_new_line_named_in_c_gets_the_name_python_gives_it_byte_for_byte(
    sandbox: Sandbox,
    hot_path: str,
    monkeypatch: pytest.MonkeyPatch,
    shape: str,
    name: str,
    pad: int,
    filename: str,
    module: str,
    template: str,
) -> None:
    if hot_path != "native":
        pytest.skip("names a miss in C: the C wrapper's")
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # a shell's cells are Python's
    if not kname.is_installed():  # the first example (the fixture is the test's)
        sandbox.install()
    built: list[str | None] = []
    build = callsite.NativeMiss.build

    def noting(self, *args):
        built.append(args[5])  # the name C made (None: made by Python)
        return build(self, *args)

    monkeypatch.setattr(callsite.NativeMiss, "build", noting)
    with_template(template)
    source, run = program(shape, name, pad)
    in_c = launch_name(source, filename, module, run, in_c=True)
    named_in_c = list(built)
    in_python = launch_name(source, filename, module, run, in_c=False)
    assert in_c == in_python
    assert len(built) == len(named_in_c)  # Python alone: no call to C's build
    # The common miss is C's, name and all: a function's or method's line of a user module's
    # file, by a template of plain fields, named in ASCII.
    plain = all(other not in template for other in ("{line:>5}", "{path!r}"))
    common = shape in ("function", "method", "multiline") and module in USER_MODULES and plain
    if common and all(text.isascii() for text in (filename, module, name, template)):
        assert named_in_c == in_c


def test_a_fault_of_c_naming_is_said_once_and_python_names_every_miss_until_rules_are_set(
    sandbox: Sandbox,
    hot_path: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if hot_path != "native":
        pytest.skip("names a miss in C: the C wrapper's")
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # a shell's cells are Python's
    sandbox.install()
    lines = new_lines(sandbox, "c_fault", 3)
    filename = str(sandbox.root / "c_fault.py")
    # A file's place that is no text: C's naming fails on its own (a cache broken here, on
    # purpose; its other faults are failed allocations).
    callsite.NativeMiss.places[("c_fault", filename)] = 3
    lines[0]()
    lines[1]()
    assert sorted(site.name for site in callsite.sites.values()) == [
        "line0 c_fault.py:4", "line1 c_fault.py:7",
    ]  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert "internal error while naming a new call site in C (TypeError:" in err[0]
    assert "Python names new call sites from now on" in err[0]
    assert callsite.NativeMiss.in_c is False
    with_template(callsite._rules.template)  # the rules set again: C names misses again
    assert callsite.NativeMiss.in_c is True
    assert callsite.NativeMiss.places == {}
    lines[2]()
    assert "line2 c_fault.py:10" in {site.name for site in callsite.sites.values()}
    assert ("c_fault", filename) in callsite.NativeMiss.places  # named by C again
