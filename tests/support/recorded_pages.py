"""Documents made from the profile recorded on the H200, for the page tests and the screenshots
(docs/make_screenshots.py).

tests/data/profile_h200.json holds the streams of tests/gpu/profile_demo.py (20 iterations,
KNAME_DEPTH=1); tests/data/source_of_profile_h200.json the demo's source as it was then, kept as
a saved document keeps it. `h200_document(depth=3)` names each launch as KNAME_DEPTH=3 names it
in that demo: the step function's line, then `Workload.run`'s loop and `timed`, which calls it
(the thread's launches have no user caller: the thread runs `thread_work` itself).
`h200_census()` is the census of the same launches, a row per line and kernel.
`h200_halves()` is the recording cut in two at its middle launch: the first ten iterations and
the last ten, two real profiles of one program to compare.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kname.documents.build import census_document, profile_document
from kname.documents.schema import validate
from kname.documents.sources import SOURCES
from kname.profiling.join import replay
from kname.profiling.records import Streams, load_streams

DATA = Path(__file__).parent.parent / "data"
FIXTURE = DATA / "profile_h200.json"
SOURCE = DATA / "source_of_profile_h200.json"
CALLERS = " < Workload.run profile_demo.py:208 < timed profile_demo.py:498"


def h200_streams(depth: int = 1) -> Streams:
    """The recorded streams, named as KNAME_DEPTH=`depth` (1 or 3) names them."""
    streams = load_streams(str(FIXTURE))
    if depth == 3:
        streams.launches = [
            dataclasses.replace(launch, site=launch.site + CALLERS)
            if not launch.site.startswith("thread_work ")
            else launch
            for launch in streams.launches
        ]
    return streams


def h200_document(depth: int = 1, streams: Streams | None = None) -> dict[str, Any]:
    """The profile of `streams` (default: the whole recording) with the demo's source."""
    profile = replay(streams or h200_streams(depth))
    sources = json.loads(SOURCE.read_text(encoding="utf-8"))[SOURCES]
    return validate(profile_document(profile) | {SOURCES: sources}, FIXTURE.name)


def h200_census(depth: int = 1) -> dict[str, Any]:
    """The launch census of the recording: its launches per site and kernel, with the source."""
    profile = h200_document(depth)
    rows = {
        (site["name"], kernel, ""): counted["launches"]
        for site in profile["sites"]
        for kernel, counted in site["kernels"].items()
    }
    return validate(census_document(rows) | {SOURCES: profile[SOURCES]}, FIXTURE.name)


def h200_halves() -> tuple[dict[str, Any], dict[str, Any]]:
    """The first and the second half of the recording (by launch time), each a profile."""
    streams = h200_streams()
    starts = sorted(launch.start for launch in streams.launches)
    middle = starts[len(starts) // 2]
    halves = []
    for first in (True, False):
        launches = [launch for launch in streams.launches if (launch.start < middle) == first]
        ids = {launch.correlation_id for launch in launches}
        half = dataclasses.replace(
            streams,
            launches=launches,
            activities=[record for record in streams.activities if record.correlation_id in ids],
            externals=[e for e in streams.externals if e.correlation_id in ids],
        )
        halves.append(h200_document(streams=half))
    return halves[0], halves[1]
