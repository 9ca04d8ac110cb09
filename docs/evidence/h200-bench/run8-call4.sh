#!/usr/bin/env bash
# Eighth run, call 4: deferring cuDNN's runtime-compiled plain configurations for
# convolutions that have a fused candidate (NativeOptions::defer_runtime_compiled, the
# default) against measuring them all first (TETHER_CUDNN_DEFER_RTC=0, the engine before).
# First loads with empty plan caches and the driver's JIT cache disabled (so neither variant
# profits from the other's compiles), then the CLI frame with each variant's warm cache,
# alternating, and the PyTorch peer in the same call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
CA=/tmp/plan-cache-defer; CB=/tmp/plan-cache-all; rm -rf "$CA" "$CB"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; ls ~/.nv 2>&1; } > "$OUT/host.log"
S=$(date +%s)
for v in "defer $CA 1" "all $CB 0"; do
  set -- $v
  echo "=== native_gpu, $1 (TETHER_CUDNN_DEFER_RTC=$3), empty plan cache, CUDA_CACHE_DISABLE=1" >> "$OUT/native.log"
  CUDA_CACHE_DISABLE=1 TETHER_CACHE_DIR=$2 TETHER_CUDNN_DEFER_RTC=$3 timeout 200 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 --test-threads 1 --nocapture 2>&1 | grep -E "loaded in|worst|detections|replay|allocations|latency|fused in|test result" >> "$OUT/native.log"
  echo "rc=${PIPESTATUS[0]} at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
  ls -la "$2" >> "$OUT/native.log" 2>&1
done
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model) |plan cache|native engine plan|WARN|rror'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  for rep in 1 2; do
    for p in fp16 tf32; do
      for v in "defer $CA 1" "all $CB 0"; do
        set -- $v
        echo "=== bench 320n $p staged, $1, rep $rep"
        TETHER_CACHE_DIR=$2 TETHER_CUDNN_DEFER_RTC=$3 timeout 90 "$T" -v bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision $p --runs 2000 --warmup 30 --staged 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{240}).*/\1/'
      done
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 80 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$OUT"
