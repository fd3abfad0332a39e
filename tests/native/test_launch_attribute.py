"""A launch whose kernel is an attribute of its first argument (numba-cuda's launch configuration,
new at each launch, and its `dispatcher`; Triton's bound `run` and its `__self__`): once its site
is known, the C wrapper launches it as a cached launch, as one whose kernel is the argument
itself (issue 43: those launches took every step, the site's fields and calls read again, at
every launch, on numba-cuda's and Triton's lines alike). What it names and counts is unchanged.
"""

from __future__ import annotations

import sys

import pytest

from kname import callsite, launch


class Dispatcher:
    """The kernel a launch configuration launches."""

    def __init__(self, name: str = "kernel") -> None:
        self.name = name


class Configuration:
    """numba-cuda's `kernel[grid, block]`: a new object at each launch, its dispatcher the same."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher


def wrapped(kernel_of: launch.KernelArg, seen: list[int]):
    """A launch wrapper whose launch notes the references its site has while it runs."""

    def original(*args):
        sites = list(callsite.sites.values())
        if len(sites) == 1:
            seen.append(sys.getrefcount(sites[0]))
        return args

    callsite.configure()
    spec = launch.LaunchSpec("test", lambda kernel: kernel.name, kernel_of)
    return launch.make_launch_wrapper(original, spec, launch.Switch())


@pytest.mark.launches
@pytest.mark.parametrize("attribute", [None, "dispatcher"], ids=["the argument", "its attribute"])
def test_a_kernel_read_from_an_argument_is_launched_as_a_cached_launch(hot_path, attribute) -> None:
    """The first launches from a line find their site (made, then found and remembered) and hold
    it while the launch runs; the cached launches after them hold no reference to it (they read
    what their entry remembers)."""
    if hot_path != "native":
        pytest.skip("the cached launch is the C wrapper's")
    seen: list[int] = []
    wrapper = wrapped(launch.KernelArg(0, attribute), seen)
    dispatcher = Dispatcher()
    for _ in range(5):
        argument = dispatcher if attribute is None else Configuration(dispatcher)
        wrapper(argument, 1)  # one line: one site
    made, found, *cached = seen
    assert made == found and cached == [found - 1] * 3  # held by the first two alone
    (site,) = callsite.sites.values()
    assert site.launches() == 5


@pytest.mark.launches
def test_a_launch_of_an_attribute_that_names_another_kernel_finds_that_kernels_site(
    hot_path,
) -> None:
    """The kernel read anew at each launch picks the entry: two dispatchers launched from one
    line through configurations are two sites, each counted as launched."""
    seen: list[int] = []
    wrapper = wrapped(launch.KernelArg(0, "dispatcher"), seen)
    first, second = Dispatcher("first"), Dispatcher("second")
    for dispatcher in (first, second, first, first, second):
        wrapper(Configuration(dispatcher), 1)  # one line
    launched = {site.kernel: site.launches() for site in callsite.sites.values()}
    assert launched == {"first": 3, "second": 2}
