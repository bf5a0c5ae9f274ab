"""examples/python/train_and_serve.py (what `make demo-python` runs) at a small size, in both
publication modes: exit status 0 and every version's engine digests equal to the trainer's."""

import os
import re
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.environ.get("WEIGHTCAST_SOURCE_DIR",
                                      os.path.join(os.path.dirname(__file__), "..", "..")),
                       "examples", "python", "train_and_serve.py")


@pytest.mark.parametrize("mode", ["snapshot", "hooked"])
def test_train_and_serve_small(mode, tmp_path):
    r = subprocess.run([sys.executable, EXAMPLE, "--steps", "6", "--width", "32", "--mode", mode,
                        "--timeout", "30", "--work-dir", str(tmp_path / "group")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if re.match(r"\s+\d+ ", line)]
    assert len(rows) == 7
    assert all(line.endswith("params+logits equal") for line in rows), r.stdout
    deltas = [line.split() for line in rows if " delta " in line]
    assert len(deltas) == 5  # v6 is an anchor (anchor_every 5)
    for cols in deltas:
        stored, full = int(cols[4].replace(",", "")), int(cols[5].replace(",", ""))
        assert 0 < stored < full / 2
    assert "all 7 versions" in r.stdout
