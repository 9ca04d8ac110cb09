#!/usr/bin/env bash
# Ninth run, call 4: the OCR and VAD families on the GPU with this run's engine (write-through
# with several producers; the parallel compile of a load's cuDNN plans; their fp32 plans are
# NCHW, so no pitched operands). Each test binary twice: an empty plan cache, then the one
# the first process wrote.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$D/assets" RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/families.log"
S=$(date +%s)
for b in ${BINS:-gpu_ocr gpu_vad}; do
  for pass in cold warm; do
    echo "=== $b, $pass plan cache" >> "$OUT/families.log"
    t0=$(date +%s.%N)
    timeout 200 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
    echo "$b rc=${PIPESTATUS[0]} in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s, at $(( $(date +%s) - S )) s" >> "$OUT/families.log"
  done
done
ls -la "$C" >> "$OUT/families.log"
ls -la "$OUT"
