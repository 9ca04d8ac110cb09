#!/usr/bin/env bash
# Seventh run, call 2 (commit ede912a, cuDNN runtime fusion in the native engine): load time
# with the driver's JIT cache disabled (a fresh machine) and the fused-candidate bound at 2
# and 1; then the benchmark matrix beside the PyTorch peer in the same call: 320n and
# DocLayNet in fp16 / TF32 / fp32, frame copied in and staged, fusion on, interleaved with
# fusion off (TETHER_CUDNN_FUSION=0) where cuDNN fuses; --floor once.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo; date -u; } > "$OUT/host.log"
S=$(date +%s)
{
  for t in yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16; do
    for f in 2 1; do
      echo "=== $t CUDA_CACHE_DISABLE=1 TETHER_CUDNN_FUSION=$f"
      CUDA_CACHE_DISABLE=1 TETHER_CUDNN_FUSION=$f timeout 60 "$B/bin/native_gpu" --ignored --exact $t --nocapture 2>&1 | grep -E "loaded in|latency|fused in|test result"
    done
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/load.log" 2>&1
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
ROWS='^\s+(total|model|upload|stage-in|floor|beyond-floor) |host time beyond|frames/s|rror|native engine plan'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for rep in 1 2 3; do
    for m in "nudenet astronaut.png 2000" "doclaynet page.png 1000"; do
      set -- $m; net=$1; img=$2; runs=$3
      for p in fp16 tf32 fp32; do
        for mode in "copied" "staged --staged"; do
          set -- $mode; name=$1; shift
          for f in 2 0; do
            [[ $f == 0 && ( $p == fp32 || $name == copied || $rep == 3 ) ]] && continue
            echo "=== bench $net $p $name fusion=$f rep $rep"
            TETHER_CUDNN_FUSION=$f timeout 60 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /'
          done
        done
      done
    done
  done
  echo "=== bench nudenet fp16 staged floor"
  timeout 60 "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 3000 --warmup 30 --staged --floor --json "$OUT/bench-nudenet-fp16-staged-floor.json" 2>&1 | grep -E "$ROWS"
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 100 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$OUT"
