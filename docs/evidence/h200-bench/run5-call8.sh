#!/usr/bin/env bash
# Fifth run, call 8 (final binaries): TF32 correctness (new native_gpu tests, channels-last by
# default) and the detection pipeline (gpu_pipeline; the real 320n over 20,000 frames).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_NATIVE_FRAMES=1000 TETHER_ASSETS="$A" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/native.log"
for t in yolov8n_320_tf32 yolov8n_doclaynet_1024_tf32; do
  echo "=== native_gpu $t" >> "$OUT/native.log"
  timeout 120 "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep -v " INFO " >> "$OUT/native.log"
done
{
  echo "=== gpu_pipeline (all detect GPU tests; real 320n hot path over 20000 frames)"
  TETHER_REAL_HOT_FRAMES=20000 TETHER_FIELD_CASES="$R/tests/field" timeout 200 "$B/bin/gpu_pipeline" --test-threads=1 --nocapture 2>&1 | grep -v " INFO "
} > "$OUT/pipeline.log" 2>&1
ls -la "$OUT"
