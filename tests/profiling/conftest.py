"""Fixtures shared by the profiling tests."""

import pytest

from kname import callsite
from kname.config import DEFAULT_FORMAT


@pytest.fixture
def named():
    """Launches named for this test (every frame's file a user's), the caches cleared after."""
    callsite.configure((), DEFAULT_FORMAT, 1, False)
    yield
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()
