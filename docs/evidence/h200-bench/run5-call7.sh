#!/usr/bin/env bash
# Fifth run, call 7: the embed family on the GPU with the final engine (fp32 plans: NCHW,
# with this run's copy ordering, tiled transposes and bias_act changes): goldens, self-tests;
# embeddings against onnxruntime and sentence-transformers goldens.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$D/assets" RUST_BACKTRACE=1 XDG_CACHE_HOME=/tmp/tether-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/families.log"
for b in gpu_embed; do
  echo "=== $b" >> "$OUT/families.log"
  timeout 200 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
done
ls -la "$OUT"
