#!/bin/bash
# Issue 26: the device sampler's tests (families/llm/tests/gpu_sample.rs) on the H200.
# Run on the GPU host as .device/s32-sampler/gpu.sh (the ignored folder carried there), with
# gpu_sample.xz (the stripped release test binary, `cargo test --release -p tether-llm
# --features cuda,build --test gpu_sample --no-run`, xz-compressed) beside it; $OUT is the
# device tool's output folder. Record: docs/evidence/llm-gpu.md, "Sampling on the device".
set -uo pipefail
D="$(cd "$(dirname "$0")" && pwd)"
cd /tmp && xz -dc "$D/gpu_sample.xz" > gpu_sample && chmod +x gpu_sample
{ date -u; hostname; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; } 2>&1 | tee "$OUT/host.txt"
timeout -s INT 75 ./gpu_sample --test-threads 1 --nocapture 2>&1 | tee "$OUT/gpu_sample.log"
echo "gpu_sample exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_sample.log"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TETHER_GPU_SAMPLE_QUICK=1 timeout -s INT 35 "$CS" --tool racecheck --racecheck-report all \
  ./gpu_sample --test-threads 1 device_sampler_equals 2>&1 | tail -25 | tee "$OUT/racecheck.log"
