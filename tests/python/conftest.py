"""Fixtures of the Python package's tests (run by CTest: tests/CMakeLists.txt sets PYTHONPATH to
build/python and WEIGHTCASTD to the built daemon).

Groups run on loopback with a free port and the journal in pytest's tmp_path; every wait in a
test is bounded (WAIT seconds)."""

import os
import shutil

import pytest

import weightcast
import weightcast.group

WAIT = 30.0  # seconds: the bound of any wait a test expects to succeed


@pytest.fixture
def make_group(tmp_path):
    """make_group(subscribers=1, **LocalGroup options) -> a started LocalGroup, closed after."""
    groups = []

    def make(subscribers=1, **kw):
        g = weightcast.group.LocalGroup(tmp_path / f"group{len(groups)}", subscribers, **kw)
        groups.append(g)
        return g

    yield make
    for g in groups:
        g.close()
    if os.environ.get("WEIGHTCAST_KEEP_TEST_DIRS"):
        return
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def endpoints():
    """A list that tests append endpoints to; each is closed after the test, in reverse."""
    opened = []
    yield opened
    for e in reversed(opened):
        e.close()
