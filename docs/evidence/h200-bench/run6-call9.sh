#!/usr/bin/env bash
# Sixth run, call 9: after the tidy that gives DeviceSession::run and launch_graphs_and_wait
# one segment selection and one parity step: gpu_pipeline (detection, bare launch) and
# gpu_vad (ping-pong state parity) on the GPU.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" RUST_BACKTRACE=1
timeout 250 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1; echo "gpu_pipeline rc=$?" >> "$OUT/pipeline.log"
timeout 200 "$B/bin/gpu_vad" --test-threads 1 --nocapture > "$OUT/vad.log" 2>&1; echo "gpu_vad rc=$?" >> "$OUT/vad.log"
ls -la "$OUT"
