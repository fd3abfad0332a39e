"""The launch census: how many launches each call site made."""

from __future__ import annotations

from kname import callsite


def names() -> dict[str, int]:
    """{call-site name: launches} for every site that launched, in first-seen order."""
    counts: dict[str, int] = dict(callsite.retired_launches)
    for site in sorted(list(callsite.sites.values()), key=lambda s: s.order):
        launches = site.launches()
        if launches:
            counts[site.name] = counts.get(site.name, 0) + launches
    return counts


def write_at_exit(destination: str) -> None:
    """At exit, print the census to stderr (`-`) or write it as JSON to `destination`."""
    import atexit
    import sys

    def write() -> None:
        if destination == "-":
            for name, launches in names().items():
                print(f"{launches:>8}  {name}", file=sys.stderr)

    atexit.register(write)
