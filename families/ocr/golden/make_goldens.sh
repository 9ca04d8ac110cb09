#!/usr/bin/env bash
# Re-create the OCR goldens from the fetched assets with rapidocr-onnxruntime
# 1.4.4's own pipeline (reference.py). Creates/updates a venv from
# requirements.txt (default /tmp/ocr-golden-venv, override with GOLDEN_VENV).
#
#   families/ocr/golden/make_goldens.sh          # fetch assets, write goldens
#   TETHER_ASSETS=/path/to/cache make_goldens.sh # other asset cache
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../../.." && pwd)"
ASSETS="${TETHER_ASSETS:-$REPO_ROOT/.assets}"
VENV="${GOLDEN_VENV:-/tmp/ocr-golden-venv}"
PYTHON="${PYTHON:-python3}"

TETHER_ASSETS="$ASSETS" "$REPO_ROOT/tests/fetch-assets"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"

"$VENV/bin/python" "$HERE/reference.py" --assets "$ASSETS" --out-dir "$HERE"
