#!/usr/bin/env bash
# Seventh run, call 4: the fused graphs' kernels compiled ahead on all cores
# (engine::warm_fused_kernels) before the one-at-a-time measurement. Fresh host (cold driver
# JIT cache): load times of the YOLOv8n native_gpu tests (fp16, TF32, DocLayNet fp16), then
# warm-cache CLI loads (-v timestamps) and a bench sanity check.
# (Recreated after the call from the session's record: .device/ is rebuilt for every call;
# the engine change it ran is run7-call4-reverted.diff.)
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; ls ~/.nv 2>&1; } > "$OUT/host.log"
S=$(date +%s)
timeout 150 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 --test-threads 1 --nocapture > "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model) |rror|native engine plan|fused graphs compiled|measured in|loaded from libcuda'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32; do
      echo "=== bench $net $p staged (warm cache)"
      timeout 60 "$T" -vv bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 --staged 2>&1 | grep -E "$ROWS" | sed -E 's/^(.{200}).*/\1/'
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
du -sh ~/.nv/ComputeCache >> "$OUT/host.log" 2>&1
ls -la "$OUT"
