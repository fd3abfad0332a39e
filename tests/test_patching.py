"""kname.patching: the change records (Patch, Rebind, HookPatch) applied and restored, each only
while the place is still as kname left it, and the helpers that make and find wrappers.

In-process, on modules and classes made here; install()'s use of the records on a stand-in GPU
library is tested in test_lifecycle.py, CuPy's and Triton's in their test_targets_*.py.
"""

from __future__ import annotations

import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname.patching import (
    HookPatch,
    Patch,
    Rebind,
    defined,
    is_wrapper,
    mark_wrapper,
    rebind,
    resolve,
    unbound,
)


def original(*args):
    """The library's launch."""
    return args


def replacement(*args):
    return ("kname", *args)


def someone_elses(*args):
    return ("other", *args)


class Base:
    def launch(self):
        return "base"

    @staticmethod
    def static_launch():
        return "static"

    @classmethod
    def class_launch(cls):
        return cls


class Child(Base):
    pass


def a_module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    vars(module).update(attributes)
    return module


# --------------------------------------------------------------------------
# Patch
# --------------------------------------------------------------------------


def test_a_patch_puts_its_replacement_in_and_restore_puts_the_identical_original_back() -> None:
    module = a_module("gpulib", launch=original)
    patch = Patch(module, "launch", replacement)
    patch.apply()
    assert module.launch is replacement
    patch.restore()
    assert module.launch is original


def test_a_patch_applied_or_restored_twice_is_applied_or_restored_once() -> None:
    module = a_module("gpulib", launch=original)
    patch = Patch(module, "launch", replacement)
    patch.apply()
    patch.apply()
    assert module.launch is replacement
    patch.restore()
    patch.restore()
    assert module.launch is original


def test_a_patch_of_an_inherited_method_sets_it_on_the_subclass_and_deletes_it_again() -> None:
    class Sub(Base):
        pass

    patch = Patch(Sub, "launch", replacement)
    assert patch.original is not Base.launch  # nothing of Sub's own to put back
    patch.apply()
    assert vars(Sub)["launch"] is replacement
    assert Base.launch is not replacement
    patch.restore()
    assert "launch" not in vars(Sub)
    assert Sub().launch() == "base"


def test_a_patch_leaves_alone_what_someone_else_put_there_before_it_was_applied() -> None:
    module = a_module("gpulib", launch=original)
    patch = Patch(module, "launch", replacement)
    module.launch = someone_elses  # another tool, or a reload, after the record was made
    patch.apply()
    assert module.launch is someone_elses


def test_restore_leaves_alone_what_someone_else_put_there_after_kname() -> None:
    module = a_module("gpulib", launch=original)
    patch = Patch(module, "launch", replacement)
    patch.apply()
    module.launch = someone_elses
    patch.restore()
    assert module.launch is someone_elses


def test_a_patch_given_the_original_applies_over_that_original_only() -> None:
    # A module that bound kname's wrapper by name from a module kname had changed: what it holds
    # now is kname's wrapper, and what it held without kname is `original`.
    module = a_module("reexporter", launch=replacement)
    patch = Patch(module, "launch", replacement, original=original)
    patch.restore()
    assert module.launch is original
    patch.apply()
    assert module.launch is replacement


# One step of a program around a Patch: kname applies or restores it, or the program (another
# tool, a reload) puts an object of its own in the attribute.
STEPS = st.lists(st.sampled_from(["apply", "restore", "foreign"]), max_size=12)


@given(steps=STEPS)
def test_a_patch_never_replaces_what_it_did_not_put_there_and_restores_what_it_replaced(
    steps: list[str],
) -> None:
    module = a_module("gpulib", launch=original)
    patch = Patch(module, "launch", replacement)
    expected = original
    for step in steps:
        if step == "foreign":
            expected = module.launch = types.SimpleNamespace()
        elif step == "apply" and expected is original:
            expected = replacement
        elif step == "restore" and expected is replacement:
            expected = original
        getattr(patch, step, lambda: None)()
        assert module.launch is expected


def test_a_patch_says_which_attribute_it_changes() -> None:
    assert repr(Patch(Base, "launch", replacement)) == "Patch(Base.launch)"
    assert repr(Patch(a_module("gpulib", launch=1), "launch", 2)) == "Patch(gpulib.launch)"


# --------------------------------------------------------------------------
# Rebind
# --------------------------------------------------------------------------


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch):
    """Put modules into sys.modules for one test: add("name", launch=...) -> the module."""

    def add(name: str, **attributes) -> types.ModuleType:
        module = a_module(name, **attributes)
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return add


def test_a_rebind_binds_the_replacement_in_every_named_module_that_holds_the_original(
    modules,
) -> None:
    core = modules("kname_test_core", launch=original)
    reexport = modules("kname_test_reexport", launch=original)
    own = modules("kname_test_own", launch=someone_elses)  # a function of its own by that name
    names = ("kname_test_core", "kname_test_reexport", "kname_test_own", "kname_test_absent")
    change = Rebind(names, "launch", original, replacement)
    change.apply()
    assert (core.launch, reexport.launch, own.launch) == (replacement, replacement, someone_elses)
    assert "kname_test_absent" not in sys.modules
    change.restore()
    assert (core.launch, reexport.launch, own.launch) == (original, original, someone_elses)


def test_restore_of_a_rebind_also_reaches_a_module_imported_after_it_was_applied(modules) -> None:
    core = modules("kname_test_core", launch=original)
    change = Rebind(("kname_test_core", "kname_test_late"), "launch", original, replacement)
    change.apply()
    late = modules("kname_test_late", launch=core.launch)  # `from core import launch`, now
    assert late.launch is replacement
    change.restore()
    assert (core.launch, late.launch) == (original, original)


def test_restore_of_a_rebind_leaves_a_module_where_someone_else_bound_the_name(modules) -> None:
    core = modules("kname_test_core", launch=original)
    change = Rebind(("kname_test_core",), "launch", original, replacement)
    change.apply()
    core.launch = someone_elses
    change.restore()
    assert core.launch is someone_elses


def test_a_rebind_says_the_name_and_the_modules() -> None:
    change = Rebind(("a", "b.c"), "launch", original, replacement)
    assert repr(change) == "Rebind(launch in a, b.c)"


# --------------------------------------------------------------------------
# HookPatch
# --------------------------------------------------------------------------


class HookChain:
    """A hook chain as Triton's (`knobs.runtime.launch_enter_hook`): add, remove and calls."""

    def __init__(self, *calls) -> None:
        self.calls = list(calls)

    def add(self, callback) -> None:
        self.calls.append(callback)

    def remove(self, callback) -> None:
        self.calls.remove(callback)


def test_a_hook_patch_adds_its_callback_once_and_removes_it_keeping_the_others() -> None:
    chain = HookChain(someone_elses)
    change = HookPatch(chain, replacement)
    change.apply()
    change.apply()
    assert chain.calls == [someone_elses, replacement]
    change.restore()
    change.restore()
    assert chain.calls == [someone_elses]


def test_a_hook_patch_restored_after_someone_removed_its_callback_does_nothing() -> None:
    chain = HookChain()
    change = HookPatch(chain, replacement)
    change.apply()
    chain.calls.clear()  # the library reset its hooks
    change.restore()
    assert chain.calls == []
    assert repr(change) == "HookPatch(replacement)"


# --------------------------------------------------------------------------
# Wrappers: marked, recognised, the same kind of attribute as the original
# --------------------------------------------------------------------------


def test_a_marked_wrapper_has_the_originals_name_module_and_doc_and_wraps_it() -> None:
    def wrapper(*args):
        return original(*args)

    assert mark_wrapper(wrapper, original) is wrapper
    assert (wrapper.__name__, wrapper.__qualname__) == ("original", "original")
    assert (wrapper.__module__, wrapper.__doc__) == (__name__, "The library's launch.")
    assert wrapper.__wrapped__ is original
    assert is_wrapper(wrapper) and not is_wrapper(original)


def test_a_marked_wrapper_of_an_original_without_doc_has_no_doc() -> None:
    def wrapper():
        """kname's own doc, which must not show as the library's."""

    mark_wrapper(wrapper, someone_elses)
    assert wrapper.__doc__ is None


@pytest.mark.parametrize("kind", [staticmethod, classmethod])
def test_a_wrapper_inside_a_static_or_class_method_is_recognised(kind) -> None:
    wrapper = mark_wrapper(lambda *args: args, original)
    assert is_wrapper(kind(wrapper))
    assert unbound(kind(wrapper)) is wrapper
    assert not is_wrapper(kind(original))


@pytest.mark.parametrize(
    ("attribute", "kind"),
    [("launch", types.FunctionType), ("static_launch", staticmethod),
     ("class_launch", classmethod)],
)  # fmt: skip
def test_a_wrapper_set_on_a_subclass_is_called_as_the_original_would_be(attribute, kind) -> None:
    found = defined(Child, attribute)  # inherited: as Base defines it, a staticmethod stays one
    assert type(found) is kind
    calls = []

    def wrapper(*args):
        calls.append(args)
        return unbound(found)(*args)

    class Patched(Child):
        pass

    Patch(Patched, attribute, rebind(found, mark_wrapper(wrapper, unbound(found)))).apply()
    instance = Patched()
    getattr(instance, attribute)()
    # The instance for a method, the class for a classmethod, nothing for a staticmethod.
    assert calls == [
        {"launch": (instance,), "static_launch": (), "class_launch": (Patched,)}[attribute]
    ]


# --------------------------------------------------------------------------
# resolve: a dotted name inside a module, and what to say when it is not there
# --------------------------------------------------------------------------


def test_resolve_finds_the_owner_and_attribute_of_a_dotted_name() -> None:
    module = a_module("gpulib", Stream=Base, launch=original)
    assert resolve(module, "launch") == (module, "launch")
    assert resolve(module, "Stream.static_launch") == (Base, "static_launch")


@pytest.mark.parametrize(
    ("qualname", "said"),
    [
        ("lauch", "module gpulib has no attribute 'lauch' (did you mean 'launch'?)"),
        ("nothing_like_it", "module gpulib has no attribute 'nothing_like_it'"),
        ("Strem.launch", "module gpulib has no attribute 'Strem' (did you mean 'Stream'?)"),
        ("Stream.lanch", "class gpulib.Stream has no attribute 'lanch' (did you mean 'launch'?)"),
        ("stream.lanch", "object gpulib.stream has no attribute 'lanch' (did you mean 'launch'?)"),
    ],
)
def test_resolve_names_what_lacks_the_attribute_and_the_nearest_name(qualname, said) -> None:
    module = a_module("gpulib", Stream=Base, stream=Base(), launch=original)
    with pytest.raises(AttributeError) as missing:
        resolve(module, qualname)
    assert str(missing.value) == said


def test_resolve_names_a_lazy_module_by_its_name_and_survives_a_broken_dir() -> None:
    class Lazy(types.ModuleType):
        def __getattr__(self, name):  # a lazy loader: answers any name...
            if name == "__qualname__":
                return "a lazily loaded attribute"
            raise AttributeError(name)

        def __dir__(self):  # ...and a __dir__ that fails
            raise RuntimeError("broken")

    with pytest.raises(AttributeError) as missing:
        resolve(Lazy("lazylib"), "launch")
    assert str(missing.value) == "module lazylib has no attribute 'launch'"
