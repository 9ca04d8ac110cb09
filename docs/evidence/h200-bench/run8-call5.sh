#!/usr/bin/env bash
# Eighth run, call 5 (its first attempt packed a gpu_embed built for that crate alone, without
# the native engine: every test failed with NotCompiledIn; rebuilt from the workspace): the embed family on the GPU with the final engine (commit 15273f4:
# the memory re-plan after measurement and the plan cache; MiniLM has no convolution, so
# neither fusion nor the cache reaches its plans): goldens against onnxruntime and
# sentence-transformers, batches, self-test.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$D/assets" RUST_BACKTRACE=1 TETHER_CACHE_DIR=/tmp/tether-plan-cache
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/families.log"
for b in gpu_embed; do
  echo "=== $b" >> "$OUT/families.log"
  timeout 200 "$B/bin/$b" --test-threads=1 --nocapture 2>&1 | grep -v " INFO " >> "$OUT/families.log"
  echo "$b rc=${PIPESTATUS[0]}" >> "$OUT/families.log"
done
ls -la "$OUT"
