#!/usr/bin/env bash
# Issue 24 (structure), H200 call 4: what calls 2 and 3 could not run for want of an asset
# (the native engine's conv variants, MiniLM int8 and PP-OCRv4 det checks; VAD with every
# channel WAV), and the embed family's GPU test.
# Carried: .device/c4/bins.tar.xz (native_gpu, gpu_vad, gpu_embed) and .device/c4/assets.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device/c4"; A="$D/assets"; B=/tmp/tether-dev4; rm -rf "$B"; mkdir -p "$B/bin"
tar -C "$B/bin" -xJf "$D/bins.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR=/tmp/tether-plan-cache4
export TETHER_NATIVE_FRAMES="${TETHER_NATIVE_FRAMES:-2000}"
S=$(date +%s)
{
  echo "=== native_gpu"; date -u
  for t in conv_variants_fp16_and_tf32 minilm_int8_fp32 ppocr_v4_det_fp32 ppocr_v4_det_tf32; do
    timeout 120 "$B/bin/native_gpu" --include-ignored --test-threads=1 --exact "$t" 2>&1 | grep -v " INFO "
  done
  echo "elapsed $(( $(date +%s) - S )) s"
} > "$OUT/native4.log" 2>&1
for t in gpu_vad gpu_embed; do
  { echo "=== $t"; timeout 200 "$B/bin/$t" --test-threads=1 2>&1 | grep -v " INFO "; echo "elapsed $(( $(date +%s) - S )) s"; } > "$OUT/$t.log" 2>&1
done
