#!/usr/bin/env bash
# Issue 24 (structure), H200 call 3: OCR and VAD GPU tests of the restructured tree (HEAD).
# Carried: .device/c3/bins.tar.xz (gpu_ocr, gpu_vad) and .device/c3/assets (the PP-OCRv4
# models, page.png, text.png, silero_vad_op18_ifless.onnx, Front_Center.wav).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device/c3"; A="$D/assets"; B=/tmp/tether-dev3; rm -rf "$B"; mkdir -p "$B/bin"
tar -C "$B/bin" -xJf "$D/bins.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1 TETHER_CACHE_DIR=/tmp/tether-plan-cache3
S=$(date +%s)
for t in gpu_ocr gpu_vad; do
  { echo "=== $t"; date -u; timeout 240 "$B/bin/$t" --test-threads=1 2>&1 | grep -v " INFO "; echo "elapsed $(( $(date +%s) - S )) s"; } > "$OUT/$t.log" 2>&1
done
