#!/usr/bin/env bash
# Build everything runtime/gpu/h200-native.sh needs into .device/native/ (git-ignored).
# Runs on the development machine: no GPU, no CUDA needed.
#
#   runtime/gpu/native-prepare.sh          # YOLOv8n 320 + DocLayNet 1024 (about 58 MB)
#   runtime/gpu/native-prepare.sh --extra  # MiniLM int8 + PP-OCRv4 det instead (about 57 MB)
#
# The device tool carries at most 64 MiB per call: the two sets are two calls.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"; cd "$ROOT"
ASSETS="${TETHER_ASSETS:-$ROOT/.assets}"
D=.device/native; rm -rf "$D"; mkdir -p "$D/bin" "$D/assets" "$D/kernels/bin"
bin=$(cargo test --release -p tether-runtime --features cuda-native --test native_gpu --no-run \
        --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -n1)
cp "$bin" "$D/bin/native_gpu"; strip "$D/bin/native_gpu"
if [[ "${1:-}" == "--extra" ]]; then
  cp "$ASSETS/all-minilm-l6-v2-int8.onnx" "$ASSETS/ch_PP-OCRv4_det_infer.onnx" "$ASSETS/page.png" "$D/assets/"
  echo extra > "$D/set"
else
  cp "$ASSETS/320n.onnx" "$ASSETS/yolov8n-doclaynet.onnx" "$ASSETS/astronaut.png" "$ASSETS/page.png" "$D/assets/"
  cp runtime/kernels/bin/* "$D/kernels/bin/"; cp runtime/kernels/list-archs.sh "$D/kernels/"
  echo yolo > "$D/set"
fi
du -sh "$D" "$D"/bin/* "$D"/assets/*
