#!/usr/bin/env bash
# Re-create the detect goldens from the fetched assets with the onnxruntime
# reference pipeline (reference.py). Creates/updates a venv from
# requirements.txt (default /tmp/golden-venv, override with GOLDEN_VENV).
#
#   families/detect/golden/make_goldens.sh           # fetch assets, write goldens
#   TETHER_ASSETS=/path/to/cache make_goldens.sh     # other asset cache
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# REPO_ROOT, ASSETS, VENV, VPY; assets fetched, venv ready (shared by every family).
source "$HERE/../../family/golden/golden-env.sh" /tmp/golden-venv

"$VPY" "$HERE/reference.py" \
  --model "$ASSETS/yolov8n-doclaynet.onnx" --image "$ASSETS/page.png" \
  --input-size 1024 1024 --out "$HERE/doclaynet_page.json"

"$VPY" "$HERE/reference.py" \
  --model "$ASSETS/320n.onnx" --image "$ASSETS/astronaut.png" \
  --input-size 320 320 --out "$HERE/nudenet_astronaut.json"
