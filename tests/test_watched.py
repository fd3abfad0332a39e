"""kname._watched: objects and classes that make the C hot path forget what its cached launches
remember, before each change to them and again after it.

In-process, with a recorder in place of the extension's forget_launches; that a cached launch
then reads a changed site or switch afresh is tested on the C wrapper in test_native.py.
"""

from __future__ import annotations

import pytest

from kname import _watched


class Site(_watched.Watched):
    __slots__ = ("name",)


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> tuple[Site, list[tuple[str, bool]]]:
    """A watched site named "before", and what each forget_launches() call saw: the site's name,
    and whether its class had an attribute `extra`."""
    made = Site()
    made.name = "before"
    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(_watched, "_forget_launches", None)  # put back after the test
    _watched.forget_with(
        lambda: seen.append((getattr(made, "name", "<none>"), "extra" in vars(Site)))
    )
    return made, seen


def test_setting_an_attribute_forgets_before_and_after_the_change(site) -> None:
    watched, seen = site
    watched.name = "after"
    assert seen == [("before", False), ("after", False)]


def test_deleting_an_attribute_forgets_before_and_after_the_change(site) -> None:
    watched, seen = site
    del watched.name
    assert seen == [("before", False), ("<none>", False)]


def test_a_change_to_the_class_forgets_before_and_after_it(site) -> None:
    _, seen = site
    Site.extra = 1
    del Site.extra
    assert seen == [("before", False), ("before", True), ("before", True), ("before", False)]


def test_before_the_extension_is_imported_a_change_forgets_nothing(monkeypatch) -> None:
    monkeypatch.setattr(_watched, "_forget_launches", None)
    site = Site()
    site.name = "changed"  # no forget_launches to call, and no error
    _watched.forget()
    assert site.name == "changed"
