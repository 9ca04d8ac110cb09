#!/usr/bin/env bash
# Sixth run, call 8 (commit 11e4297): the native engine's YOLOv8n GPU tests after
# ConvGraph::new was refactored to share its builder with new_fused (plain graphs unchanged).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1
timeout 480 "$B/bin/native_gpu" --ignored yolov8n --test-threads 1 --nocapture > "$OUT/native.log" 2>&1
echo "rc=$?" >> "$OUT/native.log"
ls -la "$OUT"
