"""The changes kname makes to other libraries, as records it can undo and redo.

Every change is a Patch (an attribute set on a module or class), a Rebind (a name bound in
several modules, re-exports included) or a HookPatch (a callback added to a library's hook
chain). Both have `apply()` and `restore()`, and each acts only while the
place is still as kname left it: someone who replaced kname's object since (or a reload) wins.
disable() restores them all, enable() applies them again, uninstall() restores them for good.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

WRAPPER_MARK = "_kname_wrapper"
_ABSENT = object()  # the attribute was inherited, not in the owner's own __dict__


class Change(Protocol):
    def apply(self) -> None: ...
    def restore(self) -> None: ...


class Patch:
    """`owner.attribute` replaced by `replacement`.

    `original` is what the owner holds without kname: by default what its __dict__ holds now
    (nothing, for an inherited attribute). A module that bound kname's wrapper by name from a
    module kname had changed passes the unwrapped original explicitly.
    """

    __slots__ = ("attribute", "original", "owner", "replacement")

    def __init__(
        self, owner: Any, attribute: str, replacement: Any, original: Any = _ABSENT
    ) -> None:
        self.owner = owner
        self.attribute = attribute
        self.original = vars(owner).get(attribute, _ABSENT) if original is _ABSENT else original
        self.replacement = replacement

    def apply(self) -> None:
        """Put the replacement in place, if the attribute is still the original."""
        current = vars(self.owner).get(self.attribute, _ABSENT)
        if current is self.original:
            setattr(self.owner, self.attribute, self.replacement)

    def restore(self) -> None:
        """Put the original back (or take the attribute away again), if ours is still there."""
        if vars(self.owner).get(self.attribute, _ABSENT) is not self.replacement:
            return
        if self.original is _ABSENT:
            delattr(self.owner, self.attribute)
        else:
            setattr(self.owner, self.attribute, self.original)

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__qualname__", getattr(self.owner, "__name__", self.owner))
        return f"Patch({owner}.{self.attribute})"


class Rebind:
    """`replacement` bound under `attribute` wherever the modules named hold `original`.

    For a name that other modules take by `from ... import` (re-exports): those imported later
    take `replacement` from a module kname changed, so restore() looks at every named module
    then, not only at those that held `original` when kname applied the change.
    """

    __slots__ = ("attribute", "modules", "original", "replacement")

    def __init__(self, modules: tuple[str, ...], attribute: str, original: Any, replacement: Any):
        self.modules = modules
        self.attribute = attribute
        self.original = original
        self.replacement = replacement

    def apply(self) -> None:
        self._swap(self.original, self.replacement)

    def restore(self) -> None:
        self._swap(self.replacement, self.original)

    def _swap(self, old: Any, new: Any) -> None:
        for name in self.modules:
            module = sys.modules.get(name)
            if module is not None and vars(module).get(self.attribute) is old:
                setattr(module, self.attribute, new)

    def __repr__(self) -> str:
        return f"Rebind({self.attribute} in {', '.join(self.modules)})"


class HookPatch:
    """`callback` added to a hook chain that has `add`, `remove` and a `calls` list (Triton's)."""

    __slots__ = ("callback", "chain")

    def __init__(self, chain: Any, callback: Any) -> None:
        self.chain = chain
        self.callback = callback

    def apply(self) -> None:
        if self.callback not in self.chain.calls:
            self.chain.add(self.callback)

    def restore(self) -> None:
        if self.callback in self.chain.calls:
            self.chain.remove(self.callback)

    def __repr__(self) -> str:
        return f"HookPatch({getattr(self.callback, '__qualname__', self.callback)})"


def mark_wrapper(wrapper: Any, original: Any) -> Any:
    """Give `wrapper` the original's name, module and doc, `__wrapped__`, and kname's mark."""
    wrapper.__wrapped__ = original
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(original, attribute, None)
        if value is not None or attribute == "__doc__":
            setattr(wrapper, attribute, value)
    setattr(wrapper, WRAPPER_MARK, True)
    return wrapper


def is_wrapper(candidate: Any) -> bool:
    """Whether `candidate` (or the function in a staticmethod/classmethod) is kname's."""
    return getattr(unbound(candidate), WRAPPER_MARK, False) is True


def resolve(module: Any, qualname: str) -> tuple[Any, str]:
    """(owner, attribute) for a dotted `qualname` inside `module`; AttributeError if missing.

    The error names the object that lacks the attribute (`module fakegpu`, `class
    fakegpu.Stream`) and the nearest name it does have.
    """
    *path, attribute = qualname.split(".")
    owner: Any = module
    for depth, part in enumerate(path):
        if not hasattr(owner, part):
            raise AttributeError(_missing(module, path[:depth], owner, part))
        owner = getattr(owner, part)
    if not hasattr(owner, attribute):
        raise AttributeError(_missing(module, path, owner, attribute))
    return owner, attribute


def _missing(module: Any, found: list[str], owner: Any, name: str) -> str:
    """`module fakegpu has no attribute 'lauch' (did you mean 'launch'?)`: `owner`, reached
    from `module` through the attributes `found`, has no `name`."""
    # Named from the module's __name__ and the parts found, never from getattr(owner,
    # "__qualname__"): a module's __getattr__ (a lazy loader's) answers any name.
    where = ".".join([_module_name(module), *found])
    kind = "module" if not found else "class" if isinstance(owner, type) else "object"
    return f"{kind} {where} has no attribute {name!r}{_nearest(owner, name)}"


def _module_name(module: Any) -> str:
    name = vars(module).get("__name__") if hasattr(module, "__dict__") else None
    return name if isinstance(name, str) else type(module).__name__


def _nearest(owner: Any, name: str) -> str:
    import difflib  # only for a name that is not there: no start-up pays for it

    try:
        names = [n for n in dir(owner) if isinstance(n, str) and not n.startswith("__")]
    except Exception:  # a broken __dir__: no suggestion
        return ""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def defined(owner: Any, attribute: str) -> Any:
    """`owner.attribute` as the class defines it: a staticmethod or classmethod stays one.

    getattr() would give a plain function or a method bound to the base class, and a wrapper of
    that, set on a subclass, would be called with the instance as an extra argument.
    """
    import inspect  # deferred: 3 ms of every KNAME=1 start-up (with ast, dis, tokenize)

    found = inspect.getattr_static(owner, attribute, None)
    if isinstance(found, (staticmethod, classmethod)):
        return found
    return getattr(owner, attribute)


def unbound(original: Any) -> Any:
    """The function inside a staticmethod/classmethod, else `original` itself."""
    if isinstance(original, (staticmethod, classmethod)):
        return original.__func__
    return original


def rebind(original: Any, wrapper: Any) -> Any:
    """`wrapper` as the same kind of attribute as `original` (staticmethod, classmethod, plain)."""
    if isinstance(original, staticmethod):
        return staticmethod(wrapper)
    if isinstance(original, classmethod):
        return classmethod(wrapper)
    return wrapper
