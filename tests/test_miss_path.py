"""The first launch from a new line (the cache miss): the work it does, counted, not timed.

A new line in a file kname has seen redoes none of the file's work (its path rules, its cell
check), a new file parses its own name only (not every path root again), generated-code rules
are asked only once their library is imported, and a name's identifier is made only for a
renamed kernel. The Python calls a miss makes are counted (sys.setprofile), a bound that a
slower miss path would cross; benchmarks/miss_path.py times it.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_callsite import Sandbox
from test_callsite import sandbox as sandbox
from test_lifecycle import python_calls_of

from kname import callsite, cells, naming, paths

pytestmark = pytest.mark.launches

# Python calls (kname's and the standard library's) of a first launch from a new line in a file
# seen before, beyond its cached launch: 61 (C) / 62 (Python) at the branch point, 29 / 30 after;
# 30 / 31 at 811d06d, then 12 on the C path, which names the common miss itself (issue 43).
MAX_CALLS_NEW_LINE = 34
MAX_CALLS_NEW_LINE_IN_C = 14


def new_lines(sandbox: Sandbox, module: str, count: int):
    """`count` functions of `module`, each launching from its own line."""
    source = "import fakegpu\n" + "".join(
        f"\ndef line{n}():\n    return fakegpu.launch({n})\n" for n in range(count)
    )
    sandbox.write(module, source)
    loaded = sandbox.load(module)
    return [getattr(loaded, f"line{n}") for n in range(count)]


def test_a_new_line_in_a_file_seen_before_makes_few_python_calls(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, hot_path: str
) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # a shell's cells: more calls
    sandbox.install()
    first, *others = new_lines(sandbox, "seen_file", 6)
    first()  # the file is now seen
    missed = [python_calls_of(line) for line in others]
    cached = [python_calls_of(line) for line in others]  # the launch itself, the line's call
    added = [miss - hit for miss, hit in zip(missed, cached, strict=True)]
    bound = MAX_CALLS_NEW_LINE_IN_C if hot_path == "native" else MAX_CALLS_NEW_LINE
    assert max(added) <= bound, added


def test_a_new_line_in_a_file_seen_before_redoes_none_of_its_path_work(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # no shell: no code is a cell's
    sandbox.install()
    first, second = new_lines(sandbox, "seen_path", 2)
    first()
    asked = []
    monkeypatch.setattr(paths, "short_path", lambda *args: asked.append(args))
    monkeypatch.setattr(cells, "cell_place", lambda frame: asked.append(frame))
    second()
    assert asked == []
    assert "line1 seen_path.py:7" in sandbox_names()


def sandbox_names() -> set[str]:
    import kname

    return set(kname.names())


def test_a_new_file_parses_its_own_name_not_every_root_again(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = [f"/roots/root{n}" for n in range(50)]
    monkeypatch.setattr(sys, "path", [*sys.path, *roots])
    monkeypatch.setattr(naming, "_roots", None)
    sandbox.install()
    parse, parsed = paths._parse, []

    def counting(filename):
        parsed.append(filename)
        return parse(filename)

    monkeypatch.setattr(paths, "_parse", counting)
    for module in ("new_file_a", "new_file_b", "new_file_c"):
        new_lines(sandbox, module, 1)[0]()
    mine = [name for name in parsed if name.endswith(("new_file_a.py", "new_file_b.py"))]
    assert len(mine) == 2
    # Each root parsed once for all three files, at most (the first file's naming).
    assert len(parsed) <= 3 + len(naming.path_roots()), len(parsed)


def test_generated_code_rules_are_asked_only_once_their_library_is_imported(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []

    def rule(code, module):
        asked.append(code.co_name)
        return False

    sandbox.install()
    rules = callsite._rules
    monkeypatch.setattr(callsite, "_rules", rules.__class__(**{
        **{f: getattr(rules, f) for f in ("skip", "template", "depth", "emit_nvtx",
                                          "library_modules", "site_calls", "user",
                                          "compile_modules")},
        "generated": (("kname_test_maker", rule),),
    }))  # fmt: skip
    # What the C wrapper reads of the rules, as configure() would set it (callsite._native_rules).
    monkeypatch.setattr(callsite.NativeMiss, "makers", ("kname_test_maker",))
    before, after = new_lines(sandbox, "generated_rules", 2)
    before()
    assert asked == []  # no library that makes code is imported: nothing to ask
    monkeypatch.setitem(sys.modules, "kname_test_maker", sys)
    after()
    assert asked == ["line1"]


def test_a_site_whose_kernel_is_not_renamed_gets_no_identifier_made(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox.install()
    made = []
    identifier_name = naming.identifier_name
    monkeypatch.setattr(
        naming, "identifier_name", lambda *args: made.append(args) or identifier_name(*args)
    )
    new_lines(sandbox, "not_renamed", 1)[0]()
    assert made == []
    site = next(site for site in callsite.sites.values() if "not_renamed" in site.name)
    assert site.identifier == ""


MODULE_PART = st.sampled_from(["a", "ab", "torch", "jax", "x_1", "numba", "cuda", "_c"])
MODULES = st.lists(MODULE_PART, min_size=1, max_size=4).map(".".join)


@given(module=MODULES, prefixes=st.lists(MODULES, max_size=6).map(tuple))
def test_a_module_is_under_a_prefix_exactly_when_one_of_its_dotted_prefixes_is_one(
    module: str, prefixes: tuple[str, ...]
) -> None:
    by_set = not callsite._dotted_prefixes(module).isdisjoint(frozenset(prefixes))
    assert by_set == callsite._matches(module, prefixes)
