"""deploy/kubernetes/weightcast-entrypoint: the orchestrator's index plus an offset becomes the
rank weightcastd is started with, and anything missing or invalid stops it with exit 2 and a
message naming what.

The script runs under `sh` (dash on Debian: the POSIX shell a minimal image has), with the real
`weightcast` CLI checking ranks against the config and a fake weightcastd that prints its
arguments and leaves a marker, so a refused start is seen not to have started anything.
"""
import os

import pytest

from kubernetes_deploy import ENTRYPOINT, find, literal_env, run, weightcast_containers


@pytest.fixture
def group_config(documents, tmp_path):
    """The ConfigMap's group config, as a file (ranks 0-7; hosts gpu-node-a/b for 6 and 7)."""
    path = tmp_path / "config" / "group.yaml"
    path.parent.mkdir()
    path.write_text(find(documents, "ConfigMap", "weightcast-group")[0]["data"]["group.yaml"])
    return path


@pytest.fixture
def fake_weightcastd(tmp_path):
    marker = tmp_path / "weightcastd-ran"
    fake = tmp_path / "bin" / "weightcastd"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@"\ntouch {marker}\n')
    fake.chmod(0o755)
    return fake, marker


@pytest.fixture
def entrypoint(posix_sh, weightcast_cli, group_config, fake_weightcastd):
    """entrypoint(env, *args) -> CompletedProcess, in an environment holding only `env`, PATH
    and the binaries' locations."""
    fake, _ = fake_weightcastd

    def start(env, *args):
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "WEIGHTCASTD": str(fake),
                "WEIGHTCAST_CLI": str(weightcast_cli), "WEIGHTCAST_CONFIG": str(group_config)}
        full.update(env)
        return run([posix_sh, ENTRYPOINT, *args], env=full)
    return start


@pytest.mark.parametrize("env,rank", [
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "0",
      "WEIGHTCAST_RANK_OFFSET": "1"}, 1),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "1",
      "WEIGHTCAST_RANK_OFFSET": "4"}, 5),
    ({"WEIGHTCAST_RANK_FROM": "pod-index", "WEIGHTCAST_POD_INDEX": "0"}, 0),
    ({"WEIGHTCAST_RANK_FROM": "pod-index", "WEIGHTCAST_POD_INDEX": "1",
      "WEIGHTCAST_RANK_OFFSET": "2"}, 3),
    ({"WEIGHTCAST_RANK_FROM": "pod-name", "WEIGHTCAST_POD_NAME": "weightcast-engine-1",
      "WEIGHTCAST_RANK_OFFSET": "2"}, 3),
    ({"WEIGHTCAST_RANK_FROM": "node", "WEIGHTCAST_NODE_NAME": "gpu-node-b"}, 7),
    ({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "6"}, 6),
    ({"WEIGHTCAST_RANK_FROM": "pod-index", "WEIGHTCAST_POD_INDEX": "3",
      "WEIGHTCAST_RANK_OFFSET": "2", "WEIGHTCAST_EXPECT_ROLE": "subscriber"}, 5),
], ids=lambda v: v.get("WEIGHTCAST_RANK_FROM", "") if isinstance(v, dict) else str(v))
def test_index_plus_offset_is_the_rank(entrypoint, group_config, fake_weightcastd, env, rank):
    result = entrypoint(env, "--log-level", "info")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--config", str(group_config), "--rank", str(rank),
                                     "--log-level", "info"]
    assert fake_weightcastd[1].exists()
    printed = entrypoint(env, "--print-rank")
    assert (printed.returncode, printed.stdout) == (0, f"{rank}\n"), printed.stderr


@pytest.mark.parametrize("env,message", [
    ({}, "WEIGHTCAST_RANK_FROM is not set"),
    ({"WEIGHTCAST_RANK_FROM": "ordinal"}, "WEIGHTCAST_RANK_FROM='ordinal' is not one of"),
    ({"WEIGHTCAST_RANK_FROM": "job-index"}, "JOB_COMPLETION_INDEX is not set"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": ""},
     "JOB_COMPLETION_INDEX is empty"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "-1"},
     "JOB_COMPLETION_INDEX='-1' is not a non-negative decimal integer"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "1.5"},
     "JOB_COMPLETION_INDEX='1.5' is not a non-negative decimal integer"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "07"}, "leading zero"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "99999999999"},
     "larger than the largest rank 4294967295"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "4294967295",
      "WEIGHTCAST_RANK_OFFSET": "1"}, "= 4294967296 is larger than the largest rank"),
    ({"WEIGHTCAST_RANK_FROM": "job-index", "JOB_COMPLETION_INDEX": "0",
      "WEIGHTCAST_RANK_OFFSET": "two"}, "WEIGHTCAST_RANK_OFFSET='two'"),
    ({"WEIGHTCAST_RANK_FROM": "pod-index"}, "WEIGHTCAST_POD_INDEX is not set"),
    ({"WEIGHTCAST_RANK_FROM": "pod-name"}, "WEIGHTCAST_POD_NAME is not set"),
    ({"WEIGHTCAST_RANK_FROM": "pod-name", "WEIGHTCAST_POD_NAME": "engine"},
     "WEIGHTCAST_POD_NAME='engine' does not end in -ORDINAL"),
    ({"WEIGHTCAST_RANK_FROM": "pod-name", "WEIGHTCAST_POD_NAME": "engine-7d9fb-x2k4p"},
     "'x2k4p' is not a non-negative decimal integer"),
    ({"WEIGHTCAST_RANK_FROM": "node"}, "WEIGHTCAST_NODE_NAME is not set"),
    ({"WEIGHTCAST_RANK_FROM": "node", "WEIGHTCAST_NODE_NAME": "cpu-node-9"},
     "has host 'cpu-node-9'"),
    ({"WEIGHTCAST_RANK_FROM": "node", "WEIGHTCAST_NODE_NAME": "gpu-node-a",
      "WEIGHTCAST_RANK_OFFSET": "1"}, "takes no offset"),
    ({"WEIGHTCAST_RANK_FROM": "fixed"}, "WEIGHTCAST_RANK is not set"),
    ({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "8"},
     "rank 8 (WEIGHTCAST_RANK=8) is not in"),
    ({"WEIGHTCAST_RANK_FROM": "pod-index", "WEIGHTCAST_POD_INDEX": "2",
      "WEIGHTCAST_RANK_OFFSET": "2", "WEIGHTCAST_EXPECT_ROLE": "publisher"},
     "rank 4 (WEIGHTCAST_POD_INDEX=2 + WEIGHTCAST_RANK_OFFSET=2) is a subscriber"),
    ({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "0",
      "WEIGHTCAST_CONFIG": "/nonexistent/group.yaml"},
     "group config '/nonexistent/group.yaml' does not exist"),
    ({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "0",
      "WEIGHTCASTD": "/nonexistent/weightcastd"}, "weightcastd '/nonexistent/weightcastd'"),
    ({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "0",
      "WEIGHTCAST_CLI": "/nonexistent/weightcast"}, "the weightcast CLI '/nonexistent/weightcast'"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_missing_or_invalid_input_is_named(entrypoint, fake_weightcastd, env, message):
    result = entrypoint(env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("weightcast-entrypoint: ") and message in result.stderr, \
        result.stderr
    assert not fake_weightcastd[1].exists(), "weightcastd started although the rank was refused"


def test_a_config_the_loader_refuses_is_reported(entrypoint, group_config, fake_weightcastd):
    group_config.write_text(group_config.read_text().replace("role: publisher", "role: trainer"))
    result = entrypoint({"WEIGHTCAST_RANK_FROM": "fixed", "WEIGHTCAST_RANK": "0"})
    assert result.returncode == 2
    assert "is not a rank role" in result.stderr and "refused the config" in result.stderr
    assert not fake_weightcastd[1].exists()


# What the orchestrator puts into each downward-API variable the manifests use, for the pod
# with index `i` of workload `name` on node `node`.
DOWNWARD_API = {
    "metadata.labels['apps.kubernetes.io/pod-index']": lambda name, i, node: str(i),
    "metadata.name": lambda name, i, node: f"{name}-{i}",
    "spec.nodeName": lambda name, i, node: node,
}


def _pods(workload, config_hosts):
    """(index, node) of every pod the workload would start; a DaemonSet's on the config's
    hosts, one per node."""
    kind, spec = workload["kind"], workload["spec"]
    if kind == "StatefulSet":
        return [(i, "any-node") for i in range(spec["replicas"])]
    if kind == "Job":
        assert spec["completionMode"] == "Indexed"
        return [(i, "any-node") for i in range(spec["completions"])]
    return [(None, host) for host in config_hosts]


def test_the_workloads_cover_every_rank_once(documents, entrypoint, group_config, weightcast_cli):
    """Each pod of each workload, given what the orchestrator gives it, runs a distinct rank of
    the role its container expects, and together they run every rank of the config."""
    listed = run([weightcast_cli, "group", "ranks", "--config", group_config]).stdout.split("\n")
    roles = {int(f[0]): f[1] for f in (line.split() for line in listed) if f}
    hosts = [f[2] for f in (line.split() for line in listed) if f and f[2] != "-"]
    seen = {}
    for workload in [d for _, d in documents if d["kind"] in ("StatefulSet", "Job", "DaemonSet")]:
        name = workload["metadata"]["name"]
        (container,) = weightcast_containers(workload)
        assert "WEIGHTCAST_EXPECT_ROLE" in literal_env(container), name
        for index, node in _pods(workload, hosts):
            env = literal_env(container)
            env["WEIGHTCAST_CONFIG"] = str(group_config)  # the mount's path, on this machine
            for e in container["env"]:
                if "valueFrom" in e:
                    env[e["name"]] = DOWNWARD_API[e["valueFrom"]["fieldRef"]["fieldPath"]](
                        name, index, node)
            if workload["kind"] == "Job":
                env["JOB_COMPLETION_INDEX"] = str(index)
            result = entrypoint(env, "--print-rank")
            assert result.returncode == 0, (name, index, node, result.stderr)
            rank = int(result.stdout)
            assert rank not in seen, f"{name} pod {index} runs rank {rank}, as {seen.get(rank)} does"
            assert roles[rank] == env["WEIGHTCAST_EXPECT_ROLE"]
            seen[rank] = f"{name} pod {index}"
    assert sorted(seen) == sorted(roles)


def test_a_daemonset_pod_on_an_unlisted_node_is_refused(documents, entrypoint):
    (daemonset,) = find(documents, "DaemonSet")
    env = literal_env(weightcast_containers(daemonset)[0])
    env.pop("WEIGHTCAST_CONFIG")
    env["WEIGHTCAST_NODE_NAME"] = "unlisted-node"
    result = entrypoint(env, "--print-rank")
    assert result.returncode == 2 and "has host 'unlisted-node'" in result.stderr


def test_the_script_is_executable_and_posix(posix_sh):
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    result = run([posix_sh, "-n", ENTRYPOINT])
    assert result.returncode == 0, result.stderr
