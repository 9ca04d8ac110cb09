#!/usr/bin/env bash
# Ninth run, call 5: the final code after review. Changes since call 3: without the graph
# API (TETHER_CUDNN_GRAPH=0) the NHWC layout packs slices of channels from the start (only
# the graph API runs pitched operands); the parallel compile runs only with tensor cores (fp16,
# TF32), not in fp32; the plan cache is saved before a pitched refusal; a view's element range
# in its root counts the view's offset (copy elision and write-through hazard checks).
# native_gpu on an empty plan cache (fp16 and fp32 320, DocLayNet TF32), the same 320 fp16 test
# with TETHER_CUDNN_GRAPH=0, and one CLI bench with its load time.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan|plan cache|compiled on|WARN'
{
  echo "=== cold load, 320 fp16 staged"
  t0=$(date +%s.%N)
  timeout 90 "$T" -v bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 2000 --warmup 30 --staged 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
} > "$OUT/bench.log" 2>&1
echo "=== native_gpu, plan cache of the bench above" >> "$OUT/native.log"
timeout 200 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_fp32 yolov8n_doclaynet_1024_tf32 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
echo "=== native_gpu, TETHER_CUDNN_GRAPH=0" >> "$OUT/native.log"
TETHER_CUDNN_GRAPH=0 timeout 100 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
ls -la "$OUT"
