#!/usr/bin/env bash
# Fifth run, call 10: channels-last on the GPU beyond YOLOv8:
# PP-OCRv4 det in TF32 (channels-last, a transposed convolution beside NHWC buffers).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_NATIVE_FRAMES=1000 TETHER_ASSETS="$D/assets" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/native.log"
for t in ppocr_v4_det_tf32; do
  echo "=== native_gpu $t" >> "$OUT/native.log"
  timeout 120 "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep -v " INFO " >> "$OUT/native.log"
done
ls -la "$OUT"
