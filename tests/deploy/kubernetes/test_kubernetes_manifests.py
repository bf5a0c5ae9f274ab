"""deploy/kubernetes's manifests: valid against the Kubernetes API schemas, and consistent with
the group config they carry (the Service it names, the Secret's keys, the journal's mount).

Schema validation is kubernetes_validate in strict mode (unknown fields are errors) against
KUBERNETES_VERSION, the version deploy/kubernetes/README.md states.
"""
import copy
import pathlib
import re

import pytest
import yaml

from kubernetes_deploy import (MANIFEST_DIR, bin_dir, find, literal_env, load_documents,
                               manifest_files, pod_spec, run, weightcast_containers)

KUBERNETES_VERSION = "1.32"
README = MANIFEST_DIR / "README.md"


@pytest.fixture(scope="module")
def kubernetes_validate():
    return pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes_validate is not installed (cmake/setup_python_env.sh build/pyenv)")


def all_documents():
    return [(p.name, i, d) for p in manifest_files() for i, d in enumerate(load_documents(p))]


@pytest.mark.parametrize(
    "file_name,index,document", all_documents(),
    ids=[f"{f}#{i}-{d['kind']}/{d['metadata']['name']}" for f, i, d in all_documents()])
def test_manifest_validates(kubernetes_validate, file_name, index, document):
    validated = kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    assert validated == KUBERNETES_VERSION


def test_every_expected_kind_is_there(documents):
    kinds = sorted({d["kind"] for _, d in documents})
    assert kinds == sorted({"Namespace", "ConfigMap", "Secret", "PersistentVolumeClaim", "Service",
                            "StatefulSet", "Job", "DaemonSet"})


def _container(doc, name):
    spec = pod_spec(doc)
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


def _misspell_pod_spec_field(doc):
    spec = pod_spec(doc)
    spec["contaners"] = spec.pop("containers")


def _misspell_container_field(doc):
    c = _container(doc, "weightcast")
    c["imagePullPolcy"] = c.pop("imagePullPolicy")


def _string_replicas(doc):
    doc["spec"]["replicas"] = "one"


def _unquoted_env_number(doc):
    # A realistic slip: `value: 2` instead of `value: "2"`; env values are strings.
    env = _container(doc, "weightcast")["env"]
    next(e for e in env if e["name"] == "WEIGHTCAST_RANK_OFFSET")["value"] = 2


def _access_modes_not_a_list(doc):
    doc["spec"]["accessModes"] = "ReadWriteMany"


@pytest.mark.parametrize("file_name,kind,breakage", [
    ("coordinator.yaml", "StatefulSet", _misspell_pod_spec_field),
    ("engine-statefulset.yaml", "StatefulSet", _misspell_container_field),
    ("engine-statefulset.yaml", "StatefulSet", _string_replicas),
    ("engine-job.yaml", "Job", _unquoted_env_number),
    ("journal-pvc.yaml", "PersistentVolumeClaim", _access_modes_not_a_list),
], ids=lambda v: getattr(v, "__name__", v))
def test_validator_rejects_a_broken_copy(kubernetes_validate, file_name, kind, breakage):
    """The validator bites: the manifest passes, a copy with one mistake does not."""
    original = next(d for d in load_documents(MANIFEST_DIR / file_name) if d["kind"] == kind)
    kubernetes_validate.validate(original, KUBERNETES_VERSION, strict=True)
    broken = copy.deepcopy(original)
    breakage(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


# --- the group config and what it names ---------------------------------------------------

def group_config_text(documents):
    return find(documents, "ConfigMap", "weightcast-group")[0]["data"]["group.yaml"]


@pytest.fixture
def group_config(documents):
    return yaml.safe_load(group_config_text(documents))


def test_group_config_loads(documents, weightcast_cli, tmp_path):
    """weightcast's own loader accepts the ConfigMap's config (no key file needs to exist)."""
    path = tmp_path / "group.yaml"
    path.write_text(group_config_text(documents))
    result = run([weightcast_cli, "group", "ranks", "--config", path])
    assert result.returncode == 0, result.stderr
    roles = [line.split()[1] for line in result.stdout.splitlines()]
    assert roles.count("coordinator") == 1 and "publisher" in roles, result.stdout


def test_coordinator_endpoint_names_the_service(documents, group_config):
    statefulset = find(documents, "StatefulSet", "weightcast-coordinator")[0]
    assert statefulset["spec"]["replicas"] == 1
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    (container,) = weightcast_containers(statefulset)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    endpoint = group_config["coordinator"]["endpoint"]
    match = re.fullmatch(r"tcp://([^:]+):(\d+)", endpoint)
    assert match, endpoint
    host, port = match.group(1), int(match.group(2))
    services = [s for s in find(documents, "Service") if s["metadata"]["name"] == host.split(".")[0]]
    assert services, f"{endpoint} names no Service of the manifests"
    service = services[0]
    assert host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert service["spec"].get("clusterIP") != "None", "ranks connect through a virtual IP"
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert ports[service_port["targetPort"]] == port
    # The Service's name resolves to an address no pod interface has: bind all of them.
    assert group_config["coordinator"]["bind"] == f"tcp://*:{port}"


def _volume_mounts(workload, container, volume_filter):
    """mountPath -> volumeMount of the container's mounts whose volume volume_filter accepts."""
    volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])
            if volume_filter(volumes[m["name"]])}


def _workloads(documents):
    return [d for _, d in documents if d["kind"] in ("StatefulSet", "Job", "DaemonSet")]


def test_every_workload_runs_weightcast(documents):
    for workload in _workloads(documents):
        assert weightcast_containers(workload), workload["metadata"]["name"]


def test_secret_keys_match_the_key_files(documents, group_config):
    curve = group_config["curve"]
    key_files = {curve["coordinator_key_file"], curve["observer_key_file"]}
    key_files |= {r["key_file"] for r in group_config["ranks"]}
    key_dirs = {str(pathlib.PurePosixPath(k).parent) for k in key_files}
    assert len(key_dirs) == 1, key_dirs
    (key_dir,) = key_dirs

    secret = find(documents, "Secret")[0]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    assert secret_keys == {pathlib.PurePosixPath(k).name for k in key_files}
    for workload in _workloads(documents):
        for container in weightcast_containers(workload):
            mounts = _volume_mounts(workload, container, lambda v: v.get("secret", {}).get(
                "secretName") == secret["metadata"]["name"])
            assert list(mounts) == [key_dir], (workload["metadata"]["name"], container["name"])


def test_journal_is_read_write_many_and_mounted_at_its_root(documents, group_config):
    (claim,) = find(documents, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    root = group_config["journal"]["root"]
    assert root.startswith("/"), "relative roots resolve against the ConfigMap's read-only mount"
    for workload in _workloads(documents):
        for container in weightcast_containers(workload):
            mounts = _volume_mounts(workload, container, lambda v: v.get(
                "persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"])
            assert list(mounts) == [root], (workload["metadata"]["name"], container["name"])
            assert not mounts[root].get("readOnly", False)


def test_config_and_entrypoint_are_mounted_where_they_are_read(documents):
    configmap = find(documents, "ConfigMap", "weightcast-group")[0]
    for workload in _workloads(documents):
        for container in weightcast_containers(workload):
            config = pathlib.PurePosixPath(literal_env(container)["WEIGHTCAST_CONFIG"])
            mounts = _volume_mounts(workload, container, lambda v: v.get("configMap", {}).get(
                "name") == configmap["metadata"]["name"])
            assert list(mounts) == [str(config.parent)]
            assert config.name in configmap["data"]
            script = pathlib.PurePosixPath(container["command"][-1])
            mounts = _volume_mounts(workload, container, lambda v: v.get("configMap", {}).get(
                "name") == "weightcast-entrypoint")
            assert list(mounts) == [str(script.parent)] and script.name == "weightcast-entrypoint"


def test_every_object_is_in_the_namespace_the_endpoint_names(documents, group_config):
    (namespace,) = find(documents, "Namespace")
    name = namespace["metadata"]["name"]
    assert f".{name}.svc.cluster.local:" in group_config["coordinator"]["endpoint"]
    for file_name, d in documents:
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == name, (file_name, d["metadata"]["name"])


# --- the README's procedure ---------------------------------------------------------------

def test_readme_names_every_manifest_and_the_objects_it_creates(documents):
    text = README.read_text()
    for path in manifest_files() + [MANIFEST_DIR / "weightcast-entrypoint"]:
        assert f"`{path.name}`" in text, path.name
    secret = find(documents, "Secret")[0]["metadata"]["name"]
    assert f"create secret generic {secret} --from-file=g/keys" in text
    assert "create configmap weightcast-group --from-file=group.yaml=g/group.yaml" in text
    assert "create configmap weightcast-entrypoint" in text


def test_readme_procedure_makes_a_config_shaped_like_the_configmap(
        documents, group_config, weightcast_cli, tmp_path):
    """Runs the README's `group init` and `sed` lines, then compares with the ConfigMap."""
    block = re.search(r"```sh\n(weightcast group init.*?)```", README.read_text(), re.S).group(1)
    commands = block.split("\nkubectl")[0]
    env = {"PATH": f"{bin_dir()}:/usr/bin:/bin"}
    result = run(["bash", "-euo", "pipefail", "-c", f"cd {tmp_path}\n{commands}"], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    made = yaml.safe_load((tmp_path / "g" / "group.yaml").read_text())

    assert made["coordinator"] == group_config["coordinator"]
    assert made["journal"]["root"] == group_config["journal"]["root"]
    assert made["curve"]["coordinator_key_file"] == group_config["curve"]["coordinator_key_file"]
    assert [(r["rank"], r["role"], r["key_file"]) for r in made["ranks"]] == \
        [(r["rank"], r["role"], r["key_file"]) for r in group_config["ranks"]]
    # The Secret made from g/keys holds exactly the files the config names.
    key_names = {pathlib.PurePosixPath(r["key_file"]).name for r in made["ranks"]}
    key_names.add(pathlib.PurePosixPath(made["curve"]["observer_key_file"]).name)
    assert {p.name for p in (tmp_path / "g" / "keys").iterdir()} == key_names
