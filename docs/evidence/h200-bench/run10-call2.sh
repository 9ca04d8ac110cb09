#!/usr/bin/env bash
# Tenth run, call 2: the default is now 8 streams (call 1: 8 beat 4 beat 1), and the cuBLAS
# workspace has one slice per stream that runs matrix products only. Fresh host, empty plan
# cache: native_gpu (YOLOv8n 320 and DocLayNet 1024 in fp16, TF32, fp32; PP-OCRv4 detection; the convolution
# variants; GPU against the host reference), the detection pipeline (full frame through the
# native engine, allocation-free hot path), the CLI bench (staged, copied, the host-time
# floor) and the PyTorch peer.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=3000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
T="$B/bin/tether"; W=/tmp/tether-cli; mkdir -p "$W"
"$T" build --family detect --onnx "$A/320n.onnx" -o "$W/nudenet.bundle" --input-size 320 >/dev/null
"$T" build --family detect --onnx "$A/yolov8n-doclaynet.onnx" -o "$W/doclaynet.bundle" >/dev/null
TESTS="yolov8n_320_fp16 yolov8n_320_tf32 yolov8n_320_fp32 yolov8n_doclaynet_1024_fp16 yolov8n_doclaynet_1024_tf32 yolov8n_doclaynet_1024_fp32 ppocr_v4_det_fp32 ppocr_v4_det_tf32 conv_variants_fp16_and_tf32 host_reference_and_gpu_agree_on_noise libraries_are_found_and_reported"
echo "=== native_gpu, default streams, empty plan cache" >> "$OUT/native.log"
timeout 220 "$B/bin/native_gpu" --ignored --exact $TESTS --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
timeout 100 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
ROWS='^\s+(stage|total|model|upload|stage-in) |frames/s|rror|native engine plan|host time beyond|WARN|panick'
bench() { # net img runs precision [--staged]
  local net=$1 img=$2 runs=$3 p=$4; shift 4
  local t0; t0=$(date +%s.%N)
  timeout 60 "$T" -v bench "$W/$net.bundle" "$A/$img" --device cuda --precision $p --runs "$runs" --warmup 30 "$@" 2>&1 | grep -E "$ROWS" | sed -E 's/^.*native engine plan: /  plan: /; s/^(.{300}).*/\1/'
  echo "  process wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
{
  for m in "nudenet astronaut.png 3000" "doclaynet page.png 2000"; do
    set -- $m; net=$1; img=$2; runs=$3
    for p in fp16 tf32 fp32; do
      echo "=== bench $net $p staged"
      bench $net $img $runs $p --staged
      echo "=== bench $net $p copied"
      bench $net $img $runs $p
    done
  done
  echo "=== bench nudenet fp16 staged --floor"
  bench nudenet astronaut.png 3000 fp16 --staged --floor
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/bench.log" 2>&1
{
  python3 -m pip install -q --no-index --no-deps "$A"/onnx2torch-*.whl 2>&1 | tail -1
  timeout 80 python3 "$R/runtime/gpu/peer_torch.py" "$A/320n.onnx" 320 320 --fp16 --runs 1000 > "$OUT/peer-320n.json"
  timeout 90 python3 "$R/runtime/gpu/peer_torch.py" "$A/yolov8n-doclaynet.onnx" 1024 1024 --fp16 --runs 500 > "$OUT/peer-doclaynet.json"
} 2>&1 | grep "^pytorch" > "$OUT/peer.log"
echo "elapsed $(( $(date +%s) - S )) s" >> "$OUT/peer.log"
ls -la "$OUT"
