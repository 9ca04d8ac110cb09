#!/usr/bin/env bash
# Fifth run, call 9 (after the review fixes: shared filters, GEMM-fit refusal): channels-last
# beyond YOLOv8 on the GPU: the conv_variants fixture (depthwise, dilated, strided, poolings,
# nearest x2, concat; batch 1 and 2) and PP-OCRv4 det in fp16 and TF32; YOLOv8n 320 fp16/TF32.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_NATIVE_FRAMES=1000 TETHER_ASSETS="$D/assets" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/native.log"
for t in conv_variants_fp16_and_tf32 ppocr_v4_det_fp16_and_tf32 yolov8n_320_fp16 yolov8n_320_tf32; do
  echo "=== native_gpu $t" >> "$OUT/native.log"
  timeout 120 "$B/bin/native_gpu" --ignored --test-threads=1 --nocapture --exact "$t" 2>&1 | grep -v " INFO " >> "$OUT/native.log"
done
ls -la "$OUT"
