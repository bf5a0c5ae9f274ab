"""Fixtures of the deploy/kubernetes tests (kubernetes_deploy.py holds the plain helpers)."""
import os
import pathlib
import shutil

import pytest

from kubernetes_deploy import bin_dir, load_documents, manifest_files


@pytest.fixture(scope="session")
def weightcast_cli() -> pathlib.Path:
    cli = bin_dir() / "weightcast"
    if not os.access(cli, os.X_OK):
        pytest.skip(f"{cli} is not built (set WEIGHTCAST_BIN to the directory holding weightcast)")
    return cli


@pytest.fixture(scope="session")
def posix_sh() -> str:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh on PATH to run weightcast-entrypoint with")
    return sh


@pytest.fixture(scope="session")
def documents():
    """(file name, document) for every document of every manifest."""
    return [(p.name, d) for p in manifest_files() for d in load_documents(p)]
