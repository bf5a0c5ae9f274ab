"""What the deploy/kubernetes tests share: where the repository, its manifests and the built
binaries are, and the manifests parsed (conftest.py holds the fixtures).

The binaries' directory is WEIGHTCAST_BIN (CTest sets it to the build tree's src/), else the
repository's build/src.
"""
import os
import pathlib
import subprocess

import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
MANIFEST_DIR = REPO_ROOT / "deploy" / "kubernetes"
ENTRYPOINT = MANIFEST_DIR / "weightcast-entrypoint"
# Where the manifests mount the entrypoint ConfigMap; the weightcast containers run it from here.
ENTRYPOINT_MOUNT = "/opt/weightcast/entrypoint"
# Every bounded subprocess in these tests gets this long; the commands take well under a second.
COMMAND_TIMEOUT_S = 60


def bin_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("WEIGHTCAST_BIN", REPO_ROOT / "build" / "src"))


def manifest_files():
    return sorted(MANIFEST_DIR.glob("*.yaml"))


def load_documents(path: pathlib.Path):
    """The non-empty YAML documents of one manifest file."""
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(documents, kind, name=None):
    found = [d for _, d in documents
             if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert found, f"no {kind}{' ' + name if name else ''} among the manifests"
    return found


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def weightcast_containers(workload):
    """The containers (init containers included: native sidecars) that run the entrypoint."""
    spec = pod_spec(workload)
    return [c for c in spec.get("initContainers", []) + spec.get("containers", [])
            if any(ENTRYPOINT_MOUNT in part for part in c.get("command", []))]


def literal_env(container):
    """The container's env entries that hold a literal value."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def run(args, env=None, timeout=COMMAND_TIMEOUT_S):
    return subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True,
                          timeout=timeout)
