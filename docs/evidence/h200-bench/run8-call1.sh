#!/usr/bin/env bash
# Eighth run, call 1: the cuDNN plan cache (runtime/src/native/plan_cache.rs). Fresh host,
# empty cache: the YOLOv8n native_gpu tests compile their fused plans and save them; the
# same tests again deserialise them (load time, same correctness checks), and the fusion
# probe with its serialise round trip. Then gpu_pipeline
# (gpu_vad left out: the carry limit), a truncated cache file (a warning, compiled again,
# replaced), the cache off, and the bench against the PyTorch peer in the same call.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; ls ~/.nv 2>&1; } > "$OUT/host.log"
S=$(date +%s)
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32"
for pass in cold warm; do
  echo "=== native_gpu, $pass plan cache" >> "$OUT/native.log"
  timeout 150 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
  echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
  ls -la "$C" >> "$OUT/native.log" 2>&1
done
timeout 100 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "gpu_pipeline rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"

timeout 60 "$B/bin/native_gpu" --ignored --exact cudnn_runtime_fusion_probe --nocapture > "$OUT/probe.log" 2>&1
echo "probe rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/probe.log"
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
  F=$(ls "$C"/cudnn-plans-*.bin | head -1)
  echo "=== truncated cache file $(stat -c %s "$F") -> 1000 bytes, then 320n fp16 staged twice"
  truncate -s 1000 "$F"
  bench nudenet astronaut.png 500 fp16 --staged
  bench nudenet astronaut.png 500 fp16 --staged
  echo "=== cache off (TETHER_CACHE_DIR empty): 320n fp16 staged"
  TETHER_CACHE_DIR= bench nudenet astronaut.png 500 fp16 --staged
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
