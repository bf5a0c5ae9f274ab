#!/usr/bin/env bash
# The Python that interop tests read our files with: Debian's python3-torch belongs to
# /usr/bin/python3 (the python3 first on PATH may be another interpreter), so a virtual
# environment on top of it (--system-site-packages, to see torch and numpy) gets the
# `safetensors` package from PyPI. Idempotent.
#   cmake/setup_python_env.sh VENV_DIR
set -euo pipefail
venv=${1:?usage: setup_python_env.sh VENV_DIR}
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import torch, safetensors" 2>/dev/null; then
  exit 0
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "setup_python_env: /usr/bin/python3 cannot import torch (apt-get install python3-torch)" >&2
  exit 1
fi
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check safetensors
"$venv/bin/python" -c "import torch, safetensors; print('setup_python_env: torch', torch.__version__, 'safetensors', safetensors.__version__)"
