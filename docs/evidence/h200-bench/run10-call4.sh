#!/usr/bin/env bash
# Tenth run, call 4: each stream's cuDNN scratch now sized by what runs (the graph-API
# plans' scratch when the graph API was chosen; the legacy fallback behind it runs as
# IMPLICIT_GEMM when its own scratch does not fit): native_gpu's PP-OCRv4 detection fp32
# and TF32 (workspace sizes against call 3) and MiniLM; the embedding family (attention's
# matrix products on several streams, each with its own cuBLAS workspace) and the VAD family
# (call 3 carried one recording of nine), an empty plan cache then a warm one.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
echo "=== native_gpu" >> "$OUT/native.log"
timeout 150 "$B/bin/native_gpu" --ignored --exact ppocr_v4_det_fp32 ppocr_v4_det_tf32 conv_variants_fp16_and_tf32 minilm_int8_fp32 --test-threads 1 --nocapture >> "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
for b in gpu_embed gpu_vad; do
  for pass in cold warm; do
    echo "=== $b, $pass plan cache" >> "$OUT/families.log"
    t0=$(date +%s.%N)
    timeout 150 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
    echo "$b rc=${PIPESTATUS[0]} in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s, at $(( $(date +%s) - S )) s" >> "$OUT/families.log"
  done
done
ls -la "$OUT"
