#!/usr/bin/env bash
# Re-create the OCR goldens from the fetched assets with rapidocr-onnxruntime
# 1.4.4's own pipeline (reference.py). Creates/updates a venv from
# requirements.txt (default /tmp/ocr-golden-venv, override with GOLDEN_VENV).
#
#   families/ocr/golden/make_goldens.sh          # fetch assets, write goldens
#   TETHER_ASSETS=/path/to/cache make_goldens.sh # other asset cache
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# REPO_ROOT, ASSETS, VENV, VPY; assets fetched, venv ready (shared by every family).
source "$HERE/../../family/golden/golden-env.sh" /tmp/ocr-golden-venv

"$VPY" "$HERE/reference.py" --assets "$ASSETS" --out-dir "$HERE"
