#!/usr/bin/env bash
# Interop with the real readers and writers: Python torch.load(weights_only=True)
# and the safetensors package read our files; our readers read theirs, byte for byte.
#   run_interop.sh INTEROP_TOOL PYTHON
# Exits 77 (ctest: skipped) with the reason when the Python environment is missing.
set -euo pipefail
tool=$1
python=$2
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x "$python" ]] || ! "$python" -c "import torch, safetensors, numpy" 2>/dev/null; then
  echo "SKIPPED: $python cannot import torch, safetensors and numpy (run: make pyenv)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tool" write "$work/ours"
"$python" "$here/read_our_files.py" "$work/ours"
"$python" "$here/write_reference_files.py" "$work/theirs"
"$tool" check "$work/theirs/ref.safetensors" "$work/theirs/ref.safetensors.expected"
"$tool" check "$work/theirs/ref.pt" "$work/theirs/ref.pt.expected"
"$tool" check "$work/theirs/ref_param.pt" "$work/theirs/ref_param.pt.expected"
echo "interop: all checks passed"
