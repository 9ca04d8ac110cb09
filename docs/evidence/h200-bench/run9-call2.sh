#!/usr/bin/env bash
# Ninth run, call 2. Call 1 found that cuDNN's legacy API runs no algorithm on a pitched
# NHWC operand (every NHWC plan fell back to packed operands, as designed). Now a
# convolution over a pitched operand runs through the graph API only (refused when that has
# no plan either), and a pooling over one is tried once at load. Fresh host, empty plan
# cache: native_gpu on the default (pitched) layout, the same 320n tests on the packed layout
# (A/B in one call), the CLI bench on both layouts, the PyTorch peer.
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
"$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
# First: one load with every log line, so the outcome of each pitched step is on record.
timeout 120 "$T" -vv bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 200 --warmup 30 --staged > "$OUT/load-vv.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/load-vv.log"
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32"
echo "=== native_gpu, default layout (pitched)" >> "$OUT/native.log"
timeout 200 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
echo "=== native_gpu, TETHER_NATIVE_LAYOUT=nhwc-packed" >> "$OUT/native.log"
TETHER_NATIVE_LAYOUT=nhwc-packed timeout 120 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan|plan cache|WARN'
bench() { # net img runs precision [--staged]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  local t0; t0=$(date +%s.%N)
  timeout 90 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32; do
      for layout in nhwc-packed nhwc; do
        echo "=== bench $net $p staged, TETHER_NATIVE_LAYOUT=$layout"
        TETHER_NATIVE_LAYOUT=$layout bench $net $img $runs $p --staged
      done
      echo "=== bench $net $p copied"
      bench $net $img $runs $p
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 80 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$C" >> "$OUT/host.log"
ls -la "$OUT"
