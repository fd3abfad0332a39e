"""kname.importable: modules found without running them, and the name a misspelling meant."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname import importable

# Module names as packages have them: lower-case words, some with an underscore.
parts = st.from_regex(r"\A[a-z][a-z_]{2,11}\Z")
# A tree of module names: each dotted name -> the names of its submodules ("": the top level).
trees = st.recursive(
    st.just({}),
    lambda children: st.dictionaries(parts, children, min_size=1, max_size=5),
    max_leaves=25,
)


def children_of(tree: dict) -> dict[str, set[str]]:
    """{parent dotted name: its children's names}, "" for the top level."""
    found: dict[str, set[str]] = {}

    def visit(prefix: str, node: dict) -> None:
        found[prefix] = set(node)
        for name, below in node.items():
            visit(f"{prefix}.{name}" if prefix else name, below)

    visit("", tree)
    return found


def lookup(tree: dict):
    known = children_of(tree)
    return lambda parent: known.get(parent, set())


def dotted_names(tree: dict) -> list[str]:
    return [name for name in children_of(tree) if name]


@given(trees, st.data())
def test_a_name_that_is_there_is_its_own_nearest(tree, data) -> None:
    names = dotted_names(tree)
    if names:
        name = data.draw(st.sampled_from(names))
        assert importable.nearest_name(name, lookup(tree)) == name


@given(trees, st.lists(parts, min_size=1, max_size=4).map(".".join))
def test_a_nearest_name_is_always_there_with_as_many_parts(tree, name) -> None:
    nearest = importable.nearest_name(name, lookup(tree))
    assert nearest is None or nearest in dotted_names(tree)
    assert nearest is None or nearest.count(".") == name.count(".")


@given(st.lists(st.from_regex(r"\A[a-z]{5,12}\Z"), min_size=1, max_size=4), st.data())
def test_a_chain_of_modules_is_found_from_one_letter_off_in_each_part(chain, data) -> None:
    tree: dict = {}
    node = tree
    for part in chain:
        node = node.setdefault(part, {})
    misspelled = []
    for part in chain:
        at = data.draw(st.integers(0, len(part) - 1))
        letter = data.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz"))
        misspelled.append(part[:at] + letter + part[at + 1 :])
    assert importable.nearest_name(".".join(misspelled), lookup(tree)) == ".".join(chain)


def test_one_letter_off_in_a_name_of_one_repeated_letter_is_found() -> None:
    """difflib's greedy blocks put `vavaa` at 0.6 of `vaaaa` (hypothesis found it)."""
    tree = {"aaaaa": {"vaaaa": {}}}
    assert importable.nearest_name("aaaaa.vavaa", lookup(tree)) == "aaaaa.vaaaa"


@given(st.from_regex(r"\A[a-z]{1,12}\Z"), st.from_regex(r"\A[a-z]{1,12}\Z"))
def test_likeness_is_one_for_the_same_name_and_symmetric_in_its_edits(a, b) -> None:
    assert importable.likeness(a, a) == 1.0
    assert 0.0 <= importable.likeness(a, b) <= 1.0
    assert importable._edits(a, b) == importable._edits(b, a)
    assert (importable._edits(a, b) == 0) == (a == b)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`loud`, a package whose import raises: finding must never run it."""
    (tmp_path / "loud").mkdir()
    (tmp_path / "loud" / "__init__.py").write_text("raise RuntimeError('loud was imported')\n")
    (tmp_path / "loud" / "engine.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("loud", "loud.engine"):
        sys.modules.pop(name, None)


def test_a_submodule_is_found_without_importing_its_package(package) -> None:
    spec = importable.find("loud.engine")
    assert spec is not None and spec.origin == str(package / "loud" / "engine.py")
    assert importable.find("loud.engin") is None
    assert importable.nearest("loud.engin") == "loud.engine"
    assert importable.nearest("lod.engine") == "loud.engine"
    assert "loud" not in sys.modules


def test_directories_given_first_are_looked_in_first(tmp_path, package) -> None:
    elsewhere = tmp_path / "app"
    (elsewhere / "loud").mkdir(parents=True)
    (elsewhere / "loud" / "__init__.py").write_text("")
    (elsewhere / "loud" / "other.py").write_text("")
    assert importable.find("loud.other") is None
    spec = importable.find("loud.other", first=[str(elsewhere)])
    assert spec is not None and spec.origin == str(elsewhere / "loud" / "other.py")


def test_a_module_is_not_a_package() -> None:
    assert importable.find("json.decoder") is not None
    assert importable.find("json.decoder.x") is None
    assert importable.find("no_such_module_here") is None


def test_a_namespace_directory_given_first_yields_to_a_package_on_sys_path(tmp_path, package):
    (tmp_path / "app" / "loud").mkdir(parents=True)  # no __init__.py: a namespace portion
    spec = importable.find("loud", first=[str(tmp_path / "app")])
    assert spec is not None and spec.origin == str(package / "loud" / "__init__.py")
