#!/usr/bin/env bash
# Ninth run, call 3: the first load on a fresh machine. Before measuring, the load now
# compiles every candidate cuDNN plan on several threads (NativeOptions::load_threads, one
# cuDNN handle each) into the plan cache, and the measurement deserialises them. A/B in one
# call, each load with an empty plan cache AND an empty driver JIT cache (its own
# CUDA_CACHE_PATH): TETHER_LOAD_THREADS=1 (the compile inside the measurement, as before)
# against the default, alternating which goes first. Then native_gpu (correctness with the
# parallel compile, empty cache), the CLI bench and the PyTorch peer.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan|plan cache|compiled on|WARN'
n=0
load() { # threads net img precision
  n=$((n+1)); local c=/tmp/cold-$n
  rm -rf "$c"; mkdir -p "$c/plans" "$c/jit"
  echo "=== cold load $n: TETHER_LOAD_THREADS=$1 $2 $4"
  local t0; t0=$(date +%s.%N)
  TETHER_LOAD_THREADS=$1 TETHER_CACHE_DIR="$c/plans" CUDA_CACHE_PATH="$c/jit" timeout 120 "$T" -v bench "$W/$2.bundle" "$A/$3" --device cuda --precision $4 --runs 300 --warmup 30 --staged 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  load 1 nudenet astronaut.png fp16
  load 8 nudenet astronaut.png fp16
  load 8 nudenet astronaut.png tf32
  load 1 nudenet astronaut.png tf32
  load 1 doclaynet page.png fp16
  load 8 doclaynet page.png fp16
  load 8 nudenet astronaut.png fp32
  load 1 nudenet astronaut.png fp32
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/load.log" 2>&1
export TETHER_CACHE_DIR=/tmp/tether-plan-cache; rm -rf "$TETHER_CACHE_DIR"
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32 yolov8n_320_fp32 yolov8n_doclaynet_1024_fp32"
echo "=== native_gpu, empty plan cache, default load threads" >> "$OUT/native.log"
timeout 200 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
bench() { # net img runs precision [--staged]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  local t0; t0=$(date +%s.%N)
  timeout 90 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32 fp32; do
      for mode in "copied" "staged --staged"; do
        set -- $mode; name=$1; shift
        echo "=== bench $net $p $name"
        bench $net $img $runs $p "$@"
      done
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
ls -la "$OUT"
