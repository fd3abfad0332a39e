"""`{function}` is the same on every supported Python: qualified names where 3.10 has no
`co_qualname`, list/set/dict comprehensions folded into the code they are written in as 3.12+
runs them (PEP 709), generator expressions named as themselves everywhere.

Programs are generated from chains of nested scopes, named in this process, then run under every
Python 3.10 to 3.13 found here (kname's pure-Python naming imported from the checkout; those
interpreters may lack wrapt and numba, so frames are named through `kname.site_name`, not a
launch), and the names compared.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO, line_of

from kname.naming import fold_comprehensions, function_name

VERSIONS = ("3.10", "3.11", "3.12", "3.13")
THIS_VERSION = "{}.{}".format(*sys.version_info[:2])
INLINED = ("listcomp", "setcomp", "dictcomp")
EXPRESSIONS = ("lambda", "genexpr", *INLINED)
CODE_NAMES = {kind: f"<{kind}>" for kind in EXPRESSIONS}


# --------------------------------------------------------------------------
# The rule, modelled on CPython's compiler (compiler_set_qualname)
# --------------------------------------------------------------------------


def qualname_of(scopes: list[tuple[str, str]], inlined: tuple[str, ...] = ()) -> str:
    """The qualified name CPython gives code nested as `scopes` ((kind, name), outermost first):
    a function's or lambda's children are under `<locals>`, a class's or comprehension's are not;
    scopes of the kinds in `inlined` are no scopes at all (comprehensions on 3.12+)."""
    name, parent = "", ""
    for kind, scope_name in scopes:
        if kind in inlined:
            continue
        if not name:
            name = scope_name
        elif parent in ("def", "lambda"):
            name = f"{name}.<locals>.{scope_name}"
        else:
            name = f"{name}.{scope_name}"
        parent = kind
    return name or "<module>"


identifiers = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)
statement_scopes = st.one_of(
    st.tuples(st.just("def"), identifiers.map("f_{}".format)),
    st.tuples(st.just("class"), identifiers.map("C_{}".format)),
)
expression_scopes = st.sampled_from(EXPRESSIONS).map(lambda kind: (kind, CODE_NAMES[kind]))
# Functions and classes hold anything; a lambda or comprehension holds only expressions.
scope_chains = st.builds(
    lambda outer, inner: outer + inner,
    st.lists(statement_scopes, max_size=3),
    st.lists(expression_scopes, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(scope_chains)
def test_folding_a_name_gives_the_name_python_3_12_gives_the_same_code(scopes) -> None:
    assert fold_comprehensions(qualname_of(scopes)) == qualname_of(scopes, inlined=INLINED)


@settings(max_examples=300, deadline=None)
@given(scope_chains)
def test_a_folded_name_has_no_comprehension_and_folds_to_itself(scopes) -> None:
    folded = fold_comprehensions(qualname_of(scopes))
    assert not any(f"<{kind}>" in folded.split(".") for kind in INLINED)
    assert fold_comprehensions(folded) == folded
    assert not folded.endswith(".<locals>")


# --------------------------------------------------------------------------
# Programs of nested scopes, named in this process
# --------------------------------------------------------------------------

LEAF = "record(sys._getframe())"


def statement(scopes: list[tuple[str, str]], leaf: str = LEAF) -> list[str]:
    """Lines that run `leaf` inside code nested as `scopes`, each scope entered once."""
    if not scopes:
        return [leaf]
    (kind, name), rest = scopes[0], scopes[1:]
    if kind == "def":
        return [f"def {name}():", *indented(statement(rest, leaf)), f"{name}()"]
    if kind == "class":
        return [f"class {name}:", *indented(statement(rest, leaf))]
    return [expression(scopes, leaf)]


def expression(scopes: list[tuple[str, str]], leaf: str) -> str:
    if not scopes:
        return leaf
    kind, inner = scopes[0][0], expression(scopes[1:], leaf)
    return {
        "lambda": f"(lambda: {inner})()",
        "genexpr": f"list({inner} for _ in range(1))",
        "listcomp": f"[{inner} for _ in range(1)]",
        # (x, 0)[1]: a set member or dict key must be hashable, whatever `inner` makes
        "setcomp": f"{{({inner}, 0)[1] for _ in range(1)}}",
        "dictcomp": f"{{({inner}, 0)[1]: 0 for _ in range(1)}}",
    }[kind]


def indented(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@settings(max_examples=200, deadline=None)
@given(scope_chains)
def test_code_nested_in_any_scopes_is_named_as_python_3_12_names_it(scopes) -> None:
    frames = []
    source = "\n".join(statement(scopes)) + "\n"
    exec(compile(source, "<generated>", "exec"), {"sys": sys, "record": frames.append})
    [frame] = frames
    assert function_name(frame) == qualname_of(scopes, inlined=INLINED)


class Solver:
    BODY = [function_name(sys._getframe()) for _ in range(1)].pop()

    def step(self) -> dict[str, str]:
        here = sys._getframe
        return {
            "method": function_name(here()),
            "list": [function_name(here()) for _ in range(1)].pop(),
            "set": next(iter({function_name(here()) for _ in range(1)})),
            "dict": next(iter({function_name(here()): 0 for _ in range(1)})),
            "list in list": [[function_name(here()) for _ in "a"] for _ in "b"].pop().pop(),
            "generator": next(function_name(here()) for _ in range(1)),
            "generator in list": [next(function_name(here()) for _ in "a") for _ in "b"].pop(),
            "lambda in list": [(lambda: function_name(here()))() for _ in range(1)].pop(),
        }


MODULE_LEVEL = [function_name(sys._getframe()) for _ in range(1)].pop()


def test_comprehensions_are_named_after_the_code_they_are_written_in() -> None:
    assert Solver().step() == {
        "method": "Solver.step",
        "list": "Solver.step",
        "set": "Solver.step",
        "dict": "Solver.step",
        "list in list": "Solver.step",
        "generator": "Solver.step.<locals>.<genexpr>",
        "generator in list": "Solver.step.<locals>.<genexpr>",
        "lambda in list": "Solver.step.<locals>.<lambda>",
    }
    assert Solver.BODY == "Solver"
    assert MODULE_LEVEL == "<module>"


# --------------------------------------------------------------------------
# Every Python here, compared
# --------------------------------------------------------------------------

# Prints the name of each leaf through kname's naming (the default KNAME_FORMAT, with up to two
# callers), and what the leaf says its function is.
PRELUDE = """\
import json, sys
sys.path.insert(0, sys.argv[1])
import kname
from kname import callsite
callsite.configure(emit_nvtx=False)
def record(name, expected=None):
    print(json.dumps([name, expected]))
"""
LEAF_NAMED = "record(kname.site_name(depth=3))"

FIXED = """\
class Solver:
    body = [record(NAMED, "Solver") for _ in range(1)]
    generated = list(record(NAMED, "Solver.<genexpr>") for _ in range(1))

    def step(self):
        record(NAMED, "Solver.step")
        [record(NAMED, "Solver.step") for _ in range(1)]  # in a list
        {record(NAMED, "Solver.step") for _ in range(1)}
        {record(NAMED, "Solver.step"): 0 for _ in range(1)}
        [[record(NAMED, "Solver.step") for _ in range(1)] for _ in range(1)]
        list(record(NAMED, "Solver.step.<locals>.<genexpr>") for _ in range(1))
        [list(record(NAMED, "Solver.step.<locals>.<genexpr>") for _ in "a") for _ in range(1)]
        [(lambda: record(NAMED, "Solver.step.<locals>.<lambda>"))() for _ in range(1)]

        def inner():
            class Local:
                def method(self):
                    return record(NAMED, "Solver.step.<locals>.inner.<locals>.Local.method")

            return Local().method()

        inner()


def declared_global():
    global made_global

    def made_global():
        return record(NAMED, "made_global")

    return made_global()


async def coroutine():
    return [record(NAMED, "coroutine") for _ in range(1)]


def decorated(function):
    return function


@decorated
def twice():
    return (lambda: lambda: record(NAMED, "twice.<locals>.<lambda>.<locals>.<lambda>"))()()


def train():
    Solver().step()  # train calls step


[record(NAMED, "<module>") for _ in range(1)]
train()  # the module calls train
declared_global()
twice()
import asyncio
asyncio.run(coroutine())
""".replace("NAMED", "kname.site_name(depth=3)")


def write_fixed(tmp_path: Path) -> Path:
    program = tmp_path / "solver.py"
    program.write_text(PRELUDE + FIXED)
    return program


def test_this_python_names_code_in_every_kind_of_scope_by_the_rule(tmp_path: Path) -> None:
    [printed] = names_under([sys.executable], write_fixed(tmp_path))
    source = PRELUDE + FIXED
    text = dict(enumerate(source.splitlines(), 1))
    leaves = [n for n, line in text.items() if "record(kname" in line]
    at = []
    for name, expected in printed:  # in the order they ran
        function, _, line = name.split(" < ")[0].rpartition(" solver.py:")
        assert function == expected and f'"{expected}"' in text[int(line)], name
        at.append(int(line))
    assert sorted(at) == leaves
    # A comprehension's frame (3.10, 3.11) is not a caller: its caller is the step's.
    in_a_list = line_of(source, "# in a list")
    callers = f"train solver.py:{line_of(source, '# train calls step')} < <module> solver.py:"
    assert [name for name, _ in printed if f":{in_a_list} <" in name] == [
        f"Solver.step solver.py:{in_a_list} < {callers}{line_of(source, '# the module calls')}"
    ]


@functools.cache
def interpreter(version: str) -> str | None:
    """A Python `version` ("3.10") that runs here: this one, one pyenv installed, or one on PATH."""
    if version == THIS_VERSION:
        return sys.executable
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    for candidate in [*reversed(found), shutil.which(f"python{version}")]:
        if candidate is None:
            continue
        try:
            done = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


def names_under(pythons: list[str], program: Path) -> list[list[str]]:
    """The names each of `pythons` prints running `program`, run side by side."""
    command = ["-I", "-B", str(program), str(REPO)]  # -I: no PYTHON* variables, no user site
    running = [
        subprocess.Popen(
            [python, *command], cwd=program.parent, text=True, stdout=PIPE, stderr=PIPE
        )
        for python in pythons
    ]
    outputs = []
    for python, process in zip(pythons, running, strict=True):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, f"{python}: {err}"
        assert "kname:" not in err, f"{python}: {err}"  # no fault said while naming
        outputs.append([json.loads(line) for line in out.splitlines()])
    return outputs


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != THIS_VERSION])
def test_every_python_names_the_fixed_program_as_this_one_does(version, tmp_path) -> None:
    other = interpreter(version)
    if other is None:
        pytest.skip(f"Python {version} is not installed here")
    here, there = names_under([sys.executable, other], write_fixed(tmp_path))
    assert there == here
    assert len(here) == FIXED.count("record(")


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chains=st.lists(scope_chains, min_size=1, max_size=6))
def test_every_python_names_generated_programs_alike(chains, tmp_path_factory) -> None:
    pythons = [p for p in map(interpreter, VERSIONS) if p is not None]
    if len(pythons) < 2:
        pytest.skip("no Python other than this one is installed here")
    program = tmp_path_factory.mktemp("generated") / "generated.py"
    body = [line for chain in chains for line in statement(chain, LEAF_NAMED)]
    program.write_text(PRELUDE + "\n".join(body) + "\n")
    here, *others = names_under(pythons, program)
    assert len(here) == len(chains)
    for python, there in zip(pythons[1:], others, strict=True):
        assert there == here, python


def test_every_python_names_functions_past_the_256th_constant_alike(tmp_path: Path) -> None:
    pythons = [p for p in map(interpreter, VERSIONS) if p is not None]
    if len(pythons) < 2:
        pytest.skip("no Python other than this one is installed here")
    # Past 256 constants, an instruction's argument takes an EXTENDED_ARG prefix (3.10 reads
    # the names from the bytecode).
    methods = [f"    def m{n}(self):\n        {LEAF_NAMED}" for n in range(300)]
    calls = "for n in range(300):\n    getattr(Big(), f'm{n}')()\n"
    program = tmp_path / "big.py"
    program.write_text(PRELUDE + "class Big:\n" + "\n".join(methods) + "\n" + calls)
    here, *others = names_under(pythons, program)
    assert [name.split()[0] for name, _ in here] == [f"Big.m{n}" for n in range(300)]
    for python, there in zip(pythons[1:], others, strict=True):
        assert there == here, python
