#!/usr/bin/env bash
# Sixth run, calls 6 and 7 (the same script; call 7 after the probe kept its finalised plans): cuDNN runtime fusion probe (conv + bias + SiLU as one operation graph,
# channels-last fp16, YOLOv8n shapes) against the convolution alone; correctness of the
# fused output against the host.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; export OUT
R="$(pwd)"; D="$R/.device"; B=/tmp/tether-dev; rm -rf "$B"; mkdir -p "$B"
tar -C "$B" -xJf "$D/pack.tar.xz"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 RUST_BACKTRACE=1
ls /usr/local/cuda/lib64 | grep -i nvrtc > "$OUT/fusion.log" 2>&1
timeout 300 "$B/bin/native_gpu" --ignored --exact cudnn_runtime_fusion_probe --nocapture --test-threads 1 >> "$OUT/fusion.log" 2>&1
echo "rc=$?" >> "$OUT/fusion.log"
CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr timeout 120 "$B/bin/native_gpu" --ignored --exact cudnn_runtime_fusion_probe --nocapture --test-threads 1 2>&1 | grep -iE "nvrtc|fusion|error" | sort | uniq -c | sort -rn | head -30 > "$OUT/fusion-cudnn-errors.log"
ls -la "$OUT"
