#!/usr/bin/env bash
# Tenth run, call 1: independent branches of the network on several CUDA streams inside the
# captured graph (runtime/src/native/schedule.rs). A/B in one call on one plan cache:
# native_gpu with TETHER_NATIVE_STREAMS=1 (every step on the session's stream, as before)
# and with the default (4), then the CLI bench with 1, 4 and 8 streams, the PyTorch peer.
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
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_320_fp32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32"
for n in 4 1; do
  echo "=== native_gpu, TETHER_NATIVE_STREAMS=$n" >> "$OUT/native.log"
  TETHER_NATIVE_STREAMS=$n timeout 170 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
  echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
done
ROWS='^\s+(total|model|upload|stage-in) |frames/s|rror|native engine plan|plan cache|WARN|panick'
bench() { # net img runs precision [--staged]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  local t0; t0=$(date +%s.%N)
  timeout 60 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32 fp32; do
      for n in 1 4 8; do
        echo "=== bench $net $p staged, TETHER_NATIVE_STREAMS=$n"
        TETHER_NATIVE_STREAMS=$n bench $net $img $runs $p --staged
      done
    done
    echo "=== bench $net fp16 copied, default streams"
    bench $net $img $runs fp16
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
