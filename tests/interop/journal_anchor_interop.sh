#!/usr/bin/env bash
# The journal through its command line, checked by the real safetensors reader:
# Python writes three versions of a sharded-size model, `weightcast journal publish` makes an
# anchor and two deltas, Python loads the anchor through model.safetensors.index.json shard by
# shard, and `journal materialize` rebuilds the last version bit for bit.
#   journal_anchor_interop.sh WEIGHTCAST PYTHON
# Exits 77 (ctest: skipped) with the reason when the Python environment is missing.
set -euo pipefail
wc=$1
python=$2
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x "$python" ]] || ! "$python" -c "import torch, safetensors" 2>/dev/null; then
  echo "SKIPPED: $python cannot import torch and safetensors (run: make pyenv)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" "$here/journal_models.py" write "$work"
for v in 0 1 2; do
  "$wc" journal publish --root "$work/journal" --version "$v" --from "$work/model-v$v.safetensors" \
    --shard-bytes 200000 --part-bytes 4096 --threads 2
done
"$wc" journal inspect --root "$work/journal" > "$work/inspect.json"
"$wc" journal verify --root "$work/journal"
"$python" "$here/journal_models.py" read-anchor "$work/journal/v00000000000000000000" \
  "$work/model-v0.safetensors"
"$wc" journal materialize --root "$work/journal" --version 2 --out "$work/rebuilt-v2.safetensors"
"$python" "$here/journal_models.py" compare "$work/rebuilt-v2.safetensors" "$work/model-v2.safetensors"
echo "journal interop: all checks passed"
