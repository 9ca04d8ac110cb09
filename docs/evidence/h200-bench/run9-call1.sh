#!/usr/bin/env bash
# Ninth run, call 1: convolutions and poolings read and write slices of channels in place
# (pitched NHWC operands, `ActivationLayout::Nhwc`), and copy write-through with several
# producers (the head's outputs straight into the output concatenation's slots). Fresh host,
# empty plan cache: native_gpu on the default (pitched) layout, then the same 320n tests on
# the packed layout (`TETHER_NATIVE_LAYOUT=nhwc-packed`, the copies of the eighth run) for an
# A/B in one call; the fusion probe; gpu_pipeline; the CLI bench (both layouts for 320n) and
# the PyTorch peer in the same call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32 yolov8n_320_fp32"
echo "=== native_gpu, default layout (pitched), empty plan cache" >> "$OUT/native.log"
timeout 200 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
echo "=== native_gpu, TETHER_NATIVE_LAYOUT=nhwc-packed" >> "$OUT/native.log"
TETHER_NATIVE_LAYOUT=nhwc-packed timeout 120 "$B/bin/native_gpu" --ignored --exact yolov8n_320_fp16 yolov8n_320_tf32 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
timeout 60 "$B/bin/native_gpu" --ignored --exact cudnn_runtime_fusion_probe --nocapture > "$OUT/probe.log" 2>&1
echo "probe rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/probe.log"
timeout 100 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan|plan cache|WARN'
bench() { # net img runs precision [--staged]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  local t0; t0=$(date +%s.%N)
  timeout 90 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{260}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for p in fp16 tf32; do
    echo "=== bench nudenet $p staged, TETHER_NATIVE_LAYOUT=nhwc-packed"
    TETHER_NATIVE_LAYOUT=nhwc-packed bench nudenet astronaut.png 2000 $p --staged
  done
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
ls -la "$C" >> "$OUT/host.log"
ls -la "$OUT"
