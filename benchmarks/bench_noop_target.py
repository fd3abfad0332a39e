"""A launch function that does nothing: configured as a kname target, it isolates kname's cost.

The CPU benchmark installs kname with `targets=["bench_noop_target:launch"]`.
"""


def launch(*args):
    """Stands in for a GPU library's launch call; returns at once."""
    return None
