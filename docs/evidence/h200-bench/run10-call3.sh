#!/usr/bin/env bash
# Tenth run, call 3: each stream's cuDNN scratch is now sized for its own convolutions
# (call 2: YOLOv8n 320 fp32 reserved 6 x the largest legacy algorithm's scratch, a 438 MB
# workspace). native_gpu: the convolution variants (the fixture call 2 did not carry),
# YOLOv8n 320 fp32 and the host-reference check (workspace sizes); then the OCR and VAD
# families on the GPU (networks on several streams: PP-OCRv4, silero VAD's matrix products
# through cuBLAS), an empty plan cache then the one the first process wrote.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
echo "=== native_gpu" >> "$OUT/native.log"
timeout 150 "$B/bin/native_gpu" --ignored --exact conv_variants_fp16_and_tf32 yolov8n_320_fp32 host_reference_and_gpu_agree_on_noise ppocr_v4_det_fp32 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
for b in ${BINS:-gpu_ocr gpu_vad}; do
  for pass in cold warm; do
    echo "=== $b, $pass plan cache" >> "$OUT/families.log"
    t0=$(date +%s.%N)
    timeout 150 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
    echo "$b rc=${PIPESTATUS[0]} in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s, at $(( $(date +%s) - S )) s" >> "$OUT/families.log"
  done
done
ls -la "$OUT"
