#!/usr/bin/env bash
# Issue 24 (structure), H200 call 2: the tests of the restructured tree (HEAD) on the GPU.
# Carried: .device/c2/bins.tar.xz (stripped test binaries cuda_device, gpu_state, native_gpu,
# gpu_pipeline from `cargo test --workspace --release --no-run`) and .device/c2/assets
# (320n.onnx, yolov8n-doclaynet.onnx, astronaut.png).
# 1. The device layer and the request state (append kernel in one captured graph).
# 2. The native engine's checks: libraries, GPU vs host reference, YOLOv8n 320 and DocLayNet
#    1024 in fp32/TF32/fp16 against the host reference (TETHER_NATIVE_FRAMES graph replays).
# 3. detect on the GPU: exactness, graphs, staging, hot path, real models, field cases.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device/c2"; A="$D/assets"; B=/tmp/tether-dev2; rm -rf "$B"; mkdir -p "$B/bin"
tar -C "$B/bin" -xJf "$D/bins.tar.xz"
C=/tmp/tether-plan-cache2; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
export TETHER_NATIVE_FRAMES="${TETHER_NATIVE_FRAMES:-2000}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/host2.log" 2>&1
S=$(date +%s); el() { echo "elapsed $(( $(date +%s) - S )) s"; }
{
  for t in cuda_device gpu_state; do echo "=== $t"; timeout 60 "$B/bin/$t" --test-threads=1 2>&1 | grep -v " INFO "; done
  echo "=== native_gpu (TETHER_NATIVE_FRAMES=$TETHER_NATIVE_FRAMES)"
  timeout 300 "$B/bin/native_gpu" --include-ignored --test-threads=1 2>&1 | grep -v " INFO "
  el
} > "$OUT/native.log" 2>&1
{
  echo "=== gpu_pipeline"; TETHER_FIELD_CASES="$R/tests/field" timeout 180 "$B/bin/gpu_pipeline" --test-threads=1 2>&1 | grep -v " INFO "
  el
} > "$OUT/detect.log" 2>&1
