"""deploy/systemd/weightcastd@.service: `systemd-analyze verify` accepts the unit (and its
instances) and refuses broken copies, and the instance name reaches weightcastd as --rank.

systemd-analyze checks syntax, values and that ExecStart's program exists; it does not show
the command line an instance would run. expand_exec_start() below applies the parts of
systemd's rules the unit uses (Environment=, EnvironmentFile=, %i, ${VAR} as one word, $VAR
split at whitespace) to run that command line here: a model of systemd's expansion, checked
against the unit's own text.

The binaries' directory is WEIGHTCAST_BIN (CTest sets it), else the repository's build/src.
"""
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
UNIT = REPO_ROOT / "deploy" / "systemd" / "weightcastd@.service"
ENV_EXAMPLE = REPO_ROOT / "deploy" / "systemd" / "weightcastd.env"
BIN_DIR = pathlib.Path(os.environ.get("WEIGHTCAST_BIN", REPO_ROOT / "build" / "src"))
WEIGHTCASTD = BIN_DIR / "weightcastd"
COMMAND_TIMEOUT_S = 60  # every subprocess here is bounded; each takes about a second


def service_settings(text):
    """(key, value) of the [Service] section, in order."""
    section, settings = None, []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings.append((key, value))
    return settings


@pytest.fixture(scope="module")
def systemd_analyze():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    probe = subprocess.run([tool, "--version"], capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT_S)
    if probe.returncode != 0:
        pytest.skip(f"systemd-analyze cannot run in this container: {probe.stderr.strip()}")
    return tool


@pytest.fixture
def unit_copy(tmp_path):
    """A copy of the unit in its own directory whose WEIGHTCASTD default is the built binary."""
    if not os.access(WEIGHTCASTD, os.X_OK):
        pytest.skip(f"{WEIGHTCASTD} is not built (set WEIGHTCAST_BIN)")
    text = UNIT.read_text()
    default = "Environment=WEIGHTCASTD=/usr/local/bin/weightcastd"
    assert default in text
    path = tmp_path / "units" / UNIT.name
    path.parent.mkdir()
    path.write_text(text.replace(default, f"Environment=WEIGHTCASTD={WEIGHTCASTD}"))
    return path


def verify(tool, unit_dir, unit_name):
    """systemd-analyze verify's exit status and the lines it printed about this unit (it warns
    without failing about unknown keys and unparsable values; those count as failures here)."""
    result = subprocess.run([tool, "verify", "--man=no", unit_name], cwd=unit_dir,
                            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    about = [line for line in (result.stdout + result.stderr).splitlines()
             if "weightcastd@" in line]
    return result.returncode, about


@pytest.mark.parametrize("name", ["weightcastd@.service", "weightcastd@0.service",
                                  "weightcastd@17.service"])
def test_verify_accepts_the_unit_and_its_instances(systemd_analyze, unit_copy, name):
    if name != unit_copy.name:
        shutil.copy(unit_copy, unit_copy.parent / name)
    assert verify(systemd_analyze, unit_copy.parent, name) == (0, [])


@pytest.mark.parametrize("old,new", [
    ("ExecStart=/usr/bin/env ", "ExecStart=/nonexistent/bin/env "),
    ("Restart=on-failure", "Restart=sometimes"),
    ("NoNewPrivileges=yes", "NoNewPrivilege=yes"),
    ("[Service]", "[Servce]"),
], ids=["missing-program", "bad-value", "misspelled-key", "misspelled-section"])
def test_verify_refuses_a_broken_copy(systemd_analyze, unit_copy, old, new):
    text = unit_copy.read_text()
    assert old in text
    unit_copy.write_text(text.replace(old, new, 1))
    assert verify(systemd_analyze, unit_copy.parent, unit_copy.name) != (0, [])


def test_the_instance_is_the_rank():
    (exec_start,) = [v for k, v in service_settings(UNIT.read_text()) if k == "ExecStart"]
    words = shlex.split(exec_start)
    assert words[words.index("--rank") + 1] == "%i"
    assert words[words.index("--config") + 1] == "${WEIGHTCAST_CONFIG}"
    # %i is the only specifier the command line uses, so the instance is the only input.
    assert re.findall(r"%.", exec_start) == ["%i"]


def expand_exec_start(unit_text, instance, env_files):
    """The argv and environment systemd would give instance `instance` (see the module doc)."""
    env = {}
    for key, value in service_settings(unit_text):
        value = value.replace("%i", instance)
        if key == "Environment":
            for assignment in shlex.split(value):
                name, _, val = assignment.partition("=")
                env[name] = val
        elif key == "EnvironmentFile":
            path = pathlib.Path(env_files.get(value.lstrip("-"), "/nonexistent"))
            if path.exists():
                for line in path.read_text().splitlines():
                    if line.strip() and not line.lstrip().startswith("#"):
                        name, _, val = line.partition("=")
                        env[name.strip()] = val.strip()
            else:
                assert value.startswith("-"), f"{value} is required but absent"
    (exec_start,) = [v for k, v in service_settings(unit_text) if k == "ExecStart"]
    argv = []
    for word in shlex.split(exec_start.replace("%i", instance)):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                               lambda m: env.get(m.group(1), ""), word))
    return argv, env


def test_instance_and_overrides_reach_weightcastd(tmp_path):
    fake = tmp_path / "weightcastd"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    common = tmp_path / "weightcastd.env"
    common.write_text(f"WEIGHTCASTD={fake}\nWEIGHTCASTD_ARGS=--log-level debug\n")
    rank_file = tmp_path / "weightcastd@3.env"
    rank_file.write_text("WEIGHTCAST_CONFIG=/srv/group.yaml\nWEIGHTCASTD_ARGS=--stay\n")
    env_files = {"/etc/weightcast/weightcastd.env": common,
                 "/etc/weightcast/weightcastd@3.env": rank_file}

    argv, env = expand_exec_start(UNIT.read_text(), "3", env_files)
    result = subprocess.run(argv, env=env, capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == ["--config", "/srv/group.yaml", "--rank", "3", "--stay"]

    argv, env = expand_exec_start(UNIT.read_text(), "5", env_files)  # no rank file for 5
    result = subprocess.run(argv, env=env, capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT_S)
    assert result.stdout.split("\n")[:-1] == ["--config", "/etc/weightcast/group.yaml",
                                              "--rank", "5", "--log-level", "debug"]


def test_the_example_env_file_sets_only_what_the_unit_reads():
    used = set(re.findall(r"\$\{?([A-Z_]+)\}?", UNIT.read_text().split("ExecStart=", 1)[1]
                          .splitlines()[0]))
    names = {line.lstrip("#").partition("=")[0] for line in ENV_EXAMPLE.read_text().splitlines()
             if re.match(r"#?[A-Z_]+=", line)}
    assert names == used == {"WEIGHTCASTD", "WEIGHTCAST_CONFIG", "WEIGHTCASTD_ARGS"}


def test_the_real_weightcastd_runs_the_instance_and_stops_on_sigterm(tmp_path):
    """The unit's command line, with the built weightcastd, runs rank 0 of a real group until
    SIGTERM (what `systemctl stop` sends) and then exits 0, which Restart=on-failure leaves."""
    if not os.access(WEIGHTCASTD, os.X_OK):
        pytest.skip(f"{WEIGHTCASTD} is not built (set WEIGHTCAST_BIN)")
    group = tmp_path / "group"
    init = subprocess.run([BIN_DIR / "weightcast", "group", "init", "--dir", group,
                           "--subscribers", "1", "--transports", "fs"],
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert init.returncode == 0, init.stderr
    env_file = tmp_path / "weightcastd.env"
    env_file.write_text(f"WEIGHTCASTD={WEIGHTCASTD}\nWEIGHTCAST_CONFIG={group}/group.yaml\n")
    argv, env = expand_exec_start(UNIT.read_text(), "0",
                                  {"/etc/weightcast/weightcastd.env": env_file})
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        time.sleep(1.0)  # long enough to bind and start serving; an early exit shows below
        assert proc.poll() is None, proc.communicate(timeout=COMMAND_TIMEOUT_S)[0]
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=COMMAND_TIMEOUT_S)
    assert proc.returncode == 0, output
    restart_prevent = [v for k, v in service_settings(UNIT.read_text())
                       if k == "RestartPreventExitStatus"]
    assert restart_prevent == ["2 126 127"]
