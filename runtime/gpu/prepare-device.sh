#!/usr/bin/env bash
# Build (release, stripped, xz-packed) everything runtime/gpu/h200-run.sh needs into .device/
# (git-ignored). Runs on the development machine: no GPU, no CUDA needed. The device tool
# carries at most 64 MiB a call, so the binaries travel as one .tar.xz and only the assets
# the chosen steps use are copied.
#
#   TESTS="cuda_device gpu_state trt_standin gpu_pipeline native_gpu gpu_ocr" (test binaries, default all)
#   ASSETS="320n.onnx ..." (default: the YOLO and OCR models and images, the onnx2torch wheel)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"; cd "$ROOT"
A="${TETHER_ASSETS:-$ROOT/.assets}"
TESTS="${TESTS:-cuda_device gpu_state trt_standin gpu_pipeline native_gpu gpu_ocr}"
ASSETS="${ASSETS:-320n.onnx astronaut.png yolov8n-doclaynet.onnx page.png text.png ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx}"
D=.device; rm -rf "$D"; mkdir -p "$D/pack/bin" "$D/assets"
json="$(mktemp)"; trap 'rm -f "$json"' EXIT
cargo build --release -p tether-rt
cargo test --workspace --release --no-run --message-format=json 2>/dev/null > "$json"
for t in $TESTS; do
  p="$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"] and m["target"]["name"]==sys.argv[2]: print(m["executable"])' "$json" "$t" | tail -n1)"
  [[ -n "$p" ]] || { echo "no test binary $t" >&2; exit 1; }
  cp "$p" "$D/pack/bin/$t"
done
# Where cargo really put it (a CARGO_TARGET_DIR or a build.target-dir in a config file
# outside the checkout both move it; a stale target/ here would otherwise be packed).
TD="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
cp "$TD/release/tether" "$D/pack/bin/tether"
strip "$D"/pack/bin/*
runtime/trt-probe/fetch-headers.sh >/dev/null
runtime/trt-standin/build.sh "$D/pack/trt-standin" "$A/trt-headers/11.4.0"
tar -C "$D/pack" -cJf "$D/pack.tar.xz" . && rm -rf "$D/pack"
for f in $ASSETS; do cp "$A/$f" "$D/assets/"; done
cp "$A"/wheels/onnx2torch-*.whl "$D/assets/" 2>/dev/null || echo "note: no onnx2torch wheel in $A/wheels (pip download --no-deps onnx2torch==1.5.15)"
du -sh "$D" "$D"/* ; du -ch "$D"/assets/* | tail -1
