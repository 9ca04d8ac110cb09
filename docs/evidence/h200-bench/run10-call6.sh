#!/usr/bin/env bash
# Tenth run, call 6: the committed code (b0e1c03: after call 5, a rebuilt plan shared by
# identical convolutions is checked against each one's stream slice, and a run shares its
# streams through an Rc instead of moving them out). Fresh host, empty plan cache:
# native_gpu YOLOv8n 320 TF32, DocLayNet TF32 and fp32 (not run on the final scratch sizing
# before), then the detection pipeline.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; A="$D/assets"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
C=/tmp/tether-plan-cache; rm -rf "$C"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TETHER_ASSETS="$A" TETHER_NATIVE_FRAMES=1000 RUST_BACKTRACE=1 TETHER_CACHE_DIR="$C"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; } > "$OUT/host.log"
S=$(date +%s)
timeout 150 "$B/bin/native_gpu" --ignored --exact yolov8n_320_tf32 yolov8n_doclaynet_1024_tf32 yolov8n_doclaynet_1024_fp32 --test-threads 1 --nocapture > "$OUT/native.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/native.log"
timeout 100 "$B/bin/gpu_pipeline" --test-threads 1 > "$OUT/pipeline.log" 2>&1
echo "rc=$? at $(( $(date +%s) - S )) s" >> "$OUT/pipeline.log"
ls -la "$OUT"
