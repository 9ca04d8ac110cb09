#!/usr/bin/env bash
# Fix-up device call of issue 3: re-validates the kernels after a change (exactness, overflow
# flag, graphs, hot path), re-measures the pre/post benchmark, and compares both real models
# (320n.onnx / astronaut.png, yolov8n-doclaynet.onnx / page.png) with cuDNN's TF32 on and off.
# Same layout as h200-run.sh (.device/bin/gpu_pipeline, .device/assets/, .device/kernels/).
set -uo pipefail
OUT="${OUT:-/tmp/tether-out}"; mkdir -p "$OUT"
D="$(pwd)/.device"
exec > >(tee "$OUT/h200-rerun.log") 2>&1
echo "== host"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
SP=$(python3 -c "import site;print(site.getsitepackages()[0])")
export LD_LIBRARY_PATH=$(ls -d $SP/nvidia/*/lib 2>/dev/null | tr '\n' ':')/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/tether-cache TETHER_ASSETS="$D/assets" TETHER_EVIDENCE_DIR="$OUT" RUST_LOG="${RUST_LOG:-info}"
chmod +x "$D"/bin/* "$D"/kernels/*.sh 2>/dev/null
T0=$(date +%s); step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
step "real-model comparisons in the background (NVRTC compile first), TF32 on (default) and off"
( for tf32 in default 0; do
    for t in real_model::tract_cuda_pipeline_matches_the_cpu_path_doclaynet real_model::tract_cuda_pipeline_matches_the_cpu_path; do
      echo "--- $t, NVIDIA_TF32_OVERRIDE=$tf32"
      if [[ $tf32 == default ]]; then "$D/bin/gpu_pipeline" --exact $t --nocapture --test-threads=1 2>&1 | grep -v INFO
      else NVIDIA_TF32_OVERRIDE=0 "$D/bin/gpu_pipeline" --exact $t --nocapture --test-threads=1 2>&1 | grep -v INFO; fi
    done
  done > "$OUT/real-models.log" 2>&1 ) &
BG=$!
step "kernel images"; CUOBJDUMP=/usr/local/cuda/bin/cuobjdump bash "$D/kernels/list-archs.sh"
step "exactness, overflow flag, graphs, staging/sync policies"
"$D/bin/gpu_pipeline" --nocapture --test-threads=1 --skip real_model --skip hot_path --skip bench 2>&1 | grep -v INFO
step "hot path"; "$D/bin/gpu_pipeline" hot_path --nocapture --test-threads=1 2>&1 | grep -v INFO
step "waiting for the real-model comparisons"; wait $BG; grep -E "^---|detections on GPU|panicked|score difference|test result|class " "$OUT/real-models.log"
step "bench: pre+post (10,000 runs each)"
"$D/bin/gpu_pipeline" --ignored --exact bench_pre_post_graph_vs_eager --nocapture 2>&1 | grep -v INFO
step "done"
