#!/usr/bin/env bash
# Sixth run, call 5 (binaries of commit 6d24961, the review fixes): gpu_pipeline (a frame
# written in place on the GPU, the bare launch on it), then how reliable the p99.9 / p50
# bound is: 320n at each precision copied in and staged, four times each, interleaved;
# DocLayNet fp16 and a 1920x1080 frame twice each; --floor once; the PyTorch peer.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/bench.log"
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
timeout 200 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$?" >> "$OUT/pipeline.log"
ROWS='^\s+(total|upload|model|stage-in|floor|beyond-floor) |host time beyond|frames/s|rror'
{
  "$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
  "$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
  for rep in 1 2 3 4; do
    for p in fp16 tf32 fp32; do
      for mode in "copied" "staged --staged"; do
        set -- $mode; name=$1; shift
        echo "=== bench nudenet astronaut.png $p $name rep $rep"
        timeout 60 "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision $p --runs 3000 --warmup 30 "$@" 2>&1 | grep -E "$ROWS"
      done
    done
  done
  for rep in 1 2; do
    for m in "doclaynet page.png 1000" "nudenet hd.jpg 2000"; do
      set -- $m; net=$1; img=$2; runs=$3
      for mode in "copied" "staged --staged"; do
        set -- $mode; name=$1; shift
        echo "=== bench $net $img fp16 $name rep $rep"
        timeout 60 "$T" bench "$W/$net.bundle" "$A/$img" --device cuda --precision fp16 --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS"
      done
    done
  done
  for mode in "floor --floor" "staged-floor --staged --floor"; do
    set -- $mode; name=$1; shift
    echo "=== bench nudenet astronaut.png fp16 $name"
    timeout 60 "$T" bench "$W/nudenet.bundle" "$A/astronaut.png" --device cuda --precision fp16 --runs 3000 --warmup 30 "$@" --json "$OUT/bench-nudenet-fp16-$name.json" 2>&1 | grep -E "$ROWS"
  done
} >> "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
(cd "$OUT" && tar -czf json.tar.gz *.json && rm -f *.json)
ls -la "$OUT"
