"""pytest fixtures of the multi-host tests: a rank group on a fresh NetBed per test, torn down
on every exit path (the bed's close() also runs at interpreter exit and on SIGTERM/SIGINT)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import group_bed  # noqa: E402
import netbed  # noqa: E402


@pytest.fixture
def make_group(tmp_path_factory):
    """make_group(**GroupBed options) -> a GroupBed whose hosts are torn down after the test.
    Skips, saying why, where no bed can be built (not root, no iproute2)."""
    reason = netbed.why_unavailable()
    if reason is not None:
        pytest.skip(reason)
    weightcastd, weightcast = group_bed.binaries()
    for b in (weightcastd, weightcast):
        if not os.access(b, os.X_OK):
            pytest.skip("%s is not built (set WEIGHTCAST_BIN)" % b)
    made = []

    def make(**options):
        work = str(tmp_path_factory.mktemp("group"))
        g = group_bed.GroupBed(work, **options)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()
