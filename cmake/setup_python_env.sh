#!/usr/bin/env bash
# The project's Python, build/pyenv: Debian's python3-torch belongs to /usr/bin/python3 (the
# python3 first on PATH may be another interpreter), so a virtual environment on top of it
# (--system-site-packages, to see torch and numpy) gets from PyPI what Debian 12 lacks or has
# too old: `safetensors` (interop tests), `nanobind` (the extension module python/; CMake finds
# it through this interpreter, docs/DECISIONS.md "The Python package") and `pytest`
# (tests/python/) and `ml_dtypes` (the FP8 quantiser's reference, tests/codec/fp8_reference.py;
# 0.5 works with Debian's numpy 1.24) and `kubernetes-validate` (deploy/kubernetes's manifests
# checked against the Kubernetes API schemas, tests/deploy/kubernetes). Idempotent: an environment that has them all is left alone, one that
# lacks some gets only those.
#   cmake/setup_python_env.sh VENV_DIR
set -euo pipefail
venv=${1:?usage: setup_python_env.sh VENV_DIR}
# PyPI requirement and import name of each package the environment needs.
requirements=("safetensors" "nanobind>=2.4,<4" "pytest>=7" "ml_dtypes>=0.3,<0.6"
  "kubernetes-validate>=1.28")
modules=(safetensors nanobind pytest ml_dtypes kubernetes_validate)

if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "setup_python_env: /usr/bin/python3 cannot import torch (apt-get install python3-torch)" >&2
  exit 1
fi
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
missing=()
for i in "${!modules[@]}"; do
  if ! "$venv/bin/python" -c "import ${modules[$i]}" 2>/dev/null; then
    missing+=("${requirements[$i]}")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}"
"$venv/bin/python" -c "import torch, safetensors, nanobind, pytest, ml_dtypes; print('setup_python_env: torch', torch.__version__, 'safetensors', safetensors.__version__, 'nanobind', nanobind.__version__, 'pytest', pytest.__version__, 'ml_dtypes', ml_dtypes.__version__)"
